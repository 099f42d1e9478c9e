package controller

import (
	"context"
	"fmt"
	"hash/fnv"
	"net/netip"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/talos-nodeinit/talos-nodeinit/coordinator/approval"
	"github.com/talos-nodeinit/talos-nodeinit/coordinator/records"
	"github.com/talos-nodeinit/talos-nodeinit/pkg/contract"
	"github.com/talos-nodeinit/talos-nodeinit/pkg/coordinator/config"
	"github.com/talos-nodeinit/talos-nodeinit/pkg/coordinator/finalize"
	"github.com/talos-nodeinit/talos-nodeinit/pkg/ipam"
)

// syncNode brings one Node to what the coordinator wants. It decides from
// its configuration, its NodeRecord and cluster objects; the agent's
// annotations are requests the policy bounds. The record is written before
// the Node, so it always says what the coordinator set.
func (c *Coordinator) syncNode(ctx context.Context, name string) error {
	node, err := c.nodes.Get(name)
	if apierrors.IsNotFound(err) {
		return c.nodeGone(ctx, name)
	}
	if err != nil {
		return err
	}
	// Every Node's pod CIDRs are accounted for, whatever else holds it back.
	if cidrs, err := finalize.PodCIDRs(node); err == nil {
		c.reconcileCIDRs(node, cidrs)
	}
	rec, err := c.records.Get(name)
	if err != nil {
		return err
	}
	rep := finalize.Read(node)
	if len(rep.Problems) > 0 {
		// Never act on partial data: nothing the coordinator grants
		// changes. Withdrawn addresses are still released: a malformed
		// report must not pin a claim the Node no longer lists.
		for _, p := range rep.Problems {
			key, _, _ := strings.Cut(p, ":")
			c.m.MalformedReports.WithLabelValues(key).Inc()
		}
		c.say(node, "node", name, corev1.EventTypeWarning, "MalformedAgentReport",
			"nothing changed for this node until its agent's report can be read: "+strings.Join(rep.Problems, "; "))
		return c.releaseWithdrawn(ctx, node, rec)
	}
	uninitialized := finalize.Uninitialized(node)
	unrecorded := rec == nil || rec.Spec.NotAdopted && rec.Spec.NodeUID == string(node.UID)
	if unrecorded && !uninitialized && !c.settings.AdoptExisting {
		c.notAdopted(name, true)
		return c.rememberName(ctx, node, rec)
	}
	adopting := unrecorded && !uninitialized
	c.notAdopted(name, false)
	var waiting []string
	if uninitialized {
		waiting = finalize.Waiting(node, rep, c.settings.RequireProviderID)
	}
	existing, err := finalize.PodCIDRs(node)
	if err != nil {
		c.say(node, "node", name, corev1.EventTypeWarning, "InvalidPodCIDR", err.Error())
		return nil
	}

	now := time.Now()
	var prev records.Spec
	if rec != nil {
		prev = rec.Spec
		if prev.NodeUID != "" && prev.NodeUID != string(node.UID) {
			// The Node was re-created: what was recorded for the old object
			// (grants, claims) is gone with it. What belongs to the machine
			// and the name stays (records.Survives).
			prev = records.Survives(prev)
		}
	}
	// Claims are decided and written under the addresses' locks: two
	// workers never record one address for two Nodes.
	current := nodeAddresses(node, c.settings.MaxNodeAddresses)
	unlock := c.lockAddrs(slices.Concat(current, records.ClaimedIPs(prev.Addresses)))
	defer unlock()
	others := c.otherOwners(node.Name, current)
	claims, refused := records.NextClaims(prev.Addresses, current, others, c.claimPolicy(node), now)
	if len(refused) > 0 {
		c.m.AddressesRefused.Add(float64(len(refused)))
		c.say(node, "node", name, corev1.EventTypeWarning, "AddressNotRecorded",
			"not recorded as this Node's (never certified, never used for its pod CIDRs): "+strings.Join(refused, "; "))
	}
	if contested := contestedBy(others, claims); contested != "" {
		if c.say(node, "node", name, corev1.EventTypeWarning, "AddressHeldByOtherNode", "held by another Node, so never certified for this one nor used for its pod CIDRs: "+contested+
			". If that Node is not entitled to them, delete it (its record releases them) or bind their network to this Node's name in the coordinator's inventory") {
			c.m.Contested.WithLabelValues("address").Inc()
		}
	}
	if len(others) > 0 {
		// Another Node holds some of its addresses: look again later, as
		// well as when that Node's record releases them.
		c.nodeQueue.AddAfter(name, claimRetry)
	}

	var cidrs []netip.Prefix
	req := finalize.Request(records.ClaimedIPs(claims), rep, c.networks, c.hasV4, c.hasV6)
	prefix := c.nodePrefix(node, &req, claims, prev.Prefix, existing)
	if c.settings.IPAMEnabled() && len(existing) == 0 && len(waiting) == 0 {
		// Every observed Node address (this one's too) was reserved by
		// nodeChanged before this sync could run.
		c.mu.Lock()
		cidrs, err = c.alloc.Allocate(name, req)
		c.poolMetrics()
		c.mu.Unlock()
		if err != nil {
			c.m.Allocations.WithLabelValues(poolOf(req, netip.Prefix{}), "error").Inc()
			c.say(node, "node", name, corev1.EventTypeWarning, "PodCIDRAllocationFailed", err.Error())
			return fmt.Errorf("allocating pod CIDRs for %s: %w", name, err)
		}
	}
	c.setWaiting(name, node.ResourceVersion, len(waiting) > 0)
	if len(waiting) > 0 {
		// Nothing is written before the node can be initialized: then the
		// record, and CIDRs, labels, taints and the taint removal in one patch.
		return nil
	}
	initialize := uninitialized
	review, stale := c.reviewWanted(node)
	plan, err := finalize.Compute(node, rep, finalize.Inputs{
		Grants: c.settings.Grants, ClusterName: c.settings.ClusterName, CIDRs: cidrs, Initialize: initialize, Review: review, ClearAttestation: stale,
		PreviousLabels: prev.GrantedLabels, PreviousTaints: prev.GrantedTaints,
	})
	if err != nil {
		return err
	}
	if len(plan.Refused) > 0 {
		c.m.GrantsRefused.WithLabelValues("request").Add(float64(len(plan.Refused)))
		c.say(node, "node", name, corev1.EventTypeWarning, "GrantRefused", strings.Join(plan.Refused, "; "))
	}

	next := prev
	next.NodeUID = string(node.UID)
	next.Adopted = prev.Adopted || adopting
	next.NotAdopted = false
	if rec == nil && records.MayEnrolOnFirstUse(nil, string(node.UID), uninitialized, adopting) {
		next.EnrolUID = string(node.UID)
	}
	next.Addresses = claims
	next.Prefix = prefix
	// The record holds, by value, what the patch rewrites or removes until
	// the patch is applied (grants are owned by value: finalize.Owned).
	next.GrantedLabels, next.GrantedTaints = plan.Holding.Labels, plan.Holding.Taints
	if rep.Metadata != nil && rep.Metadata.AgentKey != "" {
		if key, err := contract.DecodeAgentKey(rep.Metadata.AgentKey); err == nil {
			published := contract.EncodeAgentKey(key) // re-encoded: nothing node-written is kept verbatim
			switch {
			case published == next.AgentKey:
				next.PendingAgentKey = ""
			case next.AgentKey == "" && (initialize || adopting) && c.settings.CSR.Enrolment != config.EnrolApprove &&
				records.MayEnrolOnFirstUse(rec, string(node.UID), uninitialized, adopting):
				// Trust on first use: the first Node object of this name, at its join.
				next.AgentKey, next.AgentKeyEnrolled, next.PendingAgentKey = published, &now, ""
				c.log.Info("enrolled the node agent's key", "node", name, "key", next.AgentKey, "adopted", next.Adopted)
			default:
				// No first use left: an admin enrols it from the record.
				next.PendingAgentKey = published
			}
		}
	}
	if review != "" && initialize && (prev.Serving == nil || now.After(prev.Serving.ValidUntil)) {
		// Recorded with the initializing write, so the approval costs none;
		// never over a valid certificate of an earlier object of this name,
		// which the renewal rule compares the request with.
		next.Serving = c.servingUnderReview(review)
	}
	written := rec
	if rec == nil || !next.Equal(rec.Spec) {
		put := &records.Record{Name: name, Spec: next}
		if rec != nil {
			put.ResourceVersion = rec.ResourceVersion
		}
		if written, err = c.records.Put(ctx, put); err != nil {
			c.m.NodeWrites.WithLabelValues("record", "error").Inc()
			return err
		}
		c.m.NodeWrites.WithLabelValues("record", "ok").Inc()
		if next.PendingAgentKey != "" && next.PendingAgentKey != prev.PendingAgentKey {
			c.recorder.Eventf(node, corev1.EventTypeWarning, "AgentKeyNotEnrolled",
				"the node's agent publishes key %s, which is not enrolled (csr.enrolment: %s; a first use already happened for this name, or none is allowed): its serving CSRs wait. Compare it with the public-key the agent logs at start on the node, then: %s",
				next.PendingAgentKey, c.settings.CSR.Enrolment, approval.EnrolCommand(name))
		}
		if adopting {
			c.recorder.Eventf(node, corev1.EventTypeNormal, "Adopted", "adopted: recorded addresses %v; labels and taints set by others are never removed", records.ClaimedIPs(claims))
		}
	}
	if plan.Patch == nil {
		return nil
	}
	if _, err := c.client.CoreV1().Nodes().Patch(ctx, name, types.MergePatchType, plan.Patch, metav1.PatchOptions{FieldManager: FieldManager}); err != nil {
		c.m.NodeWrites.WithLabelValues("finalize", "error").Inc()
		if apierrors.IsNotFound(err) {
			return nil // deleted meanwhile; the delete event releases
		}
		return fmt.Errorf("patching node %s: %w", name, err)
	}
	c.m.NodeWrites.WithLabelValues("finalize", "ok").Inc()
	if err := c.releaseRewritten(ctx, written, plan.Owns); err != nil {
		return err
	}
	if review != "" && (node.Annotations[contract.AnnotationCSRReview] != review || stale) {
		c.m.NodeWrites.WithLabelValues("review", "ok").Inc()
		c.setReviewRequested(review, time.Now())
		c.csrQueue.AddAfter(review, c.settings.CSR.AttestationTimeout.Duration)
	}
	if len(cidrs) > 0 {
		for _, p := range cidrs {
			c.m.Allocations.WithLabelValues(poolOf(req, p), "ok").Inc()
		}
		if !initialize { // the Initialized Event names them
			c.recorder.Eventf(node, corev1.EventTypeNormal, "PodCIDRAssigned", "pod CIDRs %v", cidrs)
		}
	}
	if initialize {
		took := time.Since(node.CreationTimestamp.Time)
		c.m.NodeInitTime.Observe(took.Seconds())
		c.recorder.Eventf(node, corev1.EventTypeNormal, "Initialized", "initialized %v after registration: pod CIDRs %v, granted labels %v", took.Round(time.Millisecond), cidrs, plan.Granted)
		c.log.Info("node initialized", "node", name, "podCIDRs", cidrs, "granted", plan.Granted, "after", took)
	} else {
		c.log.Info("node updated", "node", name, "patch", string(plan.Patch))
	}
	return nil
}

