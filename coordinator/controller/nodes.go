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

// syncNode brings one Node to what the coordinator wants: nodestate.Decide computes the whole
// desired state from the caches, then the record is written first, so it always says what the
// coordinator set, then the one patch. The agent's annotations are requests the policy bounds.
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
	// Its kubelet's CSRs first: the review their decisions want is asked in the patch below. Their
	// errors hold up nothing of the Node's own; the sync is retried.
	wants, csrErr := c.syncCSRs(ctx, name, node)
	if err := c.syncNodeObject(ctx, node, wants); err != nil || csrErr != nil {
		return errors.Join(err, csrErr)
	}
	c.nodeStatus.synced(name, node.ResourceVersion)
	c.log.Debug("node synced", "node", name, "resourceVersion", node.ResourceVersion)
	return nil
}

// syncNodeObject syncs the Node and its record after its CSRs; wants is the review they ask for.
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
	// Claims are decided and recorded under the addresses' locks, so no address is recorded for two
	// Nodes; once the store shows the record to every reader, the patch needs no lock.
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
			// An earlier object's claims are released all the same: they must not outlast an
			// exhausted pool, or a request that can never be met.
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
		// Never act on partial data: no grant changes; d.Record only releases withdrawn addresses,
		// or an earlier object's whole record.
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
			// The grants the patch would have added were never written: not the coordinator's.
			// Applied after all (a timeout), they stay unowned: never removed, the safe way.
			// Written even as the coordinator stops: no grant may outlive the failed patch.
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
			_, werr := c.putRecord(rctx, name, written, d.Unpatched)
			cancel()
			if werr != nil {
				c.log.Warn("could not let go of the grants a failed patch would have written; they stay recorded until a patch applies, or fails again", "node", name, "err", werr)
			}
		}
		if id := d.Plan.ProviderID; id != "" && refusedByAPIServer(err) && c.providerIDAlone(ctx, name, d.Patch) {
			// The providerID alone is refused (an admin's policy): sync now without it, and try it
			// again after refusalRecheck in case the policy changed.
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
	// Read the answer ahead of the informer only when it lists what the version the patch was
	// computed from listed (the patch names that version); otherwise wait for the watch, which
	// delivers every earlier lister of an address first.
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

// allocate hands Node name its pod CIDRs for req. Handlers reserve listed addresses only after the
// store has them, so req also avoids what other Nodes list in the prefix it carves from
// (bySlash64), besides the Node's own (req.Avoid); pod pool addresses are never reserved.
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

// sayPodCIDRConflicts warns, on both Nodes, of a pod CIDR holding a range the inventory binds to
// other Nodes, or an address another Node lists: nothing there is certified while it is held, and
// pod CIDRs never change, so the fix is the holder's re-registration.
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

// listedIn is what the store's Nodes list inside the /64 holding set (the unit of ownership), each
// address since the observer first saw it listed; zero, the earliest, when it has not yet or a list
// delivered it (a list's order is unknown: records.PrefixRules).
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

// putRecord writes spec over rec (creating it when nil) and returns the record as written; a nil
// spec writes nothing and returns rec.
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

// report says what Decide found before anything is written: a malformed report, refused or
// contested addresses and prefixes, refused grants.
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
		// Waiting for its kubelet's serving CSR, whose first decision syncs it sooner.
		c.nodeQueue.AddAfter(name, d.RecheckAfter)
	}
	if d.RecheckClaims {
		// Another Node holds some of its addresses: retry later, or when its record frees them.
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

// recordWritten tells people what a record write means: a key enrolled or waiting, a Node adopted.
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

// reconcileCIDRs accounts for the Node's pod CIDRs whoever wrote them, dropping an earlier object's
// of the same name. An overlap with another Node's is an Event and a metric, never silent.
func (c *Coordinator) reconcileCIDRs(node *corev1.Node, existing []netip.Prefix) {
	if err := c.cidrs.Account(node, existing); err != nil {
		c.m.PodCIDRConflicts.Inc()
		c.recorder.Eventf(node, corev1.EventTypeWarning, "PodCIDRConflict", "pod CIDRs %v overlap another Node's: %v", existing, err)
		c.log.Error("pod CIDR conflict", "node", node.Name, "podCIDRs", existing, "err", err)
	}
}

// nodeGone releases a deleted Node's pod CIDRs, claims and grants; its record keeps what survives
// (records.Survives), so a re-created Node gets no fresh enrolment nor renewal memory.
func (c *Coordinator) nodeGone(ctx context.Context, name string) error {
	c.nodeStatus.gone(name)
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

// releaseRecord reduces a gone Node's record to what survives it, writing only a change; a record
// deleted meanwhile is no error.
func (c *Coordinator) releaseRecord(ctx context.Context, rec *records.Record) (released bool, err error) {
	kept := records.Released(rec.Spec)
	if kept.Equal(rec.Spec) {
		return false, nil
	}
	if _, err := c.putRecord(ctx, rec.Name, rec, &kept); err != nil {
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		return false, err
	}
	return true, nil
}

// reconcileRecords releases, and counts, the records of Nodes deleted (or re-created) while no
// coordinator led, whose claims would otherwise hold forever; the caller retries a conflict.
func (c *Coordinator) reconcileRecords(ctx context.Context, nodes []corev1.Node) (int, error) {
	recs, unreadable, err := c.records.List(ctx)
	if err != nil {
		return 0, err
	}
	for _, err := range unreadable {
		// It still holds what it names, and its Node's sync fails until it is fixed.
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

// claimRetry is how often a Node whose addresses another holds is looked at again.
const claimRetry = 10 * time.Second

// otherOwners maps the node's addresses to the other Node holding each (claimant).
func (c *Coordinator) otherOwners(node *corev1.Node, current []netip.Addr) map[netip.Addr]string {
	out := map[netip.Addr]string{}
	for _, ip := range current {
		if owner := c.claimant(node, ip); owner != "" && owner != node.Name {
			out[ip] = owner
		}
	}
	return out
}

// claimant is the Node holding ip as far as self is concerned: the one whose record has it, or else
// an earlier continuous lister the inventory entitles to it (a Node not yet initialized or adopted
// holds without a record). The Node sync and the CSR check both ask here.
func (c *Coordinator) claimant(self *corev1.Node, ip netip.Addr) string {
	node := self.Name
	if owner := c.holder(node, ip); owner != "" {
		return owner
	}
	// Only an entitled Node can be the earlier lister: an unentitled one must not hide one that is.
	eligible := func(o string) bool { return records.Bound(c.inventory, o, ip) == nil }
	if !c.observer.Handed(node, self.UID, self.ResourceVersion, ip) {
		// The caller's version (store or own write, both ahead of the handler) is not the one the
		// observer was handed listing ip, so its place is unknown: every other lister holds ip
		// until the hand-over resyncs it.
		if other := c.storeLister(node, ip, eligible); other != "" {
			return other
		}
		return c.observer.EarlierOf(ip, node, false, eligible)
	}
	// Handed over: a Node the handler has yet to hand over (in store order) began listing ip later.
	return c.observer.Earlier(ip, node, eligible)
}

// storeLister is another eligible Node the store has listing ip, "" when none.
func (c *Coordinator) storeLister(node string, ip netip.Addr, eligible func(string) bool) string {
	objs, _ := c.nodeIndex.ByIndex(byAddress, ip.String())
	for _, o := range objs {
		if n, ok := o.(*corev1.Node); ok && n.Name != node && eligible(n.Name) {
			return n.Name
		}
	}
	return ""
}

// holder is the Node holding ip by the records: the one whose record has it, or else another than
// node carving from a prefix holding it; one the inventory does not entitle to ip holds nothing.
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

// retryWaitingForCIDRs requeues Nodes without pod CIDRs: freed segments may be what they wait for.
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

// nodeStatus is the Node reconciler's bookkeeping for its gauges and health: Nodes waiting (at
// which resourceVersion), syncs, and initialized Nodes without a record left alone.
type nodeStatus struct {
	m   *Metrics
	log *slog.Logger

	mu        sync.Mutex
	waiting   map[string]string
	syncs     map[string]*syncs
	unadopted map[string]bool
}

func newNodeStatus(m *Metrics, log *slog.Logger) *nodeStatus {
	return &nodeStatus{m: m, log: log, waiting: map[string]string{}, syncs: map[string]*syncs{}, unadopted: map[string]bool{}}
}

// notAdopted counts the initialized Nodes without a record left alone (adoptExisting off): one log
// line and a gauge, not an Event per Node of a migrated cluster.
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

// sayWaiting logs, once per Node and reasons, a Node still waiting waitingLogAfter after its
// registration, and what for; one registered more recently is synced again then, as nothing else
// may change it (an agent that never runs writes nothing).
func (c *Coordinator) sayWaiting(node *corev1.Node, waiting []string, now time.Time) {
	// Some reasons quote what the node wrote: logged as one bounded line.
	what := ""
	if len(waiting) > 0 {
		what = contract.NodeText(strings.Join(waiting, "; "))
	}
	after := c.cfg.WaitingLogAfter
	if after <= 0 {
		after = 30 * time.Second
	}
	age := now.Sub(node.CreationTimestamp.Time)
	key := "node/" + node.Name + "/waiting"
	switch {
	case what == "":
		c.said.news(key, "")
	case age < after:
		c.nodeQueue.AddAfter(node.Name, after-age)
	case c.said.news(key, what):
		c.log.Info("Node still waits: nothing is written to it until then", "node", node.Name, "for", what, "registered", age.Round(time.Second).String()+" ago")
	}
}

// setWaiting keeps nodeinit_coordinator_nodes_waiting: Nodes synced and found waiting.
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

// Waiting reports whether the coordinator synced Node name and found it waiting (for its agent's
// report, providerID or serving CSR), writing nothing: a sync point for health checks and tests.
func (c *Coordinator) Waiting(name string) bool { return c.WaitingAt(name) != "" }

// WaitingAt is Node name's resourceVersion when last found waiting, "" when not waiting.
func (c *Coordinator) WaitingAt(name string) string {
	c.nodeStatus.mu.Lock()
	defer c.nodeStatus.mu.Unlock()
	return c.nodeStatus.waiting[name]
}

// synced records that Node name's sync succeeded at resourceVersion.
func (s *nodeStatus) synced(name, resourceVersion string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if n := s.syncs[name]; n != nil {
		n.at = resourceVersion
	}
}

// gone forgets a deleted Node: it no longer waits nor counts as left alone, and its sync counts go
// as the sync that found it gone finishes.
func (s *nodeStatus) gone(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.waiting, name)
	delete(s.unadopted, name)
	s.m.NodesWaiting.Set(float64(len(s.waiting)))
	s.m.NotAdopted.Set(float64(len(s.unadopted)))
	if n := s.syncs[name]; n != nil {
		n.at, n.gone = "", true
	}
}

// syncs counts a Node's syncs begun and finished, failed ones too: a workqueue runs one key's syncs
// in turn, so a sync begun after a count of begun ones has finished once finished exceeds it.
type syncs struct {
	begun, finished int
	at              string // the resourceVersion the last error-free sync was at
	gone            bool   // the Node is gone: forgotten as its sync finishes
}

// count counts a sync of Node name as begun; the func it returns, as finished.
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

// Syncs is how many syncs of Node name have begun and finished: to wait for a sync that begins
// after now, wait for finished to exceed begun as read now.
func (c *Coordinator) Syncs(name string) (begun, finished int) {
	c.nodeStatus.mu.Lock()
	defer c.nodeStatus.mu.Unlock()
	if n := c.nodeStatus.syncs[name]; n != nil {
		return n.begun, n.finished
	}
	return 0, 0
}

// SyncedAt is Node name's resourceVersion at its last error-free sync, CSRs too ("" when never).
func (c *Coordinator) SyncedAt(name string) string {
	c.nodeStatus.mu.Lock()
	defer c.nodeStatus.mu.Unlock()
	if n := c.nodeStatus.syncs[name]; n != nil {
		return n.at
	}
	return ""
}
