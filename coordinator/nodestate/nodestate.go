// Package nodestate decides everything the coordinator wants one Node to be: what
// initialization waits for, its claimed addresses, the pod CIDR request and node prefix, the
// granted labels and taints, the initializing patch and the next NodeRecord. Decide is pure;
// the one stateful step, the allocator's answer to Desired.Allocate, comes back as Input.Allocated.
package nodestate

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/talos-nodeinit/talos-nodeinit/coordinator/config"
	"github.com/talos-nodeinit/talos-nodeinit/coordinator/finalize"
	"github.com/talos-nodeinit/talos-nodeinit/coordinator/records"
	"github.com/talos-nodeinit/talos-nodeinit/pkg/contract"
	"github.com/talos-nodeinit/talos-nodeinit/pkg/csrcheck"
	"github.com/talos-nodeinit/talos-nodeinit/pkg/ipam"
)

// Settings is the configuration Decide reads, parsed once.
type Settings struct {
	Config *config.Config
	// Networks are the node networks; Inventory the admin's bindings of
	// names to networks; Prefixes who may carve from which node prefix.
	Networks  []netip.Prefix
	Inventory []records.Binding
	Prefixes  records.PrefixRules
}

// NewSettings parses what Decide needs from the configuration.
func NewSettings(cfg *config.Config) Settings {
	s := Settings{Config: cfg, Networks: cfg.Networks()}
	for _, b := range cfg.Inventory {
		s.Inventory = append(s.Inventory, records.Binding{Names: b.Nodes, Networks: b.InventoryNetworks()})
	}
	s.Prefixes = records.PrefixRules{Inventory: s.Inventory, FirstClaim: cfg.FirstClaimPrefixesParsed(), Shared: cfg.SharedPrefixesParsed()}
	return s
}

// Review is the serving CSR handed to this Node's agent (approval.Handoff); empty when none.
type Review struct {
	// Ask is what csr-review says: the CSR, with its request's digest when the Node's attestation
	// is of an earlier request of that name (asking again; only the agent writes attestations).
	Ask contract.Review
	// Serving is what the record keeps of the CSR (SANs, validity), for a review at initialization.
	Serving *records.Serving
}

// value is the csr-review annotation's value, "" when none is asked.
func (r Review) value() string {
	if r.Ask.CSR == "" {
		return ""
	}
	return r.Ask.String()
}

// Input is everything Decide reads.
type Input struct {
	Node *corev1.Node
	// Record is the Node's NodeRecord, nil when there is none.
	Record *records.Record
	// Reserved are the ranges the Node may never claim.
	Reserved []csrcheck.Reserved
	// Others maps each address of the Node that another Node holds (by record or by listing first).
	Others map[netip.Addr]string
	// FirstSeen is since when the coordinator has seen this Node object list each address
	// continuously: a new claim dates from then.
	FirstSeen map[netip.Addr]time.Time
	// Near is what other records hold around a prefix (records.Store.Near); Listed the addresses
	// other Nodes list inside it, each since first seen (zero: not known, the earliest).
	Near, Listed func(netip.Prefix) []records.Holding
	// HasV4, HasV6: the allocator hands out segments of that family.
	HasV4, HasV6 bool
	Review       Review
	// ServingCSRs: the cluster's kubelets ask for serving certificates (a serving CSR of a Node
	// was decided, or a NodeRecord names a valid one). Asked: this Node's kubelet has a serving
	// CSR, made since the Node's creation, that the CSR reconciler has decided at least once.
	ServingCSRs, Asked bool
	// Allocated is the allocator's answer to an earlier Decide's Desired.Allocate, same input.
	Allocated []netip.Prefix
	// RefusedProviderID is a providerID the API server refused in an earlier patch of this Node
	// object (an admin's admission policy); the patch leaves it out while the report asks for it.
	RefusedProviderID RefusedProviderID
	Now               time.Time
}

// RefusedProviderID is a providerID the API server refused, and why.
type RefusedProviderID struct{ ID, Reason string }

