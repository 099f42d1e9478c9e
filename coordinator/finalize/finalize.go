// Package finalize is the coordinator's pure core for Nodes: it reads the agent's report, says
// what initialization waits for, and computes the one merge patch that sets pod CIDRs and grants,
// and removes the uninitialized taint. No I/O.
package finalize

import (
	"encoding/json"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/talos-nodeinit/talos-nodeinit/coordinator/config"
	"github.com/talos-nodeinit/talos-nodeinit/pkg/contract"
	"github.com/talos-nodeinit/talos-nodeinit/pkg/ipam"
)

// Reported is what the agent published on the Node, decoded.
type Reported struct {
	Metadata        *contract.Metadata
	Prefixes        []netip.Prefix
	RequestedLabels map[string]string
	RequestedTaints []contract.Taint
	// Problems are annotations that could not be decoded; they are ignored.
	Problems []string
}

// Read decodes the agent's annotations; a malformed one is reported, never acted on in part.
func Read(node *corev1.Node) Reported {
	var r Reported
	a := node.Annotations
	// The error quotes what the node wrote: it reaches an Event as node text.
	problem := func(key string, err error) {
		r.Problems = append(r.Problems, fmt.Sprintf("%s: %s", key, contract.NodeText(err.Error())))
	}
	if v, ok := a[contract.AnnotationMetadata]; ok {
		if m, err := contract.DecodeMetadata(v); err != nil {
			problem(contract.AnnotationMetadata, err)
		} else {
			r.Metadata = &m
		}
	}
	if v, ok := a[contract.AnnotationPrefixes]; ok {
		if p, err := contract.DecodePrefixes(v); err != nil {
			problem(contract.AnnotationPrefixes, err)
		} else {
			r.Prefixes = p
		}
	}
	if v, ok := a[contract.AnnotationRequestedLabels]; ok {
		if l, err := contract.DecodeRequestedLabels(v); err != nil {
			problem(contract.AnnotationRequestedLabels, err)
		} else {
			r.RequestedLabels = l
		}
	}
	if v, ok := a[contract.AnnotationRequestedTaints]; ok {
		if t, err := contract.DecodeRequestedTaints(v); err != nil {
			problem(contract.AnnotationRequestedTaints, err)
		} else {
			r.RequestedTaints = t
		}
	}
	return r
}

// providerID is what the initializing patch sets: the report's setProviderId while the Node has
// none and is uninitialized, else "" (and CheckProviderID's error). NodeRestriction lets a node
// set its empty providerID itself, so this grants nothing new; it saves the agent a write.
func providerID(node *corev1.Node, r Reported) (string, error) {
	if node.Spec.ProviderID != "" || r.Metadata == nil || !contract.Uninitialized(node) || r.Metadata.SetProviderID == "" {
		return "", nil
	}
	if err := contract.CheckProviderID(r.Metadata.SetProviderID); err != nil {
		return "", err
	}
	return r.Metadata.SetProviderID, nil
}

// Waiting lists what initialization still waits for, apart from pod CIDRs (set in the same patch).
func Waiting(node *corev1.Node, r Reported, requireProviderID bool) []string {
	var w []string
	if r.Metadata == nil {
		w = append(w, "the agent's metadata annotation")
	}
	if id, _ := providerID(node, r); requireProviderID && node.Spec.ProviderID == "" && id == "" {
		w = append(w, "spec.providerID")
	}
	if len(r.Prefixes) > 0 && !slices.ContainsFunc(r.Prefixes, func(p netip.Prefix) bool {
		return slices.ContainsFunc(Addresses(node), p.Contains)
	}) {
		// The agent's addresses have not caught up with its prefixes yet.
		w = append(w, "status.addresses to include an address in the reported prefixes")
	}
	for s := range strings.SplitSeq(node.Annotations[contract.AnnotationProvidedNodeIP], ",") {
		ip, err := netip.ParseAddr(strings.TrimSpace(s))
		if err != nil {
			continue
		}
		if !slices.ContainsFunc(node.Status.Addresses, func(a corev1.NodeAddress) bool {
			x, err := netip.ParseAddr(a.Address)
			return err == nil && x == ip && (a.Type == corev1.NodeInternalIP || a.Type == corev1.NodeExternalIP)
		}) {
			w = append(w, "status.addresses to include the kubelet's node IP "+ip.String())
		}
	}
	return w
}