// contestedBy lists the addresses another Node holds ("ip: Node x"),
// sorted, "" when none.
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

// nodePrefix decides, under the /64's lock, whether the Node may carve its
// IPv6 pod segment from the node prefix req names (records.NodePrefix) and
// returns the prefix its record holds after this sync. A prefix another
// Node holds is taken out of req (the IPv6 pool serves, when there is
// one), with a PrefixHeldByOtherNode Event naming the holder.
func (c *Coordinator) nodePrefix(node *corev1.Node, req *ipam.Request, claims []records.Claim, held string, existing []netip.Prefix) string {
	if !req.IPv6Prefix.IsValid() {
		return held
	}
	set, _, err := ipam.SegmentFor(req.IPv6Prefix, req.IPv6Addr)
	if err != nil {
		return held // Allocate reports it
	}
	prefix, holder := records.NodePrefix(node.Name, set, claims, held, c.records.Near(set), c.shared, existing)
	if holder == "" || len(existing) > 0 {
		return prefix
	}
	if c.say(node, "node", node.Name, corev1.EventTypeWarning, "PrefixHeldByOtherNode", fmt.Sprintf(
		"node prefix %s is Node %s's (it claimed an address in it first, or carves from it): no pod segment is carved from it for this Node. "+
			"If %s is not entitled to it, delete that Node or bind the network to this Node's name in the coordinator's inventory; if the prefix is shared on one link, list it in ipam.sharedPrefixes",
		set, holder, holder)) {
		c.m.Contested.WithLabelValues("prefix").Inc()
	}
	req.IPv6Prefix, req.IPv6Addr, req.IPv6 = netip.Prefix{}, netip.Addr{}, c.hasV6
	return prefix
}