// Desired is what the coordinator wants for the Node, and what it says.
type Desired struct {
	// Malformed lists the agent's annotations that cannot be read: nothing
	// granted changes (Record may still release withdrawn addresses).
	Malformed []string
	// InvalidPodCIDR: the Node's spec.podCIDRs cannot be parsed; nothing is written.
	InvalidPodCIDR error
	// NotAdopted: an initialized Node without a record, left alone
	// (adoptExisting off). Adopting: it is adopted by this sync.
	NotAdopted, Adopting bool
	// Waiting lists what initialization waits for; nothing is written while it is not empty.
	// RecheckAfter: it waits for the kubelet's serving CSR, at most this long from now.
	Waiting      []string
	RecheckAfter time.Duration

	// Claims are the addresses recorded as the Node's; Refused those the claim policy refuses;
	// Contested those another Node holds ("ip: Node x"); RecheckClaims: look again later.
	Claims        []records.Claim
	Refused       []string
	Contested     string
	RecheckClaims bool

	// Request is the pod CIDR request; Allocate asks the controller for the allocator's answer
	// (Input.Allocated) before the rest can be decided. PrefixHolder is the other Node holding
	// the node prefix the request would carve from, PrefixRefused why this Node may not use it.
	Request       ipam.Request
	Allocate      bool
	PrefixHolder  string
	PrefixRefused string
	PrefixSet     netip.Prefix

	// Record is the record to write before the Node (nil: unchanged); After and Unpatched what
	// it says once Patch applied or failed (nil: as Record), Unpatched without the patch's grants.
	Record, After, Unpatched *records.Spec
	// Patch is the one merge patch for the Node (nil: nothing to write).
	Patch []byte
	Plan  finalize.Plan
	// Initialize: the patch removes the uninitialized taint; CIDRs are the pod CIDRs it sets.
	Initialize bool
	CIDRs      []netip.Prefix
	// Enrolled: the record enrols the agent's key on first use; PendingKey: it holds a newly
	// published key that no first use allows.
	Enrolled, PendingKey bool
}