// Addresses are the Node's IP addresses (reserved from allocation).
func Addresses(node *corev1.Node) []netip.Addr {
	var ips []netip.Addr
	for _, a := range node.Status.Addresses {
		if ip, err := netip.ParseAddr(a.Address); err == nil {
			ips = append(ips, ip.Unmap())
		}
	}
	return ips
}

// PodCIDRs parses spec.podCIDRs (falling back to spec.podCIDR).
func PodCIDRs(node *corev1.Node) ([]netip.Prefix, error) {
	raw := node.Spec.PodCIDRs
	if len(raw) == 0 && node.Spec.PodCIDR != "" {
		raw = []string{node.Spec.PodCIDR}
	}
	var out []netip.Prefix
	for _, s := range raw {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return nil, fmt.Errorf("spec.podCIDRs %q: %w", s, err)
		}
		out = append(out, p)
	}
	return out, nil
}

// Request is the allocation a Node needs: IPv4 when there is a pool, and IPv6 from its first
// reported prefix inside the node networks that holds one of its recorded addresses (claimed),
// else from the IPv6 pool; so no node gets a segment of another's prefix by reporting it.
func Request(claimed []netip.Addr, r Reported, networks []netip.Prefix, ipv4, ipv6Pool bool) ipam.Request {
	req := ipam.Request{IPv4: ipv4, IPv6: ipv6Pool}
	for _, p := range r.Prefixes {
		if !slices.ContainsFunc(networks, func(n netip.Prefix) bool { return n.Bits() <= p.Bits() && n.Contains(p.Addr()) }) {
			continue
		}
		for _, ip := range claimed {
			if p.Contains(ip) {
				req.IPv6, req.IPv6Prefix, req.IPv6Addr = true, p, ip
				return req
			}
		}
	}
	return req
}

// Inputs are the coordinator's decisions for one Node.
type Inputs struct {
	Grants      config.Grants
	ClusterName string
	// CIDRs are set when the Node has none yet; nil leaves pod CIDRs alone.
	CIDRs []netip.Prefix
	// Initialize removes the uninitialized taint.
	Initialize bool
	// Review asks the agent to attest this CSR in the same patch (the csr-review annotation), so
	// a CSR that arrived before initialization costs no separate write.
	Review string
	// PreviousLabels and PreviousTaints are the grants the coordinator's record holds: only those
	// Owned finds unchanged on the Node are removed or rewritten.
	PreviousLabels, PreviousTaints []string
}

// Plan is the patch, and the requests refused (for Events).
type Plan struct {
	// Patch is a JSON merge patch conditional on the Node's resourceVersion; nil: nothing to do.
	Patch   []byte
	Refused []string
	// ProviderID is the providerID the patch sets, "" when none.
	ProviderID string
	// Granted are the label keys, and GrantedTaints the taints
	// ("key:effect"), the coordinator wants on the Node and may set.
	Granted, GrantedTaints []string
	// Want are the labels (and values) the coordinator wants on the Node.
	Want map[string]string
	// Owns is what the record says once the patch applies: the labels and taints the coordinator
	// wrote and holds. Holding is what it says before: Owns and the values the patch rewrites or
	// removes, so a failed patch leaves them held. Unpatched is what it says after a failed patch:
	// the values it holds now, none the patch would have added (an admin may set one next, and it
	// would count as the coordinator's).
	Owns, Holding, Unpatched Grants
}

// coordinatorLabels come from configuration and platform metadata only; no request overrides them.
var coordinatorLabels = []string{contract.LabelClusterName, contract.LabelPlatform, contract.LabelLifecycle}

// TaintKey names a taint in a record.
func TaintKey(key string, effect corev1.TaintEffect) string { return key + ":" + string(effect) }