// reconcileCIDRs accounts for the pod CIDRs the Node has, whoever wrote
// them (the previous leader's last patch, an admin, a migrated cluster),
// and drops what the allocator holds for an earlier Node object of the same
// name. A CIDR another Node holds is a PodCIDRConflict Event and a metric,
// never a silent overlap.
func (c *Coordinator) reconcileCIDRs(node *corev1.Node, existing []netip.Prefix) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.alloc == nil {
		return
	}
	owned := c.alloc.Owned(node.Name)
	if uid, ok := c.allocUID[node.Name]; ok && uid != node.UID && len(owned) > 0 {
		// Deleted and re-created between two syncs: the old object's
		// CIDRs are not the new one's.
		c.alloc.Release(node.Name)
		owned = nil
	}
	c.allocUID[node.Name] = node.UID
	if len(existing) == 0 || slices.Equal(owned, existing) {
		return
	}
	if len(owned) > 0 {
		c.alloc.Release(node.Name)
	}
	if err := c.alloc.Occupy(node.Name, existing); err != nil {
		c.m.PodCIDRConflicts.Inc()
		c.recorder.Eventf(node, corev1.EventTypeWarning, "PodCIDRConflict", "pod CIDRs %v overlap another Node's: %v", existing, err)
		c.log.Error("pod CIDR conflict", "node", node.Name, "podCIDRs", existing, "err", err)
	}
	c.poolMetrics()
}

