// Package contract is the only place the agent↔coordinator protocol is
// spelled: the annotation and label keys under nodeinit.io, their versioned
// JSON payloads, and the NodeRestriction rule deciding which labels a node may
// set on itself. Neither side writes a key by hand.
package contract

import "strings"

// Domain is the prefix every key of the contract lives under.
const Domain = "nodeinit.io"

// InDomain reports whether a label, annotation or taint key is in Domain or
// a subdomain of it: keys only the contract may write.
func InDomain(key string) bool {
	return inDomain(strings.ToLower(labelNamespace(key)), Domain)
}

// Annotations written by the agent, with the node's own credentials.
const (
	// AnnotationMetadata holds the effective platform metadata (see Metadata).
	AnnotationMetadata = Domain + "/metadata"
	// AnnotationPrefixes holds the node's global IPv6 prefixes, preferred first.
	AnnotationPrefixes = Domain + "/prefixes"
	// AnnotationRequestedLabels holds labels the rules want but NodeRestriction forbids the node.
	AnnotationRequestedLabels = Domain + "/requested-labels"
	// AnnotationRequestedTaints holds taints the rules want; nodes may never set taints.
	AnnotationRequestedTaints = Domain + "/requested-taints"
	// AnnotationOwnedLabels holds the keys of labels the agent set itself.
	AnnotationOwnedLabels = Domain + "/owned-labels"
	// AnnotationOwnedAnnotations holds the keys of the rules' annotations the
	// agent set, so that one a rule no longer produces is removed.
	AnnotationOwnedAnnotations = Domain + "/owned-annotations"
	// AnnotationCSRAttestation holds the agent's verdict on the CSR named in AnnotationCSRReview.
	AnnotationCSRAttestation = Domain + "/csr-attestation"
)

// Annotations written by the coordinator, with its ServiceAccount.
const (
	// AnnotationGrantedLabels held the keys of labels the coordinator
	// granted, before its NodeRecords did. A node can write it, so it is
	// neither written nor read any more; tests forge it to show that.
	AnnotationGrantedLabels = Domain + "/granted-labels"
	// AnnotationCSRReview names the serving CSR the coordinator wants the agent to attest.
	AnnotationCSRReview = Domain + "/csr-review"
)

// Keys owned by Kubernetes and Talos CCM that both sides read or write.
const (
	// TaintUninitialized is set by a kubelet running with --cloud-provider=external.
	TaintUninitialized = "node.cloudprovider.kubernetes.io/uninitialized"
	// AnnotationProvidedNodeIP is the kubelet's --node-ip, set when the cloud provider is external.
	AnnotationProvidedNodeIP = "alpha.kubernetes.io/provided-node-ip"

	// LabelPlatform, LabelLifecycle and LabelClusterName are the Talos CCM
	// compatibility labels users' selectors rely on.
	LabelPlatform    = "node.cloudprovider.kubernetes.io/platform"
	LabelLifecycle   = "node.cloudprovider.kubernetes.io/lifecycle"
	LabelClusterName = "node.cloudprovider.kubernetes.io/clustername"

	LabelTopologyRegion = "topology.kubernetes.io/region"
	LabelTopologyZone   = "topology.kubernetes.io/zone"
	LabelInstanceType   = "node.kubernetes.io/instance-type"
)
