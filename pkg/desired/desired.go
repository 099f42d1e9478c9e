// Package desired computes what the agent wants its own Node to look like,
// from the node's facts and the rules, and the smallest patches that get the
// observed Node there. It is pure: no I/O, no clocks.
package desired

import (
	"fmt"
	"maps"
	"net/netip"
	"slices"

	corev1 "k8s.io/api/core/v1"

	"github.com/talos-nodeinit/talos-nodeinit/pkg/contract"
	"github.com/talos-nodeinit/talos-nodeinit/pkg/facts"
	"github.com/talos-nodeinit/talos-nodeinit/pkg/netaddr"
	"github.com/talos-nodeinit/talos-nodeinit/pkg/rules"
)

// ProviderIDPolicy says where spec.providerID may come from. It can be set
// only once and never changed, so the default is the conservative one.
type ProviderIDPolicy string

const (
	// ProviderIDFromMetadata sets providerID only from platform metadata (or a rule override).
	ProviderIDFromMetadata ProviderIDPolicy = "metadata"
	// ProviderIDTalosFallback also sets Talos CCM's talos://<platform>/<nodeIP>
	// on platforms without provider IDs (metal, nocloud, …).
	ProviderIDTalosFallback ProviderIDPolicy = "talos-fallback"
	// ProviderIDNever leaves providerID alone.
	ProviderIDNever ProviderIDPolicy = "never"
)

// ParseProviderIDPolicy validates a flag value.
func ParseProviderIDPolicy(s string) (ProviderIDPolicy, error) {
	switch p := ProviderIDPolicy(s); p {
	case ProviderIDFromMetadata, ProviderIDTalosFallback, ProviderIDNever:
		return p, nil
	}
	return "", fmt.Errorf("provider-ID policy %q: want %s, %s or %s", s, ProviderIDFromMetadata, ProviderIDTalosFallback, ProviderIDNever)
}

// Inputs are everything the desired Node depends on.
type Inputs struct {
	NodeName     string
	Talos        facts.Talos
	Addresses    []netaddr.Address
	Classifier   netaddr.Classifier
	Rules        *rules.Rules
	Policy       ProviderIDPolicy
	AgentVersion string
	// AgentKey is the agent's public key (contract.EncodeAgentKey), published
	// in the metadata annotation for the coordinator to enrol.
	AgentKey string
	// ProvidedNodeIPs are the kubelet's --node-ip, from the Node's
	// alpha.kubernetes.io/provided-node-ip annotation: when Talos's NodeIP
	// resource is not known (the static pod), they choose among the kernel's
	// addresses (nodeIPs). The node's credential writes the annotation, so
	// it never adds an address.
	ProvidedNodeIPs []netip.Addr
}

// State is the desired Node, as far as the agent owns it.
type State struct {
	// Labels the node sets itself; their keys become owned-labels.
	Labels map[string]string
	// Annotations: rule annotations and the contract's. The rules' keys
	// become owned-annotations.
	Annotations map[string]string
	// ProviderID is "" when none may be set yet.
	ProviderID string
	Addresses  []corev1.NodeAddress
	// Rules is the rules' result, for explain and logs.
	Rules rules.Result
}

// Compute returns the desired state, or ok=false while there are no facts to
// act on (no platform metadata yet): nothing is written before that.
func Compute(in Inputs) (State, bool, error) {
	md := in.Talos.Metadata
	if md == nil {
		return State{}, false, nil
	}
	rf := rules.Facts{Metadata: *md}
	if in.Talos.System != nil {
		rf.System = *in.Talos.System
	}
	res := in.Rules.Evaluate(rf)
	eff := res.Metadata

	labels := map[string]string{}
	// topology sets the well-known labels from the effective metadata; a
	// value no label may hold is reported (run logs it, explain shows it).
	topology := []struct{ key, field, value string }{
		{contract.LabelTopologyRegion, "region", eff.Region}, {contract.LabelTopologyZone, "zone", eff.Zone}, {contract.LabelInstanceType, "instanceType", eff.InstanceType},
	}
	if in.Rules.Global().BetaTopologyLabels {
		// Talos CCM, like every cloud provider's node controller, also sets
		// the deprecated beta labels; selectors written against them keep
		// matching. NodeRestriction lets a node set them.
		topology = append(topology, []struct{ key, field, value string }{
			{corev1.LabelFailureDomainBetaRegion, "region", eff.Region}, {corev1.LabelFailureDomainBetaZone, "zone", eff.Zone}, {corev1.LabelInstanceType, "instanceType", eff.InstanceType},
		}...)
	}
	for _, t := range topology {
		if t.value == "" {
			continue
		}
		if err := contract.CheckLabel(t.key, t.value); err != nil {
			res.Errors = append(res.Errors, fmt.Sprintf("%s: metadata %s %q is not a valid label value, so the label is not set; rewrite it with a rule (platformMetadata: {%s: …})", t.key, t.field, t.value, t.field))
			continue
		}
		labels[t.key] = t.value
	}
	maps.Copy(labels, res.Labels)

	nodeIPs := nodeIPs(in)
	providerID := ""
	switch {
	case in.Policy == ProviderIDNever || in.Talos.Degraded != "":
		// From the kernel command line nothing is certain enough to set forever.
	case eff.ProviderID != "":
		providerID = eff.ProviderID
	case in.Policy == ProviderIDTalosFallback && eff.Platform != "" && len(nodeIPs) > 0:
		providerID = fmt.Sprintf("talos://%s/%s", eff.Platform, nodeIPs[0])
	}
	if providerID != "" {
		if err := contract.CheckProviderID(providerID); err != nil {
			res.Errors = append(res.Errors, fmt.Sprintf("spec.providerID: %s, so none is set; rewrite it with a rule (platformMetadata: {providerID: …})", err))
			providerID = ""
		}
	}

	annotations := maps.Clone(res.Annotations)
	meta := contract.Metadata{
		Platform: eff.Platform, Hostname: eff.Hostname, Region: eff.Region, Zone: eff.Zone,
		InstanceType: eff.InstanceType, InstanceID: eff.InstanceID, ProviderID: eff.ProviderID, SetProviderID: providerID,
		Spot: eff.Spot, InternalDNS: eff.InternalDNS, ExternalDNS: eff.ExternalDNS,
		AgentKey: in.AgentKey, AgentVersion: in.AgentVersion,
	}
	var err error
	set := func(key string, value string, e error) {
		if e != nil && err == nil {
			err = fmt.Errorf("%s: %w", key, e)
		}
		annotations[key] = value
	}
	v, e := contract.EncodeMetadata(meta)
	set(contract.AnnotationMetadata, v, e)
	v, e = contract.EncodePrefixes(in.Classifier.GlobalPrefixes(in.Addresses))
	set(contract.AnnotationPrefixes, v, e)
	v, e = contract.EncodeRequestedLabels(res.RequestedLabels)
	set(contract.AnnotationRequestedLabels, v, e)
	v, e = contract.EncodeRequestedTaints(res.Taints)
	set(contract.AnnotationRequestedTaints, v, e)
	v, e = contract.EncodeKeys(slices.Collect(maps.Keys(labels)))
	set(contract.AnnotationOwnedLabels, v, e)
	v, e = contract.EncodeKeys(slices.Collect(maps.Keys(res.Annotations)))
	set(contract.AnnotationOwnedAnnotations, v, e)
	if err != nil {
		return State{}, false, err
	}

	return State{
		Labels: labels, Annotations: annotations, ProviderID: providerID,
		Addresses: preferFamily(addresses(in, nodeIPs, eff.InternalDNS, eff.ExternalDNS), in.Rules.Global().PreferIPv6), Rules: res,
	}, true, nil
}