// releaseRewritten writes the record down to what the coordinator owns once
// its patch applied: the values it rewrote or removed are no longer its
// own, so an admin who sets one of them again is never overridden. Only a
// patch that rewrote or removed a grant costs this second write.
func (c *Coordinator) releaseRewritten(ctx context.Context, rec *records.Record, owns finalize.Grants) error {
	if rec == nil || slices.Equal(rec.Spec.GrantedLabels, owns.Labels) && slices.Equal(rec.Spec.GrantedTaints, owns.Taints) {
		return nil
	}
	next := rec.Spec
	next.GrantedLabels, next.GrantedTaints = owns.Labels, owns.Taints
	if _, err := c.records.Put(ctx, &records.Record{Name: rec.Name, ResourceVersion: rec.ResourceVersion, Spec: next}); err != nil {
		c.m.NodeWrites.WithLabelValues("record", "error").Inc()
		return err
	}
	c.m.NodeWrites.WithLabelValues("record", "ok").Inc()
	return nil
}

// nodeGone releases a deleted Node's pod CIDRs and its record's claims and
// grants; the record itself stays with what survives the object
// (records.Survives), so a node that deletes and re-creates its Node object
// gets neither a fresh enrolment nor a fresh renewal memory.
func (c *Coordinator) nodeGone(ctx context.Context, name string) error {
	c.setWaiting(name, "", false)
	c.mu.Lock()
	delete(c.allocUID, name)
	if len(c.alloc.Owned(name)) > 0 {
		c.alloc.Release(name)
		c.poolMetrics()
		c.log.Info("released pod CIDRs of a deleted node", "node", name)
		defer c.retryWaitingForCIDRs()
	}
	c.mu.Unlock()
	c.forget("node", name)
	rec, err := c.records.Get(name)
	if err != nil || rec == nil {
		return err
	}
	released, err := c.releaseRecord(ctx, rec)
	if released {
		c.log.Info("released a deleted node's recorded addresses", "node", name)
	}
	return err
}

