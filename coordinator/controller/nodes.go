package controller

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/talos-nodeinit/talos-nodeinit/coordinator/approval"
	"github.com/talos-nodeinit/talos-nodeinit/coordinator/finalize"
	"github.com/talos-nodeinit/talos-nodeinit/coordinator/nodestate"
	"github.com/talos-nodeinit/talos-nodeinit/coordinator/records"
	"github.com/talos-nodeinit/talos-nodeinit/pkg/contract"
	"github.com/talos-nodeinit/talos-nodeinit/pkg/ipam"
)

// syncNode brings one Node to what the coordinator wants: it gathers the
// inputs from its caches, nodestate.Decide computes the whole desired state
// (the allocator answering its request in between), and it writes the
// answer: the record first, so it always says what the coordinator set,
// then the one patch. The agent's annotations are requests the policy
// bounds.
func (c *Coordinator) syncNode(ctx context.Context, name string) error {
	defer c.nodeStatus.count(name)()
	node, err := c.node(name)
	if apierrors.IsNotFound(err) {
		_, csrErr := c.syncCSRs(ctx, name, nil)
		return errors.Join(c.nodeGone(ctx, name), csrErr)
	}
	if err != nil {
		return err
	}
	// Its kubelet's serving CSRs first: what their decisions want of its
	// review is asked in the patch below. An error there holds up nothing
	// of the Node's own: the sync is retried with it.
	wants, csrErr := c.syncCSRs(ctx, name, node)
	if err := c.syncNodeObject(ctx, node, wants); err != nil || csrErr != nil {
		return errors.Join(err, csrErr)
	}
	c.nodeStatus.synced(name, node.ResourceVersion)
	c.log.Debug("node synced", "node", name, "resourceVersion", node.ResourceVersion)
	return nil
}