// Decide computes the Node's desired state. It writes nothing and reads
// only its input. Its one error is a patch that cannot be encoded.
func Decide(s Settings, in Input) (Desired, error) {
	var d Desired
	node, rec, cfg := in.Node, in.Record, s.Config
	rep := finalize.Read(node)
	refusedID := ""
	if r := in.RefusedProviderID; r.ID != "" && rep.Metadata != nil && rep.Metadata.SetProviderID == r.ID {
		// Only the providerID is dropped, as a value CheckProviderID refuses; the join goes on
		// (with requireProviderID it waits for one set by whoever the policy allows).
		md := *rep.Metadata
		md.SetProviderID = ""
		rep.Metadata = &md
		refusedID = fmt.Sprintf("providerID %q: the API server refused it (%s)", r.ID, r.Reason)
	}
	// A record describes one Node object (NodeUID). The first sync of another object of its name
	// releases the old one's holdings, as its deletion does, whatever this one waits for: claims
	// of an object that is gone must not hold other Nodes' addresses.
	stale := StaleRecord(node, rec)
	if len(rep.Problems) > 0 {
		d.Malformed = rep.Problems
		d.Record = releaseWithdrawn(node, rec, cfg.MaxNodeAddresses)
		if stale != nil {
			d.Record = stale
		}
		return d, nil
	}
	uninitialized := contract.Uninitialized(node)
	unrecorded := rec == nil || rec.Spec.NotAdopted && rec.Spec.NodeUID == string(node.UID)
	if unrecorded && !uninitialized && !cfg.AdoptExisting {
		d.NotAdopted = true
		if rec == nil {
			// No later Node object of the name enrols a key on first use.
			d.Record = &records.Spec{NodeUID: string(node.UID), NotAdopted: true}
		}
		return d, nil
	}
	d.Adopting = unrecorded && !uninitialized
	if uninitialized {
		d.Waiting = finalize.Waiting(node, rep, cfg.RequireProviderID)
	}
	existing, err := finalize.PodCIDRs(node)
	if err != nil {
		d.InvalidPodCIDR = err
		d.Record = stale
		return d, nil
	}

	var prev records.Spec
	if rec != nil {
		prev = rec.Spec
		if prev.NodeUID != "" && prev.NodeUID != string(node.UID) {
			// The Node was re-created: the old object's grants and claims went with it; what
			// belongs to the machine and the name stays (records.Survives).
			prev = records.Survives(prev)
		}
	}
	if uninitialized && len(d.Waiting) == 0 {
		if left := csrWait(cfg.CSRInitWait(), in, prev); left > 0 {
			d.Waiting = append(d.Waiting, "its kubelet's serving CSR (csr.initWait)")
			d.RecheckAfter = left
		}
	}
	current := Addresses(node, cfg.MaxNodeAddresses)
	pol := records.ClaimPolicy{Networks: s.Networks, Reserved: in.Reserved, Max: cfg.MaxNodeAddresses, Node: node.Name, Inventory: s.Inventory}
	d.Claims, d.Refused = records.NextClaims(prev.Addresses, current, in.Others, in.FirstSeen, pol, in.Now)
	d.Contested = contestedBy(in.Others, d.Claims)
	d.RecheckClaims = len(in.Others) > 0

	d.Request = finalize.Request(records.ClaimedIPs(d.Claims), rep, s.Networks, in.HasV4, in.HasV6)
	// Its own addresses never go into its segments, reserved or not: the
	// Node's event, which reserves them, may not have run yet.
	d.Request.Avoid = current
	prefix := d.nodePrefix(s, in, node.Name, prev.Prefix, existing)
	d.Request.AvoidRanges = avoidRanges(s, node.Name, d.Request)
	if cfg.IPAMEnabled() && len(existing) == 0 && len(d.Waiting) == 0 {
		if in.Allocated == nil {
			d.Allocate = true
			d.Record = stale // written even when the allocation fails
			return d, nil
		}
		d.CIDRs = in.Allocated
	}
	if len(d.Waiting) > 0 {
		if refusedID != "" {
			d.Plan.Refused = append(d.Plan.Refused, refusedID+"; initialization waits for one set by whoever may")
		}
		d.Record = stale
		return d, nil
	}
	d.Initialize = uninitialized
	review := in.Review
	d.Plan, err = finalize.Compute(node, rep, finalize.Inputs{
		Grants: cfg.Grants, ClusterName: cfg.ClusterName, CIDRs: d.CIDRs, Initialize: d.Initialize,
		Review:         review.value(),
		PreviousLabels: prev.GrantedLabels, PreviousTaints: prev.GrantedTaints,
	})
	if err != nil {
		return d, fmt.Errorf("the patch for Node %s: %w", node.Name, err)
	}
	if refusedID != "" && d.Initialize {
		d.Plan.Refused = append(d.Plan.Refused, refusedID+"; the coordinator initializes the Node without it (its agent sets it itself if the API server lets nodes)")
	}
	d.Patch = d.Plan.Patch

	next := prev
	next.NodeUID = string(node.UID)
	next.Adopted = prev.Adopted || d.Adopting
	next.NotAdopted = false
	if rec == nil && records.MayEnrolOnFirstUse(nil, string(node.UID), uninitialized, d.Adopting) {
		next.EnrolUID = string(node.UID)
	}
	next.Addresses = d.Claims
	next.Prefix = prefix
	// The record holds, by value, what the patch rewrites or removes until
	// the patch is applied (grants are owned by value: finalize.Owned).
	next.GrantedLabels, next.GrantedTaints = d.Plan.Holding.Labels, d.Plan.Holding.Taints
	if rep.Metadata != nil && rep.Metadata.AgentKey != "" {
		if key, err := contract.DecodeAgentKey(rep.Metadata.AgentKey); err == nil {
			published := contract.EncodeAgentKey(key) // re-encoded: nothing node-written is kept verbatim
			switch {
			case published == next.AgentKey:
				next.PendingAgentKey = ""
			case next.AgentKey == "" && (d.Initialize || d.Adopting) && cfg.CSR.Enrolment != config.EnrolApprove &&
				records.MayEnrolOnFirstUse(rec, string(node.UID), uninitialized, d.Adopting):
				// Trust on first use: the first Node object of this name, at its join.
				now := in.Now
				next.AgentKey, next.AgentKeyEnrolled, next.PendingAgentKey = published, &now, ""
				d.Enrolled = true
			default:
				// No first use left: an admin enrols it from the record.
				next.PendingAgentKey = published
			}
		}
	}
	d.PendingKey = next.PendingAgentKey != "" && next.PendingAgentKey != prev.PendingAgentKey
	if review.Ask.CSR != "" && d.Initialize && (prev.Serving == nil || in.Now.After(prev.Serving.ValidUntil)) {
		// Recorded with the initializing write, so the approval costs none; never over a valid
		// certificate of an earlier object of this name, which the renewal rule compares with.
		next.Serving = review.Serving
	}
	if rec == nil || !next.Equal(rec.Spec) {
		d.Record = &next
	}
	// Once the patch applied, the values it rewrote or removed are no longer the coordinator's,
	// so an admin who sets one again is never overridden. Only such a patch costs this write.
	if d.Patch != nil {
		d.After = granting(next, d.Plan.Owns)
		// A grant is recorded before the patch that writes it; should the patch fail, the record
		// lets it go, so a value someone else sets meanwhile is never taken for ours (class 5).
		d.Unpatched = granting(next, d.Plan.Unpatched)
	}
	return d, nil
}