// releaseRecord reduces a record whose Node object is gone to what survives
// it (records.Released): its claims, prefix and grants go. It writes only
// when that changes the record; a record deleted meanwhile is no error.
func (c *Coordinator) releaseRecord(ctx context.Context, rec *records.Record) (released bool, err error) {
	kept := records.Released(rec.Spec)
	if kept.Equal(rec.Spec) {
		return false, nil
	}
	if _, err := c.records.Put(ctx, &records.Record{Name: rec.Name, ResourceVersion: rec.ResourceVersion, Spec: kept}); err != nil {
		c.m.NodeWrites.WithLabelValues("record", "error").Inc()
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		return false, err
	}
	c.m.NodeWrites.WithLabelValues("record", "ok").Inc()
	return true, nil
}

// reconcileRecords releases, as nodeGone would have, the records whose Node
// was deleted (or deleted and registered again) while no coordinator led:
// without it their claims would hold addresses and prefixes forever. It
// decides from fresh lists of Nodes and records (records.Orphaned) and
// returns how many it released; a conflict (someone wrote meanwhile) is an
// error for the caller to retry.
func (c *Coordinator) reconcileRecords(ctx context.Context, nodes []corev1.Node) (int, error) {
	recs, err := c.records.List(ctx)
	if err != nil {
		return 0, err
	}
	uids := make(map[string]string, len(nodes))
	for i := range nodes {
		uids[nodes[i].Name] = string(nodes[i].UID)
	}
	n := 0
	for _, rec := range records.Orphaned(recs, uids) {
		released, err := c.releaseRecord(ctx, rec)
		if err != nil {
			return n, err
		}
		if released {
			n++
			c.m.RecordsReconciled.Inc()
			c.log.Info("released the claims of a Node deleted while no coordinator led", "node", rec.Name, "recordedUID", rec.Spec.NodeUID, "nodeUID", uids[rec.Name])
		}
	}
	return n, nil
}

// claimRetry is how often a Node whose addresses another Node holds is
// looked at again (besides when a record releases them).
const claimRetry = 10 * time.Second

// otherOwners maps the node's current addresses to the other Node that
// holds each: the one whose record has it, or else one that has listed it
// continuously since before this node did (a Node still waiting to be
// initialized, or one not adopted, holds its addresses without a record).
func (c *Coordinator) otherOwners(node string, current []netip.Addr) map[netip.Addr]string {
	out := map[netip.Addr]string{}
	for _, ip := range current {
		owner := c.holder(node, ip)
		if owner == "" {
			if o := c.observer.earlier(ip, node); records.Bound(c.inventory, o, ip) == nil {
				owner = o
			}
		}
		if owner != "" && owner != node {
			out[ip] = owner
		}
	}
	return out
}

// holder is the Node that holds ip by the coordinator's records: the one
// whose record has it, or else another than node carving from a node
// prefix that holds it ("" when none). A holder the inventory does not
// entitle to ip (its claim predates the inventory) holds nothing.
func (c *Coordinator) holder(node string, ip netip.Addr) string {
	owner := c.records.Owner(ip)
	if owner == "" && ip.Is6() {
		owner = records.InPrefix(node, ip, c.records.Near(netip.PrefixFrom(ip, 128)))
	}
	if owner != "" && records.Bound(c.inventory, owner, ip) != nil {
		return ""
	}
	return owner
}

// lockAddrs locks the stripes of ips, and of the /64 of each IPv6 one
// (node prefixes are decided under it), in order and returns the unlock.
func (c *Coordinator) lockAddrs(ips []netip.Addr) func() {
	var idx []int
	add := func(a netip.Addr) {
		h := fnv.New32a()
		b := a.As16()
		h.Write(b[:])
		if i := int(h.Sum32() % uint32(len(c.claimLocks))); !slices.Contains(idx, i) {
			idx = append(idx, i)
		}
	}
	for _, ip := range ips {
		add(ip)
		if ip.Is6() {
			p, _ := ip.Prefix(64)
			add(p.Addr())
		}
	}
	slices.Sort(idx)
	for _, i := range idx {
		c.claimLocks[i].Lock()
	}
	return func() {
		for _, i := range slices.Backward(idx) {
			c.claimLocks[i].Unlock()
		}
	}
}