// syncNodeObject is the rest of a Node's sync, after its CSRs: the Node
// and its record, with wants the review its pending CSRs ask for.
func (c *Coordinator) syncNodeObject(ctx context.Context, node *corev1.Node, wants []approval.Want) error {
	name := node.Name
	current := nodestate.Addresses(node, c.settings.MaxNodeAddresses)
	// Every Node's pod CIDRs are accounted for, whatever else holds it back.
	cidrs, err := finalize.PodCIDRs(node)
	if err == nil {
		c.reconcileCIDRs(node, cidrs)
	}
	if ip, cidr, ok := nodestate.AddressInOwnPodCIDR(cidrs, current); ok {
		if c.say(node, "node", name, corev1.EventTypeWarning, "PodCIDRHoldsNodeAddress", fmt.Sprintf(
			"pod CIDR %s holds this Node's own address %s, so its kubelet's serving CSRs naming it are denied, and pod CIDRs never change. "+
				"Delete this Node object and restart its kubelet (talosctl -n <node> service kubelet restart): it registers again and gets another", cidr, ip)) {
			c.log.Warn("a Node's pod CIDR holds its own address", "node", name, "podCIDR", cidr, "address", ip)
		}
	}
	c.sayPodCIDRConflicts(node, cidrs, current)
	rec, err := c.records.Get(name)
	if err != nil {
		c.say(node, "node", name, corev1.EventTypeWarning, "NodeRecordUnreadable", "nothing changes for this Node until its NodeRecord can be read again (kubectl edit noderecord "+name+"): "+contract.NodeText(err.Error()))
		return err
	}
	in := nodestate.Input{Node: node, Record: rec, Reserved: c.reservedFor(node), Near: c.records.Near, Listed: c.listedIn, Now: c.clock.Now()}
	in.HasV4, in.HasV6 = c.cidrs.Families()
	in.Review = c.review(node, wants)
	in.ServingCSRs, in.Asked = c.servingCSRs.Load(), c.kubeletAsked(node)
	in.RefusedProviderID = c.refusedIDs.of(node, in.Now)
	// Claims are decided and written under the addresses' locks: two
	// workers never record one address for two Nodes. The locks are let go
	// once the record is written (the store shows it to every reader from
	// then on), not held over the Node's patch.
	var recorded []netip.Addr
	if rec != nil {
		recorded = records.ClaimedIPs(rec.Spec.Addresses)
	}
	unlock := sync.OnceFunc(c.claimLocks.lock(slices.Concat(current, recorded)))
	defer unlock()
	in.Others = c.otherOwners(node, current)
	in.FirstSeen = c.observer.FirstSeen(node.Name, node.UID)
	d, err := nodestate.Decide(c.desired, in)
	if err != nil {
		return err
	}
	if d.Allocate {
		cidrs, err := c.allocate(name, d.Request)
		if err != nil {
			// An earlier object's claims are released all the same
			// (nodestate.Decide): they must not outlast a pool that stays
			// exhausted, or a request that can never be met.
			if _, werr := c.putRecord(ctx, name, rec, d.Record); werr != nil {
				err = errors.Join(err, werr)
			}
			c.report(node, d)
			c.m.Allocations.WithLabelValues(poolOf(d.Request, netip.Prefix{}), "error").Inc()
			c.say(node, "node", name, corev1.EventTypeWarning, "PodCIDRAllocationFailed", err.Error())
			return fmt.Errorf("allocating pod CIDRs for %s: %w", name, err)
		}
		in.Allocated = cidrs
		if d, err = nodestate.Decide(c.desired, in); err != nil {
			return err
		}
	}
	c.report(node, d)
	if len(d.Malformed) > 0 {
		// Never act on partial data: nothing the coordinator grants
		// changes; d.Record only releases withdrawn addresses, or an
		// earlier object's whole record (nodestate.StaleRecord).
		_, err := c.putRecord(ctx, name, rec, d.Record)
		return err
	}
	c.notAdopted(name, d.NotAdopted)
	if d.InvalidPodCIDR == nil && !d.NotAdopted {
		c.setWaiting(name, node.ResourceVersion, len(d.Waiting) > 0)
		c.sayWaiting(node, d.Waiting, in.Now)
	}
	written, err := c.putRecord(ctx, name, rec, d.Record)
	if err != nil {
		return err
	}
	unlock()
	if d.Record != nil {
		c.recordWritten(node, d)
	}
	if d.Patch == nil {
		return nil
	}
	patched, err := c.client.CoreV1().Nodes().Patch(ctx, name, types.MergePatchType, d.Patch, metav1.PatchOptions{FieldManager: FieldManager})
	if err != nil {
		c.m.NodeWrites.WithLabelValues("finalize", "error").Inc()
		if apierrors.IsNotFound(err) {
			return nil // deleted meanwhile; the delete event releases
		}
		if d.Unpatched != nil {
			// The grants the patch would have added were never written:
			// not the coordinator's (nodestate.Desired.Unpatched). Should
			// the API server have applied it after all (a timeout), they
			// stay on the Node unowned: never removed, the safe way.
			// Written even as the coordinator stops: the grant must not
			// outlive the patch that failed.
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
			_, werr := c.putRecord(rctx, name, written, d.Unpatched)
			cancel()
			if werr != nil {
				c.log.Warn("could not let go of the grants a failed patch would have written; they stay recorded until a patch applies, or fails again", "node", name, "err", werr)
			}
		}
		if id := d.Plan.ProviderID; id != "" && refusedByAPIServer(err) && c.providerIDAlone(ctx, name, d.Patch) {
			// The providerID alone is refused (an admin's policy): the next
			// sync, now, leaves it out; it is tried again after
			// refusalRecheck, in case the policy changed.
			c.refusedIDs.set(node, id, err, c.clock.Now())
			c.log.Warn("the API server refused the providerID in the initializing patch; initializing without it", "node", name, "providerID", id, "err", err)
			c.nodeQueue.Add(name)
			c.nodeQueue.AddAfter(name, refusalRecheck)
			return nil
		}
		return fmt.Errorf("patching node %s: %w", name, err)
	}
	c.m.NodeWrites.WithLabelValues("finalize", "ok").Inc()
	trimNode(patched) // as the informer keeps it
	// The answer is read ahead of the informer only when it lists what the
	// version the patch was computed from listed, as it does: the patch
	// names that version. One listing anything else waits for the watch,
	// which delivers every earlier lister of an address first.
	if slices.Equal(nodestate.Addresses(patched, c.settings.MaxNodeAddresses), current) {
		c.ownNodes.Mutation(patched)
	}
	if d.After != nil {
		if _, err := c.putRecord(ctx, name, written, d.After); err != nil {
			return err
		}
	}
	c.patched(node, d, in.Review)
	return nil
}