// Compute returns the one patch that brings the Node to what the coordinator wants: it adds what
// is absent and removes or rewrites only what Owned says it wrote and still holds.
func Compute(node *corev1.Node, r Reported, in Inputs) (Plan, error) {
	var plan Plan
	wantLabels := plan.labelsWanted(r, in)
	wantTaints := plan.taintsWanted(r, in)
	taintValues := make(map[string]string, len(wantTaints))
	for _, t := range wantTaints {
		taintValues[TaintKey(t.Key, t.Effect)] = t.Value
	}
	ownLabels, ownTaints := Owned(node, Grants{Labels: in.PreviousLabels, Taints: in.PreviousTaints}, wantLabels, taintValues)
	labels := plan.grantLabels(node, wantLabels, ownLabels)
	metadata := map[string]any{}
	if len(labels) > 0 {
		metadata["labels"] = labels
	}
	annotations := map[string]any{}
	if in.Review != "" && node.Annotations[contract.AnnotationCSRReview] != in.Review {
		annotations[contract.AnnotationCSRReview] = in.Review
	}
	if len(annotations) > 0 {
		metadata["annotations"] = annotations
	}

	spec := map[string]any{}
	if in.Initialize {
		switch id, err := providerID(node, r); {
		case err != nil:
			plan.Refused = append(plan.Refused, fmt.Sprintf("providerID: %s; the Node is initialized without one", err))
		case id != "":
			spec["providerID"] = id
			plan.ProviderID = id
		}
	}
	if len(in.CIDRs) > 0 && len(node.Spec.PodCIDRs) == 0 && node.Spec.PodCIDR == "" {
		cidrs := make([]string, len(in.CIDRs))
		for i, c := range in.CIDRs {
			cidrs[i] = c.String()
		}
		spec["podCIDR"], spec["podCIDRs"] = cidrs[0], cidrs
	}
	taints, changed := slices.Clone(node.Spec.Taints), false
	if in.Initialize {
		taints = slices.DeleteFunc(taints, func(t corev1.Taint) bool { return t.Key == contract.TaintUninitialized })
		changed = len(taints) != len(node.Spec.Taints)
	}
	taints, changed = plan.grantTaints(taints, wantTaints, ownTaints, changed)
	plan.Holding = holding(plan.Owns, ownLabels, ownTaints)
	plan.Unpatched = holding(Grants{}, ownLabels, ownTaints)
	if changed {
		spec["taints"] = taints
	}

	if len(metadata) == 0 && len(spec) == 0 {
		return plan, nil
	}
	// Conditional: a Node changed since read is re-read, not clobbered (taints are replaced whole).
	metadata["resourceVersion"] = node.ResourceVersion
	patch := map[string]any{"metadata": metadata}
	if len(spec) > 0 {
		patch["spec"] = spec
	}
	var err error
	plan.Patch, err = json.Marshal(patch)
	return plan, err
}

// labelsWanted are the platform's and configuration's labels and the requests the policy allows.
func (plan *Plan) labelsWanted(r Reported, in Inputs) map[string]string {
	want := map[string]string{}
	if md := r.Metadata; md != nil {
		if md.Platform != "" && contract.CheckLabel(contract.LabelPlatform, md.Platform) == nil {
			want[contract.LabelPlatform] = md.Platform
		}
		if md.Spot {
			want[contract.LabelLifecycle] = "spot"
		}
	}
	if in.ClusterName != "" && contract.CheckLabel(contract.LabelClusterName, in.ClusterName) == nil {
		want[contract.LabelClusterName] = in.ClusterName
	}
	for _, k := range slices.Sorted(maps.Keys(r.RequestedLabels)) {
		if slices.Contains(coordinatorLabels, k) {
			plan.Refused = append(plan.Refused, fmt.Sprintf("label %s is set by the coordinator from its configuration and the platform metadata; a node may not request it", k))
			continue
		}
		if ok, why := in.Grants.MayGrantLabel(k, r.RequestedLabels[k]); ok {
			want[k] = r.RequestedLabels[k]
		} else {
			plan.Refused = append(plan.Refused, why)
		}
	}
	return want
}

