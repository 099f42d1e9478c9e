package contract

import "strings"

// kubeletLabels are the kubernetes.io keys NodeRestriction lets a node set on
// itself (k8s.io/kubelet/pkg/apis.IsKubeletLabel; the same from v1.31 to v1.36).
var kubeletLabels = map[string]bool{
	"kubernetes.io/hostname":                   true,
	"topology.kubernetes.io/zone":              true,
	"topology.kubernetes.io/region":            true,
	"failure-domain.beta.kubernetes.io/zone":   true,
	"failure-domain.beta.kubernetes.io/region": true,
	"beta.kubernetes.io/instance-type":         true,
	"node.kubernetes.io/instance-type":         true,
	"kubernetes.io/os":                         true,
	"kubernetes.io/arch":                       true,
	"beta.kubernetes.io/os":                    true,
	"beta.kubernetes.io/arch":                  true,
}

// kubeletLabelNamespaces are the kubernetes.io label domains (and their
// subdomains) a node may set on itself.
var kubeletLabelNamespaces = []string{"kubelet.kubernetes.io", "node.kubernetes.io"}

// NodeMaySetLabel reports whether the NodeRestriction admission plugin lets
// a node identity add, change or remove the label key on its own Node object.
//
// It mirrors kube-apiserver (1.31 to 1.36; TestNodeIdentityLimits checks it): node-restriction.kubernetes.io keys are
// always refused; other kubernetes.io and k8s.io keys are refused unless they
// are kubelet labels; every other key (custom domains, unprefixed) is allowed.
// The integration table in pkg/harness/testcluster checks it against a real API server.
func NodeMaySetLabel(key string) bool {
	ns := labelNamespace(key)
	if inDomain(ns, "node-restriction.kubernetes.io") {
		return false
	}
	if !inDomain(ns, "kubernetes.io") && !inDomain(ns, "k8s.io") {
		return true
	}
	if kubeletLabels[key] {
		return true
	}
	for _, allowed := range kubeletLabelNamespaces {
		if inDomain(ns, allowed) {
			return true
		}
	}
	return false
}

// labelNamespace returns the prefix of a label key ("" when unprefixed).
func labelNamespace(key string) string {
	if prefix, _, ok := strings.Cut(key, "/"); ok {
		return prefix
	}
	return ""
}

// inDomain reports whether ns is domain or a subdomain of it.
func inDomain(ns, domain string) bool {
	return ns == domain || strings.HasSuffix(ns, "."+domain)
}