// allocate hands Node name its pod CIDRs for req. No segment holds an
// address any Node listed when its sync read the store: nodeChanged
// reserves observed addresses, but the informer updates its store (and
// indexes) before its handlers run, so the request also avoids the Node's
// own addresses (req.Avoid, from Decide) and those other Nodes list inside
// the prefix it carves from (the bySlash64 index; outside pod pools, which
// are never reserved either).
func (c *Coordinator) allocate(name string, req ipam.Request) ([]netip.Prefix, error) {
	if req.IPv6Prefix.IsValid() {
		if set, _, err := ipam.SegmentFor(req.IPv6Prefix, req.IPv6Addr); err == nil {
			key, _ := set.Addr().Prefix(64)
			objs, _ := c.nodeIndex.ByIndex(bySlash64, key.String())
			req.Avoid = slices.Clone(req.Avoid)
			for _, o := range objs {
				n, ok := o.(*corev1.Node)
				if !ok || n.Name == name {
					continue
				}
				for _, ip := range nodestate.Addresses(n, c.settings.MaxNodeAddresses) {
					if set.Contains(ip) && !c.cidrs.InPool(ip) {
						req.Avoid = append(req.Avoid, ip)
					}
				}
			}
		}
	}
	return c.cidrs.Allocate(name, req)
}

// sayPodCIDRConflicts reports, on both Nodes, a pod CIDR that holds what
// belongs to another: a range the inventory binds to other Nodes (a binding
// added after the carve), or an address another Node lists. Pod CIDRs never
// change, so no certificate names such an address while the segment is
// held (csrcheck.Facts.PodCIDROf); the fix is the holder's re-registration.
func (c *Coordinator) sayPodCIDRConflicts(node *corev1.Node, cidrs []netip.Prefix, current []netip.Addr) {
	name := node.Name
	fix := func(holder string) string {
		return fmt.Sprintf("delete Node %s (kubectl delete node %s) and restart its kubelet (talosctl -n <its address> service kubelet restart): it registers again and gets another segment", holder, holder)
	}
	var bound, inside []string
	for _, cidr := range cidrs {
		if b := records.BoundElsewhere(c.inventory, name, cidr); len(b) > 0 {
			bound = append(bound, fmt.Sprintf("pod CIDR %s overlaps %v", cidr, b))
		}
	}
	for _, ip := range current {
		if holder := c.cidrs.Holder(ip); holder != "" && holder != name {
			inside = append(inside, fmt.Sprintf("address %s lies inside Node %s's pod CIDR: it is certified for nobody while %s holds it. If the address is this Node's, %s", ip, holder, holder, fix(holder)))
		}
	}
	if len(bound) > 0 && c.say(node, "node", name, corev1.EventTypeWarning, "PodCIDRInBoundNetwork", strings.Join(bound, "; ")+
		", which the inventory binds to other Nodes: no address there is certified for anyone while this Node holds it, and pod CIDRs never change. To free it, "+fix(name)) {
		c.m.PodCIDRConflicts.Inc()
	}
	if len(inside) > 0 {
		c.say(node, "node", name, corev1.EventTypeWarning, "AddressInOtherPodCIDR", strings.Join(inside, "; "))
	}
}

// listedIn is what the Nodes in the informer's store list inside the /64
// holding set (ipam.SegmentFor's set, a /64 or longer: the unit of
// ownership), each address since the observer first saw that Node list
// it; zero, the earliest, when it has not yet, or when a list delivered
// it (the order among a list is not known: records.PrefixRules).
func (c *Coordinator) listedIn(set netip.Prefix) []records.Holding {
	key, _ := set.Addr().Prefix(64)
	objs, _ := c.nodeIndex.ByIndex(bySlash64, key.String())
	var out []records.Holding
	for _, o := range objs {
		n, ok := o.(*corev1.Node)
		if !ok {
			continue
		}
		seen := c.observer.FirstSeenOrdered(n.Name, n.UID)
		for _, ip := range nodestate.Addresses(n, c.settings.MaxNodeAddresses) {
			if key.Contains(ip) {
				out = append(out, records.Holding{Node: n.Name, Addr: ip, Since: seen[ip]})
			}
		}
	}
	return out
}