// grantLabels returns the labels part of the patch: a wanted label is added, or rewritten if the
// coordinator holds it (never someone else's); one it holds and no longer wants is removed.
func (plan *Plan) grantLabels(node *corev1.Node, want, own map[string]string) map[string]any {
	patch := map[string]any{}
	plan.Want = map[string]string{}
	for _, k := range slices.Sorted(maps.Keys(want)) {
		v := want[k]
		cur, set := node.Labels[k]
		_, ours := own[k]
		switch {
		case set && cur != v && !ours:
			plan.Refused = append(plan.Refused, fmt.Sprintf("label %s is already set (to %q) by someone else; the coordinator does not overwrite it", k, cur))
			continue
		case !set || cur != v:
			patch[k] = v
			plan.Owns.Labels = append(plan.Owns.Labels, LabelGrant(k, v))
		case ours:
			plan.Owns.Labels = append(plan.Owns.Labels, LabelGrant(k, v))
		}
		plan.Want[k] = v
	}
	for k := range own {
		if _, still := plan.Want[k]; !still {
			patch[k] = nil
		}
	}
	slices.Sort(plan.Owns.Labels)
	plan.Granted = slices.Sorted(maps.Keys(plan.Want))
	return patch
}

// taintsWanted are the allowed requested taints, one per key and effect (a taint's identity).
func (plan *Plan) taintsWanted(r Reported, in Inputs) []contract.Taint {
	var want []contract.Taint
	for _, t := range r.RequestedTaints {
		if ok, why := in.Grants.MayGrantTaint(t); !ok {
			plan.Refused = append(plan.Refused, why)
			continue
		}
		if slices.ContainsFunc(want, func(x contract.Taint) bool { return x.Key == t.Key && x.Effect == t.Effect }) {
			plan.Refused = append(plan.Refused, fmt.Sprintf("taint %s is requested with two values; the first is used", TaintKey(t.Key, t.Effect)))
			continue
		}
		want = append(want, t)
	}
	return want
}

// grantTaints brings taints (the Node's, being patched) to what is wanted, as grantLabels does;
// a held taint no longer wanted is removed as that exact key=value:effect only.
func (plan *Plan) grantTaints(taints []corev1.Taint, want []contract.Taint, own map[string]string, changed bool) ([]corev1.Taint, bool) {
	wanted := map[string]bool{}
	for _, t := range want {
		id := TaintKey(t.Key, t.Effect)
		i := slices.IndexFunc(taints, func(x corev1.Taint) bool { return x.Key == t.Key && x.Effect == t.Effect })
		_, ours := own[id]
		switch {
		case i >= 0 && taints[i].Value != t.Value && !ours:
			plan.Refused = append(plan.Refused, fmt.Sprintf("taint %s is already set (value %q) by someone else; the coordinator does not overwrite it", id, taints[i].Value))
			continue
		case i < 0:
			taints, changed = append(taints, corev1.Taint{Key: t.Key, Value: t.Value, Effect: t.Effect}), true
			plan.Owns.Taints = append(plan.Owns.Taints, TaintGrant(t.Key, t.Value, t.Effect))
		case taints[i].Value != t.Value:
			taints[i].Value, changed = t.Value, true
			plan.Owns.Taints = append(plan.Owns.Taints, TaintGrant(t.Key, t.Value, t.Effect))
		case ours:
			plan.Owns.Taints = append(plan.Owns.Taints, TaintGrant(t.Key, t.Value, t.Effect))
		}
		wanted[id] = true
	}
	for id, v := range own {
		if !wanted[id] {
			before := len(taints)
			taints = slices.DeleteFunc(taints, func(x corev1.Taint) bool { return TaintKey(x.Key, x.Effect) == id && x.Value == v })
			changed = changed || len(taints) != before
		}
	}
	slices.Sort(plan.Owns.Taints)
	plan.GrantedTaints = slices.Sorted(maps.Keys(wanted))
	return taints, changed
}