// granting is next holding exactly g, or nil when next holds g already.
func granting(next records.Spec, g finalize.Grants) *records.Spec {
	if slices.Equal(next.GrantedLabels, g.Labels) && slices.Equal(next.GrantedTaints, g.Taints) {
		return nil
	}
	next.GrantedLabels, next.GrantedTaints = g.Labels, g.Taints
	return &next
}

// csrWait is how much longer initialization waits for the kubelet's serving CSR, so the
// initializing patch asks for its review and the record names its certificate in one write.
// It waits only while the cluster's kubelets ask for serving certificates, this one has not,
// and no valid certificate of the name is recorded (then the kubelet does not ask). It counts
// from the earlier of the Node's creation and the first sight of one of its addresses, so a
// clock behind the API server's never makes it longer.
func csrWait(wait time.Duration, in Input, prev records.Spec) time.Duration {
	if wait <= 0 || !in.ServingCSRs || in.Asked || in.Review.Ask.CSR != "" ||
		prev.Serving != nil && in.Now.Before(prev.Serving.ValidUntil) {
		return 0
	}
	start := in.Node.CreationTimestamp.Time
	for _, seen := range in.FirstSeen {
		if seen.Before(start) {
			start = seen
		}
	}
	return min(start.Add(wait).Sub(in.Now), wait)
}

// nodePrefix decides whether the Node may carve its IPv6 pod segment from the request's node
// prefix (records.NodePrefix) and returns the prefix its record holds after this sync. A
// prefix another Node holds is taken out of the request: the IPv6 pool serves, if any.
func (d *Desired) nodePrefix(s Settings, in Input, name, held string, existing []netip.Prefix) string {
	if !d.Request.IPv6Prefix.IsValid() {
		return held
	}
	set, segBits, err := ipam.SegmentFor(d.Request.IPv6Prefix, d.Request.IPv6Addr)
	if err != nil {
		return held // the allocator reports it
	}
	if n := 1 << (segBits - set.Bits()); n < ipam.MinNodePrefixSegments && len(existing) == 0 {
		// Too few segments to keep the low end, where hosts have their
		// addresses, out of every one: the pool serves instead.
		d.PrefixRefused, d.PrefixSet = fmt.Sprintf("node prefix %s gives %d pod segments of /%d, too few to keep its low end (the addresses hosts are given there) out of every segment: a /112 or shorter prefix is carved from", set, n, segBits), set
		d.Request.IPv6Prefix, d.Request.IPv6Addr, d.Request.IPv6 = netip.Prefix{}, netip.Addr{}, in.HasV6
		return held
	}
	var near []records.Holding
	if in.Near != nil {
		near = in.Near(set)
	}
	if in.Listed != nil {
		near = append(near, in.Listed(set)...)
	}
	mine := records.Earliest(set, d.Claims, in.FirstSeen)
	prefix, holder, why := s.Prefixes.NodePrefix(name, set, mine, held, near, existing)
	if holder == "" && why == "" || len(existing) > 0 {
		return prefix
	}
	d.PrefixHolder, d.PrefixRefused, d.PrefixSet = holder, why, set
	d.Request.IPv6Prefix, d.Request.IPv6Addr, d.Request.IPv6 = netip.Prefix{}, netip.Addr{}, in.HasV6
	return prefix
}