// putRecord writes spec over rec (creating record name when rec is nil) and returns
// the record as written; a nil spec writes nothing and returns rec.
func (c *Coordinator) putRecord(ctx context.Context, name string, rec *records.Record, spec *records.Spec) (*records.Record, error) {
	if spec == nil {
		return rec, nil
	}
	put := &records.Record{Name: name, Spec: *spec}
	if rec != nil {
		put.ResourceVersion = rec.ResourceVersion
	}
	written, err := c.records.Put(ctx, put)
	if err != nil {
		c.m.NodeWrites.WithLabelValues("record", "error").Inc()
		return nil, err
	}
	c.m.NodeWrites.WithLabelValues("record", "ok").Inc()
	return written, nil
}

// report says what Decide found before anything is written: a malformed
// report, refused and contested addresses, a node prefix held by another
// Node, refused grants.
func (c *Coordinator) report(node *corev1.Node, d nodestate.Desired) {
	name := node.Name
	if len(d.Malformed) > 0 {
		for _, p := range d.Malformed {
			key, _, _ := strings.Cut(p, ":")
			c.m.MalformedReports.WithLabelValues(key).Inc()
		}
		c.say(node, "node", name, corev1.EventTypeWarning, "MalformedAgentReport",
			"nothing changed for this node until its agent's report can be read: "+strings.Join(d.Malformed, "; "))
	}
	if d.InvalidPodCIDR != nil {
		c.say(node, "node", name, corev1.EventTypeWarning, "InvalidPodCIDR", d.InvalidPodCIDR.Error())
	}
	if len(d.Refused) > 0 {
		c.m.AddressesRefused.Add(float64(len(d.Refused)))
		c.say(node, "node", name, corev1.EventTypeWarning, "AddressNotRecorded",
			"not recorded as this Node's (never certified, never used for its pod CIDRs): "+strings.Join(d.Refused, "; "))
	}
	if d.Contested != "" {
		if c.say(node, "node", name, corev1.EventTypeWarning, "AddressHeldByOtherNode", "held by another Node, so never certified for this one nor used for its pod CIDRs: "+d.Contested+
			". If that Node is not entitled to them, delete it (its record releases them) or bind their network to this Node's name in the coordinator's inventory") {
			c.m.Contested.WithLabelValues("address").Inc()
		}
	}
	if d.RecheckAfter > 0 {
		// Waiting for its kubelet's serving CSR: the CSR's first decision
		// syncs the Node sooner.
		c.nodeQueue.AddAfter(name, d.RecheckAfter)
	}
	if d.RecheckClaims {
		// Another Node holds some of its addresses: look again later, as
		// well as when that Node's record releases them.
		c.nodeQueue.AddAfter(name, claimRetry)
	}
	if h := d.PrefixHolder; h != "" {
		if c.say(node, "node", name, corev1.EventTypeWarning, "PrefixHeldByOtherNode", fmt.Sprintf(
			"node prefix %s is Node %s's (it claimed an address in it first, or carves from it): no pod segment is carved from it for this Node. "+
				"If %s is not entitled to it, delete that Node or bind the network to this Node's name in the coordinator's inventory; if the prefix is shared on one link, list it in ipam.sharedPrefixes",
			d.PrefixSet, h, h)) {
			c.m.Contested.WithLabelValues("prefix").Inc()
		}
	}
	if why := d.PrefixRefused; why != "" {
		if c.say(node, "node", name, corev1.EventTypeWarning, "PrefixNotEntitled", why+
			"; its IPv6 pod CIDR comes from ipam.ipv6Pool, or it gets none. To carve from it: bind the network to this Node in the coordinator's inventory "+
			"(inventory: [{nodes: ["+name+"], networks: ["+d.PrefixSet.String()+"]}]), or list a network holding it in ipam.firstClaimPrefixes") {
			c.m.Contested.WithLabelValues("prefix-not-entitled").Inc()
		}
	}
	if len(d.Plan.Refused) > 0 {
		c.m.GrantsRefused.WithLabelValues("request").Add(float64(len(d.Plan.Refused)))
		c.say(node, "node", name, corev1.EventTypeWarning, "GrantRefused", strings.Join(d.Plan.Refused, "; "))
	}
}

