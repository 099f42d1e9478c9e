// Package grants is the grant policy: which of the labels and taints a
// node requests the coordinator sets for it. A pattern is an exact key or
// a prefix ending in "*" ("node-role.kubernetes.io/*", "*"); Deny wins over
// Allow. It is pure, and neither the coordinator's nor the agent's: the
// coordinator's configuration holds a Policy (grants:), and `nodeinit-agent
// migrate` writes one for the rules it converts.
package grants

import (
	"fmt"
	"strings"

	"github.com/talos-nodeinit/talos-nodeinit/pkg/contract"
)

// Policy says which requested labels and taints are set.
type Policy struct {
	// Labels are the labels a node's rules may ask for.
	Labels Patterns `yaml:"labels"`
	// Taints are the taints a node's rules may ask for.
	Taints Patterns `yaml:"taints"`
}

// Patterns is an allow list with exceptions.
type Patterns struct {
	// Allow are the keys granted: exact, or prefixes ending in *.
	Allow []string `yaml:"allow,omitempty"`
	// Deny are the keys never granted, whatever Allow says (deny wins).
	Deny []string `yaml:"deny,omitempty"`
}

// Default label grants: Talos CCM's node.cloudprovider.kubernetes.io/
// labels only. No role: a role attracts workloads, so each one a node may
// ask for is listed (`migrate` lists the roles a Talos CCM configuration
// set). The control-plane role and node-restriction.kubernetes.io/ are never
// granted, whatever the lists say.
var (
	DefaultLabelAllow = []string{"node.cloudprovider.kubernetes.io/*"}
	DefaultLabelDeny  = []string{"node-role.kubernetes.io/control-plane", "node-role.kubernetes.io/master"}
	// Taints only repel workloads from the node asking; the keys Kubernetes
	// and cloud providers manage themselves are not grantable.
	DefaultTaintAllow = []string{"*"}
	DefaultTaintDeny  = []string{"node.kubernetes.io/*", "node.cloudprovider.kubernetes.io/*", "node-role.kubernetes.io/control-plane"}
)

// NeverGrantedLabel reports why a label key is never granted whatever the
// policy says; "" when it may be.
func NeverGrantedLabel(key string) string {
	prefix, _, ok := strings.Cut(key, "/")
	switch {
	case ok && (prefix == "node-restriction.kubernetes.io" || strings.HasSuffix(prefix, ".node-restriction.kubernetes.io")):
		return "node-restriction.kubernetes.io labels exist so nodes cannot set them"
	case key == "node-role.kubernetes.io/control-plane" || key == "node-role.kubernetes.io/master":
		return key + " marks control-plane Nodes, which the coordinator trusts"
	case key == contract.LabelClusterName || key == contract.LabelPlatform || key == contract.LabelLifecycle:
		return key + " is the coordinator's own (from its configuration and the node's facts)"
	}
	return ""
}

// MayGrantLabel decides whether a requested label is set for the node. It
// returns the reason when it is not.
func (g Policy) MayGrantLabel(key, value string) (bool, string) {
	if err := contract.CheckLabel(key, value); err != nil {
		return false, err.Error()
	}
	// The control-plane role is trusted (it exempts a control-plane Node's
	// own addresses from the API server's): never set on request.
	if why := NeverGrantedLabel(key); why != "" {
		return false, why + "; never granted"
	}
	return g.Labels.decide("label", key)
}

// MayGrantTaint decides whether a requested taint is set for the node.
func (g Policy) MayGrantTaint(t contract.Taint) (bool, string) {
	if err := t.Check(); err != nil {
		return false, err.Error()
	}
	if t.Key == contract.TaintUninitialized {
		return false, "the uninitialized taint is the coordinator's own"
	}
	return g.Taints.decide("taint", t.Key)
}

func (p Patterns) decide(kind, key string) (bool, string) {
	for _, d := range p.Deny {
		if match(d, key) {
			return false, fmt.Sprintf("%s %s is denied by the grant policy (%q)", kind, key, d)
		}
	}
	for _, a := range p.Allow {
		if match(a, key) {
			return true, ""
		}
	}
	return false, fmt.Sprintf("%s %s is not allowed by the grant policy", kind, key)
}

func match(pattern, key string) bool {
	if prefix, ok := strings.CutSuffix(pattern, "*"); ok {
		return strings.HasPrefix(key, prefix)
	}
	return pattern == key
}