// nodeIPs are the InternalIPs: Talos's NodeIP resource when known;
// otherwise the annotated --node-ip addresses the kernel holds on a usable
// link, in the annotation's order, the first of each family only (the
// kubelet takes one per family). Whoever holds the node's credential writes
// the annotation: it may choose among the node's own addresses, never name
// another's, nor have more than two published and vouched for.
func nodeIPs(in Inputs) []netip.Addr {
	if len(in.Talos.NodeIPs) > 0 {
		return in.Talos.NodeIPs
	}
	var out []netip.Addr
	for _, ip := range in.ProvidedNodeIPs {
		ip = ip.Unmap()
		held := slices.ContainsFunc(in.Addresses, func(a netaddr.Address) bool {
			return in.Classifier.Usable(a) && a.Prefix.Addr().Unmap() == ip
		})
		sameFamily := slices.ContainsFunc(out, func(o netip.Addr) bool { return o.Is4() == ip.Is4() })
		if held && !sameFamily {
			out = append(out, ip)
		}
	}
	return out
}

// addresses: InternalIP = the kubelet's node IPs; ExternalIP = external
// kernel addresses then Talos's external ones (not repeating an InternalIP,
// and not one of Talos's shared VIPs: a VIP is on the interface of whichever
// control-plane node holds it, and is no node's own);
// Hostname = the node name; then InternalDNS and ExternalDNS.
func addresses(in Inputs, nodeIPs []netip.Addr, internalDNS, externalDNS string) []corev1.NodeAddress {
	var out []corev1.NodeAddress
	seen := map[netip.Addr]bool{}
	for _, ip := range nodeIPs {
		if ip = ip.Unmap(); !seen[ip] {
			seen[ip] = true
			out = append(out, corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: ip.String()})
		}
	}
	for _, ip := range slices.Concat(in.Classifier.ExternalIPs(in.Addresses), in.Talos.ExternalIPs) {
		if ip = ip.Unmap(); !seen[ip] && netaddr.IsExternal(ip) && !slices.Contains(in.Talos.VIPs, ip) {
			seen[ip] = true
			out = append(out, corev1.NodeAddress{Type: corev1.NodeExternalIP, Address: ip.String()})
		}
	}
	out = append(out, corev1.NodeAddress{Type: corev1.NodeHostName, Address: in.NodeName})
	if internalDNS != "" {
		out = append(out, corev1.NodeAddress{Type: corev1.NodeInternalDNS, Address: internalDNS})
	}
	if externalDNS != "" {
		out = append(out, corev1.NodeAddress{Type: corev1.NodeExternalDNS, Address: externalDNS})
	}
	return out
}

// preferFamily orders the InternalIPs and the ExternalIPs, each among
// themselves, IPv6 first (prefer6) or IPv4 first, keeping the order within
// a family; nil keeps the order as it is. (Talos CCM's global.preferIPv6.)
func preferFamily(addrs []corev1.NodeAddress, prefer6 *bool) []corev1.NodeAddress {
	if prefer6 == nil {
		return addrs
	}
	rank := func(a corev1.NodeAddress) int {
		ip, err := netip.ParseAddr(a.Address)
		if err != nil || (a.Type != corev1.NodeInternalIP && a.Type != corev1.NodeExternalIP) {
			return 0
		}
		if ip.Is6() == *prefer6 {
			return 0
		}
		return 1
	}
	out := slices.Clone(addrs)
	// addresses() writes each type as one run: order inside each run.
	for start := 0; start < len(out); {
		end := start + 1
		for end < len(out) && out[end].Type == out[start].Type {
			end++
		}
		slices.SortStableFunc(out[start:end], func(a, b corev1.NodeAddress) int { return rank(a) - rank(b) })
		start = end
	}
	return out
}