// recordWritten says what a record write means for people: a key enrolled,
// a key waiting for an admin, a Node adopted.
func (c *Coordinator) recordWritten(node *corev1.Node, d nodestate.Desired) {
	name := node.Name
	if d.Enrolled {
		c.log.Info("enrolled the node agent's key", "node", name, "key", d.Record.AgentKey, "adopted", d.Record.Adopted)
	}
	if d.PendingKey {
		c.recorder.Eventf(node, corev1.EventTypeWarning, "AgentKeyNotEnrolled",
			"the node's agent publishes key %s, which is not enrolled (csr.enrolment: %s; a first use already happened for this name, or none is allowed): its serving CSRs wait. Check that the key in this command is the public-key the agent logs at start on the node, then run it (it enrols that key only): %s",
			d.Record.PendingAgentKey, c.settings.CSR.Enrolment, approval.EnrolCommand(name, d.Record.PendingAgentKey))
	}
	if d.Adopting {
		c.recorder.Eventf(node, corev1.EventTypeNormal, "Adopted", "adopted: recorded addresses %v; labels and taints set by others are never removed", records.ClaimedIPs(d.Claims))
	}
}

// patched says what the Node's patch did, and starts the review's clock.
func (c *Coordinator) patched(node *corev1.Node, d nodestate.Desired, review nodestate.Review) {
	name := node.Name
	if ask := review.Ask; ask.CSR != "" && node.Annotations[contract.AnnotationCSRReview] != ask.String() {
		c.m.NodeWrites.WithLabelValues("review", "ok").Inc()
		if csr, err := c.csr(ask.CSR); err == nil {
			c.notes.asked(ask.CSR, csr.UID, c.clock.Now())
		}
		c.nodeQueue.AddAfter(name, c.settings.CSR.AttestationTimeout.Duration)
	}
	if len(d.CIDRs) > 0 {
		for _, p := range d.CIDRs {
			c.m.Allocations.WithLabelValues(poolOf(d.Request, p), "ok").Inc()
		}
		if !d.Initialize { // a join's pod CIDRs are in the Node, as its initialization
			c.recorder.Eventf(node, corev1.EventTypeNormal, "PodCIDRAssigned", "pod CIDRs %v", d.CIDRs)
		}
	}
	if d.Initialize {
		took := c.clock.Since(node.CreationTimestamp.Time)
		c.m.NodeInitTime.Observe(took.Seconds())
		if c.cfg.InitializedEvents {
			c.recorder.Eventf(node, corev1.EventTypeNormal, "Initialized", "initialized %v after registration: pod CIDRs %v, granted labels %v", took.Round(time.Millisecond), d.CIDRs, d.Plan.Granted)
		}
		c.log.Info("node initialized", "node", name, "podCIDRs", d.CIDRs, "granted", d.Plan.Granted, "after", took)
	} else {
		c.log.Info("node updated", "node", name, "patch", string(d.Patch))
	}
}

// reconcileCIDRs accounts for the pod CIDRs the Node has, whoever wrote
// them (the previous leader's last patch, an admin, a migrated cluster),
// and drops what the allocator holds for an earlier Node object of the same
// name. A CIDR another Node holds is a PodCIDRConflict Event and a metric,
// never a silent overlap.
func (c *Coordinator) reconcileCIDRs(node *corev1.Node, existing []netip.Prefix) {
	if err := c.cidrs.Account(node, existing); err != nil {
		c.m.PodCIDRConflicts.Inc()
		c.recorder.Eventf(node, corev1.EventTypeWarning, "PodCIDRConflict", "pod CIDRs %v overlap another Node's: %v", existing, err)
		c.log.Error("pod CIDR conflict", "node", node.Name, "podCIDRs", existing, "err", err)
	}
}