// releaseWithdrawn drops from node's record the addresses it no longer
// lists, and nothing else.
func (c *Coordinator) releaseWithdrawn(ctx context.Context, node *corev1.Node, rec *records.Record) error {
	if rec == nil || rec.Spec.NodeUID != string(node.UID) {
		return nil
	}
	current := nodeAddresses(node, c.settings.MaxNodeAddresses)
	kept := slices.DeleteFunc(slices.Clone(rec.Spec.Addresses), func(cl records.Claim) bool {
		ip, err := netip.ParseAddr(cl.IP)
		return err != nil || !slices.Contains(current, ip)
	})
	if len(kept) == len(rec.Spec.Addresses) {
		return nil
	}
	next := rec.Spec
	next.Addresses = kept
	if _, err := c.records.Put(ctx, &records.Record{Name: rec.Name, ResourceVersion: rec.ResourceVersion, Spec: next}); err != nil {
		c.m.NodeWrites.WithLabelValues("record", "error").Inc()
		return err
	}
	c.m.NodeWrites.WithLabelValues("record", "ok").Inc()
	return nil
}

func (c *Coordinator) claimPolicy(node *corev1.Node) records.ClaimPolicy {
	return records.ClaimPolicy{Networks: c.networks, Reserved: c.reservedFor(node), Max: c.settings.MaxNodeAddresses, Node: node.Name, Inventory: c.inventory}
}

// retryWaitingForCIDRs requeues the Nodes still without pod CIDRs: freed
// segments may be what they wait for.
func (c *Coordinator) retryWaitingForCIDRs() {
	for _, n := range c.listNodes() {
		if len(n.Spec.PodCIDRs) == 0 && n.Spec.PodCIDR == "" {
			c.nodeQueue.Add(n.Name)
		}
	}
}

func poolOf(req ipam.Request, p netip.Prefix) string {
	switch {
	case p.IsValid() && p.Addr().Is4():
		return "ipv4"
	case p.IsValid() && req.IPv6Prefix.IsValid() && req.IPv6Prefix.Overlaps(p):
		return "node-prefix"
	case p.IsValid():
		return "ipv6"
	case req.IPv6Prefix.IsValid():
		return "node-prefix"
	}
	return "pool"
}

// notAdopted counts the initialized Nodes without a record that the
// coordinator leaves alone (adoptExisting off): one log line when the
// first appears and a gauge, not an Event per Node of a migrated cluster.
func (c *Coordinator) notAdopted(name string, is bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if is == c.unadopted[name] {
		return
	}
	if is {
		c.unadopted[name] = true
		if len(c.unadopted) == 1 {
			c.log.Warn("Nodes initialized before nodeinit-coordinator kept records of them are left alone; "+
				"set adoptExisting: true to adopt them (it never removes what others set). Count: nodeinit_coordinator_nodes_not_adopted", "first", name)
		}
	} else {
		delete(c.unadopted, name)
	}
	c.m.NotAdopted.Set(float64(len(c.unadopted)))
}

// setWaiting keeps nodeinit_coordinator_nodes_waiting: the Nodes synced and
// found waiting for their agent's report (or providerID).
func (c *Coordinator) setWaiting(name, resourceVersion string, is bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if is {
		c.waitingNodes[name] = resourceVersion
	} else {
		delete(c.waitingNodes, name)
	}
	c.m.NodesWaiting.Set(float64(len(c.waitingNodes)))
}

// Waiting reports whether the coordinator has synced Node name and found it
// waiting for its agent's report (or providerID): it has written nothing to
// it. Health checks and tests use it as a sync point.
func (c *Coordinator) Waiting(name string) bool { return c.WaitingAt(name) != "" }

// WaitingAt is the resourceVersion of Node name when the coordinator last
// found it waiting, "" when it is not waiting.
func (c *Coordinator) WaitingAt(name string) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.waitingNodes[name]
}

// rememberName records that a Node of this name existed, initialized, when
// the coordinator first saw it and left it alone (adoptExisting off): no
// later Node object of the name enrols a key on first use. One write per
// such Node, once.
func (c *Coordinator) rememberName(ctx context.Context, node *corev1.Node, rec *records.Record) error {
	if rec != nil {
		return nil
	}
	if _, err := c.records.Put(ctx, &records.Record{Name: node.Name, Spec: records.Spec{NodeUID: string(node.UID), NotAdopted: true}}); err != nil {
		c.m.NodeWrites.WithLabelValues("record", "error").Inc()
		return err
	}
	c.m.NodeWrites.WithLabelValues("record", "ok").Inc()
	return nil
}