// avoidRanges are the parts of req's node prefix the inventory binds to other Nodes. Pools
// are left out: no Node address may lie in one (csrcheck.Certifiable), so a binding there
// protects nothing, and avoiding it would empty the pool for every Node it does not name.
func avoidRanges(s Settings, node string, req ipam.Request) []netip.Prefix {
	if len(s.Inventory) == 0 || !req.IPv6Prefix.IsValid() {
		return nil
	}
	set, _, err := ipam.SegmentFor(req.IPv6Prefix, req.IPv6Addr)
	if err != nil {
		return nil
	}
	return records.BoundElsewhere(s.Inventory, node, set)
}

// StaleRecord is rec released (records.Released) when it describes another Node object than
// node and still holds more than that; nil otherwise. A record without a NodeUID describes
// any Node of the name. Until Decide writes it, no CSR of the node is decided from the record.
func StaleRecord(node *corev1.Node, rec *records.Record) *records.Spec {
	if rec == nil || rec.Spec.NodeUID == "" || rec.Spec.NodeUID == string(node.UID) {
		return nil
	}
	kept := records.Released(rec.Spec)
	if kept.Equal(rec.Spec) {
		return nil
	}
	return &kept
}

// releaseWithdrawn is rec without the addresses node no longer lists; nil if that changes nothing.
func releaseWithdrawn(node *corev1.Node, rec *records.Record, max int) *records.Spec {
	if rec == nil || rec.Spec.NodeUID != string(node.UID) {
		return nil
	}
	current := Addresses(node, max)
	kept := slices.DeleteFunc(slices.Clone(rec.Spec.Addresses), func(cl records.Claim) bool {
		ip, err := netip.ParseAddr(cl.IP)
		return err != nil || !slices.Contains(current, ip)
	})
	if len(kept) == len(rec.Spec.Addresses) {
		return nil
	}
	next := rec.Spec
	next.Addresses = kept
	return &next
}

// contestedBy lists the addresses another Node holds ("ip: Node x"), sorted; "" when none.
func contestedBy(others map[netip.Addr]string, claims []records.Claim) string {
	var out []string
	for ip, owner := range others {
		if !slices.ContainsFunc(claims, func(c records.Claim) bool { return c.IP == ip.String() }) {
			out = append(out, fmt.Sprintf("%s: Node %s", ip, owner))
		}
	}
	slices.Sort(out)
	return strings.Join(out, ", ")
}

// Addresses are a Node's InternalIP and ExternalIP addresses in order, at most max of them,
// so what a hostile report can make the coordinator hold is bounded.
func Addresses(node *corev1.Node, max int) []netip.Addr {
	var out []netip.Addr
	for _, ip := range csrcheck.NodeIPs(csrcheck.Node{Name: node.Name, Addresses: node.Status.Addresses}) {
		if len(out) == max {
			break
		}
		if !slices.Contains(out, ip) {
			out = append(out, ip)
		}
	}
	return out
}

// AddressInOwnPodCIDR returns a Node address inside one of its pod CIDRs, and that CIDR.
// Allocation avoids this, but CIDRs given earlier or by another writer may not: serving CSRs
// naming such an address (a pod's) are refused, as pod CIDRs never change.
func AddressInOwnPodCIDR(cidrs []netip.Prefix, addrs []netip.Addr) (netip.Addr, netip.Prefix, bool) {
	for _, ip := range addrs {
		for _, c := range cidrs {
			if c.Contains(ip) {
				return ip, c, true
			}
		}
	}
	return netip.Addr{}, netip.Prefix{}, false
}