// nodeGone releases a deleted Node's pod CIDRs and its record's claims and
// grants; the record itself stays with what survives the object
// (records.Survives), so a node that deletes and re-creates its Node object
// gets neither a fresh enrolment nor a fresh renewal memory.
func (c *Coordinator) nodeGone(ctx context.Context, name string) error {
	c.setWaiting(name, "", false)
	c.nodeStatus.synced(name, "")
	c.nodeStatus.say(name, "")
	c.refusedIDs.forget(name)
	if c.cidrs.Release(name) {
		c.log.Info("released pod CIDRs of a deleted node", "node", name)
		defer c.retryWaitingForCIDRs()
	}
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
	recs, unreadable, err := c.records.List(ctx)
	if err != nil {
		return 0, err
	}
	for _, err := range unreadable {
		// It still holds what it names (records.Cached.Holds), and its
		// Node's sync fails with this reason until it is fixed.
		c.log.Warn("a NodeRecord cannot be read; left as it is, holding the addresses and prefix it names, until it is fixed", "err", err)
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
func (c *Coordinator) otherOwners(node *corev1.Node, current []netip.Addr) map[netip.Addr]string {
	out := map[netip.Addr]string{}
	for _, ip := range current {
		if owner := c.claimant(node, ip); owner != "" && owner != node.Name {
			out[ip] = owner
		}
	}
	return out
}

// claimant is the Node that holds ip as far as node is concerned: the one
// whose record has it (holder), or else another that has listed it
// continuously since before node did and that the inventory entitles to
// it ("" when none). The Node sync records no address another holds, and
// the CSR check holds a SAN another holds: both ask here.
func (c *Coordinator) claimant(self *corev1.Node, ip netip.Addr) string {
	node := self.Name
	if owner := c.holder(node, ip); owner != "" {
		return owner
	}
	// Only a Node the inventory entitles to ip can be its earlier lister:
	// one it does not entitle must not hide one it does.
	eligible := func(o string) bool { return records.Bound(c.inventory, o, ip) == nil }
	if !c.observer.Handed(node, self.UID, self.ResourceVersion, ip) {
		// The version of the Node the caller read (from the store, or the
		// coordinator's own write, both ahead of the informer's handler) is
		// not the one the observer was handed listing ip: where its listing
		// falls is not known yet, so every other Node listing ip holds it,
		// in the store or the observer. Its hand-over resyncs it.
		if other := c.storeLister(node, ip, eligible); other != "" {
			return other
		}
		return c.observer.EarlierOf(ip, node, false, eligible)
	}
	// Handed over: a Node the handler has yet to hand over (it hands over
	// in the store's order) began to list ip later.
	return c.observer.Earlier(ip, node, eligible)
}

// storeLister is another Node the informer's store has listing ip that
// may hold it (eligible), "" when none.
func (c *Coordinator) storeLister(node string, ip netip.Addr, eligible func(string) bool) string {
	objs, _ := c.nodeIndex.ByIndex(byAddress, ip.String())
	for _, o := range objs {
		if n, ok := o.(*corev1.Node); ok && n.Name != node && eligible(n.Name) {
			return n.Name
		}
	}
	return ""
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

// nodeStatus is the Node reconciler's own bookkeeping, for its gauges and
// health: the Nodes found waiting for their agent (at which
// resourceVersion) and the initialized Nodes without a record it leaves
// alone.
type nodeStatus struct {
	m   *Metrics
	log *slog.Logger

	mu        sync.Mutex
	waiting   map[string]string
	done      map[string]string // the resourceVersion each Node's last sync succeeded at
	syncs     map[string]*syncs
	unadopted map[string]bool
	said      map[string]string // what sayWaiting last said a Node waits for
}

func newNodeStatus(m *Metrics, log *slog.Logger) *nodeStatus {
	return &nodeStatus{m: m, log: log, waiting: map[string]string{}, done: map[string]string{}, syncs: map[string]*syncs{}, unadopted: map[string]bool{}, said: map[string]string{}}
}

// notAdopted counts the initialized Nodes without a record that the
// coordinator leaves alone (adoptExisting off): one log line when the
// first appears and a gauge, not an Event per Node of a migrated cluster.
func (c *Coordinator) notAdopted(name string, is bool) {
	s := c.nodeStatus
	s.mu.Lock()
	defer s.mu.Unlock()
	if is == s.unadopted[name] {
		return
	}
	if is {
		s.unadopted[name] = true
		if len(s.unadopted) == 1 {
			s.log.Warn("Nodes initialized before nodeinit-coordinator kept records of them are left alone; "+
				"set adoptExisting: true to adopt them (it never removes what others set). Count: nodeinit_coordinator_nodes_not_adopted", "first", name)
		}
	} else {
		delete(s.unadopted, name)
	}
	s.m.NotAdopted.Set(float64(len(s.unadopted)))
}

// sayWaiting names in the log a Node that still waits waitingLogAfter
// after its registration, and what for: once per Node and reasons.
// nodeinit_coordinator_nodes_waiting counts such Nodes; this says which.
// A Node waiting for less is synced again when that time has passed, as
// nothing else may change it (an agent that never runs writes nothing).
func (c *Coordinator) sayWaiting(node *corev1.Node, waiting []string, now time.Time) {
	// Some reasons quote what the node wrote (its provided-node-ip):
	// kept and logged as one bounded line.
	what := ""
	if len(waiting) > 0 {
		what = contract.NodeText(strings.Join(waiting, "; "))
	}
	after := c.cfg.WaitingLogAfter
	if after <= 0 {
		after = 30 * time.Second
	}
	age := now.Sub(node.CreationTimestamp.Time)
	switch {
	case what == "":
		c.nodeStatus.say(node.Name, "")
	case age < after:
		c.nodeQueue.AddAfter(node.Name, after-age)
	case c.nodeStatus.say(node.Name, what):
		c.log.Info("Node still waits: nothing is written to it until then", "node", node.Name, "for", what, "registered", age.Round(time.Second).String()+" ago")
	}
}

// say records what was last said of Node name's wait; it reports whether
// what is news ("" forgets it).
func (s *nodeStatus) say(name, what string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if what == "" {
		delete(s.said, name)
		return false
	}
	if s.said[name] == what {
		return false
	}
	s.said[name] = what
	return true
}

// setWaiting keeps nodeinit_coordinator_nodes_waiting: the Nodes synced and
// found waiting for their agent's report (or providerID).
func (c *Coordinator) setWaiting(name, resourceVersion string, is bool) {
	s := c.nodeStatus
	s.mu.Lock()
	defer s.mu.Unlock()
	if is {
		s.waiting[name] = resourceVersion
	} else {
		delete(s.waiting, name)
	}
	s.m.NodesWaiting.Set(float64(len(s.waiting)))
}

// Waiting reports whether the coordinator has synced Node name and found it
// waiting for its agent's report (or providerID, or its kubelet's serving
// CSR within csr.initWait): it has written nothing to it. Health checks and
// tests use it as a sync point.
func (c *Coordinator) Waiting(name string) bool { return c.WaitingAt(name) != "" }

// WaitingAt is the resourceVersion of Node name when the coordinator last
// found it waiting, "" when it is not waiting.
func (c *Coordinator) WaitingAt(name string) string {
	c.nodeStatus.mu.Lock()
	defer c.nodeStatus.mu.Unlock()
	return c.nodeStatus.waiting[name]
}

// synced records that Node name's sync succeeded at resourceVersion ("":
// the Node is gone).
func (s *nodeStatus) synced(name, resourceVersion string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if resourceVersion == "" {
		delete(s.done, name)
		if n := s.syncs[name]; n != nil {
			n.gone = true
		}
	} else {
		s.done[name] = resourceVersion
	}
}

// syncs counts a Node's syncs, begun and finished, succeeded or not: a
// workqueue runs one key's syncs one after another, so a sync begun after
// a count of begun ones has finished once finished exceeds it.
type syncs struct {
	begun, finished int
	gone            bool // the Node is gone: forgotten as its sync finishes
}

// count counts a sync of Node name as begun; the func it returns, as
// finished.
func (s *nodeStatus) count(name string) func() {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := s.syncs[name]
	if n == nil {
		n = &syncs{}
		s.syncs[name] = n
	}
	n.begun++
	return func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		n.finished = n.begun
		if n.gone {
			delete(s.syncs, name)
		}
	}
}

// Syncs is how many syncs of Node name have begun and finished (while
// the Node is there): a test or health check waiting for a sync that
// begins after now waits for finished to exceed begun as read now.
func (c *Coordinator) Syncs(name string) (begun, finished int) {
	c.nodeStatus.mu.Lock()
	defer c.nodeStatus.mu.Unlock()
	if n := c.nodeStatus.syncs[name]; n != nil {
		return n.begun, n.finished
	}
	return 0, 0
}

// SyncedAt is the resourceVersion of Node name when the coordinator last
// synced it without error, its serving CSRs with it ("" when never): a
// sync point for health checks and tests, as Waiting is.
func (c *Coordinator) SyncedAt(name string) string {
	c.nodeStatus.mu.Lock()
	defer c.nodeStatus.mu.Unlock()
	return c.nodeStatus.done[name]
}
