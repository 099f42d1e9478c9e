// Package observe holds the coordinator's own observations of Nodes, which no node can write:
// since when each Node has listed each address (Observer), and which informer list, if any,
// delivered an event (ListOrder); together they decide who listed an address first.
package observe

import (
	"math"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/talos-nodeinit/talos-nodeinit/coordinator/nodestate"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
)

// Observer remembers since when each Node has listed each address continuously (an address
// removed and added again starts over), so serving CSRs are decided on addresses stable for
// csr.minAddressAge, never on one snapshot. Standbys observe too, so a new leader is not blind.
//
// Who listed an address first is known only from the watch, which delivers changes in commit
// order. A list (the informer's first, or a relist after a watch gap) says nothing of the
// order of what it returns: two Nodes one list returned listing an address are each the
// other's earlier lister, never ordered by the list, which a node could steer with its name.
// Against other Nodes a list is ordered: after the watch events before it, before those after
// (ListOrder tells the Observer of a list's objects before the informer hands them over: Pend).
// A Node a relist returns changed may have dropped and re-listed an address during the gap:
// that listing counts as begun at an unknown time up to the relist (listed.lo), so it and every
// Node listing the address then hold it against each other.
//
// It holds every Node, so slices, not maps: few addresses per Node, usually one lister each.
type Observer struct {
	max int
	// epoch is what times are kept from, as nanoseconds of the monotonic clock, which a step
	// of the wall clock does not move.
	epoch time.Time
	clock clock.PassiveClock
	mu    sync.Mutex
	nodes map[string]observed
	byIP  map[netip.Addr][]lister // who lists each address, since when
	// pending are the versions of Nodes a list returned that the informer has not handed over:
	// it hands them over one at a time while workers run, and the first must not be decided
	// before the others are known. pendingBy holds them by Node, pending by address.
	pending   map[netip.Addr][]pendingLister
	pendingBy map[string][]pendingVersion
}

// pendingVersion is one version of a Node a list returned.
type pendingVersion struct {
	uid   types.UID
	rv    string
	list  uint32
	addrs []netip.Addr
}

type pendingLister struct {
	name, rv string
	list     uint32
}

// observed is one Node object's addresses, in its order.
type observed struct {
	uid   types.UID
	rv    string // the version handed over last
	addrs []listed
}

type listed struct {
	ip netip.Addr
	// since is when the Node began to list ip, as near as seen, in nanoseconds from epoch (a
	// time.Time is three times the size); the address counts as stable from then.
	since int64
	// lo is the earliest the Node may have begun to list ip (math.MinInt64: no bound); since,
	// unless a relist returned the Node changed after a watch gap (resumed).
	lo int64
	// list is the list that delivered ip first (0: the watch did, so since is when it began).
	list uint32
}

type lister struct {
	name string
	// from and to bound since when it has listed the address (nanoseconds from epoch): equal
	// unless a relist left it unsure, pendingFrom for a pending lister.
	from, to int64
	list     uint32 // the list it was first seen in (0: none)
}

// pendingFrom is the from of a lister a list returned, not handed over yet: it began after all
// the watch delivered before that list, so later than all but its list's.
const pendingFrom = math.MaxInt64

// New keeps at most max addresses per Node, timed by clk.
func New(max int, clk clock.PassiveClock) *Observer {
	return &Observer{max: max, clock: clk, epoch: clk.Now(), nodes: map[string]observed{}, byIP: map[netip.Addr][]lister{},
		pending: map[netip.Addr][]pendingLister{}, pendingBy: map[string][]pendingVersion{}}
}

func (o *Observer) index(name string, n observed) {
	for _, a := range n.addrs {
		o.byIP[a.ip] = append(o.byIP[a.ip], lister{name: name, from: a.lo, to: a.since, list: a.list})
	}
}

func (o *Observer) unindex(name string, n observed) {
	for _, a := range n.addrs {
		l := slices.DeleteFunc(o.byIP[a.ip], func(l lister) bool { return l.name == name })
		if len(l) == 0 {
			delete(o.byIP, a.ip)
		} else {
			o.byIP[a.ip] = l
		}
	}
}

// Earlier returns another eligible Node that has listed ip continuously since no later than
// self (the earliest, then by name), "" when none: an address two Nodes list is the first
// lister's until one is recorded. Two Nodes one list delivered listing it each count as earlier.
func (o *Observer) Earlier(ip netip.Addr, self string, eligible func(node string) bool) string {
	return o.EarlierOf(ip, self, true, eligible)
}

// EarlierOf is Earlier; when !selfHanded, the caller decides on a version of self listing ip
// that the observer has not been handed, and any other Node known to list ip counts as earlier.
func (o *Observer) EarlierOf(ip netip.Addr, self string, selfHanded bool, eligible func(node string) bool) string {
	o.mu.Lock()
	defer o.mu.Unlock()
	l := o.byIP[ip]
	if len(o.pendingBy) > 0 {
		// A Node handed over listing ip whose changed version is pending is as unsure of its order
		// as once that is handed over (listed.resumed): a sync may still read the older version.
		l = slices.Clone(l)
		for k, x := range l {
			if list, changed := o.changedIn(x.name); changed {
				l[k] = x.resumed(list)
			}
		}
	}
	if p := o.pending[ip]; len(p) > 0 {
		// Nodes not handed over listing ip, each by the earliest list that returned it listing ip.
		handed := make(map[string]bool, len(l))
		for _, x := range l {
			handed[x.name] = true
		}
		earliest := map[string]uint32{}
		for _, x := range p {
			if e, ok := earliest[x.name]; !handed[x.name] && (!ok || x.list < e) {
				earliest[x.name] = x.list
			}
		}
		l = slices.Clip(l)
		for name, list := range earliest {
			l = append(l, lister{name: name, from: pendingFrom, to: pendingFrom, list: list})
		}
	}
	if len(l) > 2 {
		// Which of several unordered Nodes is named must not depend on the order they are held in.
		l = slices.SortedFunc(slices.Values(l), func(a, b lister) int { return strings.Compare(a.name, b.name) })
	}
	i := slices.IndexFunc(l, func(l lister) bool { return l.name == self })
	if !selfHanded {
		i = -1
	}
	var best *lister
	for _, other := range l {
		if other.name == self || (i >= 0 && other.after(l[i])) || !eligible(other.name) {
			continue
		}
		if best == nil || best.after(other) || !other.after(*best) && other.name < best.name {
			best = &other
		}
	}
	if best == nil {
		return ""
	}
	return best.name
}

// changedIn says whether a pending version of the Node differs from the one handed over
// last, and the earliest list that returned one; o.mu is held.
func (o *Observer) changedIn(name string) (uint32, bool) {
	n, had := o.nodes[name]
	var list uint32
	for _, v := range o.pendingBy[name] {
		if had && v.rv != n.rv && (list == 0 || v.list < list) {
			list = v.list
		}
	}
	return list, list != 0
}

// resumed is l once a version a list returned changed is handed over
// (listed.resumed): it may have begun at any time up to now.
func (l lister) resumed(list uint32) lister {
	if l.list != 0 && l.from == l.to {
		l.from = math.MinInt64
	}
	l.to, l.list = pendingFrom, list
	return l
}

// after says whether a began to list an address after b, as far as known: never when one
// list returned both, nor when either may have begun at the other's time.
func (a lister) after(b lister) bool {
	if a.list != 0 && a.list == b.list {
		return false
	}
	return a.from > b.to
}

// resourceVersion reads a resource version as the integer the API server gives (etcd's revision).
func resourceVersion(s string) (uint64, bool) {
	n, err := strconv.ParseUint(s, 10, 64)
	return n, err == nil
}

// Handed says whether the Node's version handed over last is this one (uid, rv), listing ip.
func (o *Observer) Handed(name string, uid types.UID, rv string, ip netip.Addr) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	n, had := o.nodes[name]
	if !had || n.uid != uid || n.rv != rv {
		return false
	}
	_, listing := n.get(ip)
	return listing
}

// Pend notes a version of a Node a list returned, before the informer hands it over: its
// addresses count as listed from then on, by the earliest list that returned them.
func (o *Observer) Pend(node *corev1.Node, list uint32) {
	cur := nodestate.Addresses(node, o.max)
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, v := range o.pendingBy[node.Name] {
		if v.rv == node.ResourceVersion && v.list < list {
			list = v.list // one version two lists returned: the first's
		}
	}
	o.unpend(node.Name, func(v pendingVersion) bool { return v.rv == node.ResourceVersion })
	if len(cur) == 0 {
		return
	}
	o.pendingBy[node.Name] = append(o.pendingBy[node.Name], pendingVersion{uid: node.UID, rv: node.ResourceVersion, list: list, addrs: cur})
	for _, ip := range cur {
		o.pending[ip] = append(o.pending[ip], pendingLister{name: node.Name, rv: node.ResourceVersion, list: list})
	}
}

// unpend drops the pending versions of the Node name that drop says to.
func (o *Observer) unpend(name string, drop func(pendingVersion) bool) {
	vs := o.pendingBy[name]
	for _, v := range vs {
		if !drop(v) {
			continue
		}
		for _, ip := range v.addrs {
			l := slices.DeleteFunc(o.pending[ip], func(x pendingLister) bool { return x.name == name && x.rv == v.rv })
			if len(l) == 0 {
				delete(o.pending, ip)
			} else {
				o.pending[ip] = l
			}
		}
	}
	if vs = slices.DeleteFunc(vs, drop); len(vs) == 0 {
		delete(o.pendingBy, name)
	} else {
		o.pendingBy[name] = vs
	}
}

// DropList drops what a list that never completed returned: the informer hands none of it over.
func (o *Observer) DropList(list uint32) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for name := range o.pendingBy {
		o.unpend(name, func(v pendingVersion) bool { return v.list == list })
	}
}

// Observe records node's addresses at now and returns those added and removed. list is the
// informer list that delivered node (0: the watch did): the addresses it adds began at an
// unknown time before now, after the watch's last event before that list.
func (o *Observer) Observe(node *corev1.Node, now time.Time, list uint32) (added, removed []netip.Addr) {
	cur := nodestate.Addresses(node, o.max)
	o.mu.Lock()
	defer o.mu.Unlock()
	// A pending version goes once it, a later version of the object, or a later list's version
	// of the Node is handed over (an earlier list's are handed over first, or never). An older
	// version the watch delivers late leaves it pending. Resource versions compare as integers,
	// as in client-go's mutation cache; one that does not parse is older than none.
	rv, rvOK := resourceVersion(node.ResourceVersion)
	o.unpend(node.Name, func(v pendingVersion) bool {
		older, ok := resourceVersion(v.rv)
		return list != 0 && (v.rv == node.ResourceVersion || v.list < list) ||
			v.uid == node.UID && rvOK && ok && older < rv
	})
	old, had := o.nodes[node.Name]
	prev := old
	if had && prev.uid != node.UID {
		for _, a := range prev.addrs {
			removed = append(removed, a.ip)
		}
		prev = observed{}
	}
	// A relist returned the object changed: the watch missed what it listed meanwhile.
	resumed := list != 0 && had && old.uid == node.UID && old.rv != node.ResourceVersion
	if had && old.uid == node.UID && !resumed && slices.EqualFunc(old.addrs, cur, func(a listed, ip netip.Addr) bool { return a.ip == ip }) {
		old.rv = node.ResourceVersion
		o.nodes[node.Name] = old
		return nil, nil // the same addresses, in the same order: nothing to re-index
	}
	next := observed{uid: node.UID, rv: node.ResourceVersion, addrs: make([]listed, 0, len(cur))}
	for _, ip := range cur {
		if a, ok := prev.get(ip); ok && resumed {
			next.addrs = append(next.addrs, a.resumed(o.nanos(now), list))
		} else if ok {
			next.addrs = append(next.addrs, a)
		} else {
			next.addrs = append(next.addrs, listed{ip: ip, since: o.nanos(now), lo: o.nanos(now), list: list})
			added = append(added, ip)
		}
	}
	for _, a := range prev.addrs {
		if _, still := next.get(a.ip); !still {
			removed = append(removed, a.ip)
		}
	}
	o.unindex(node.Name, old)
	o.nodes[node.Name] = next
	o.index(node.Name, next)
	return added, removed
}

// resumed is a listing seen before a watch gap and again in list at now: it began between its
// earliest bound then (none when a list delivered it) and now, and is stable from now.
func (a listed) resumed(now int64, list uint32) listed {
	lo := a.lo
	if a.list != 0 && a.lo == a.since {
		lo = math.MinInt64 // a list delivered it: it began at an unknown time
	}
	return listed{ip: a.ip, since: now, lo: lo, list: list}
}

// nanos is t as the observer keeps it.
func (o *Observer) nanos(t time.Time) int64 { return int64(t.Sub(o.epoch)) }

func (n observed) get(ip netip.Addr) (listed, bool) {
	for _, a := range n.addrs {
		if a.ip == ip {
			return a, true
		}
	}
	return listed{}, false
}

// Forget drops a deleted Node object (uid; "": whichever) and returns the addresses it held;
// what a list returned of a later object of the name stays pending.
func (o *Observer) Forget(name string, uid types.UID) []netip.Addr {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.unpend(name, func(v pendingVersion) bool { return uid == "" || v.uid == uid })
	n, had := o.nodes[name]
	if !had || uid != "" && n.uid != uid && n.uid != "" {
		return nil
	}
	o.unindex(name, n)
	delete(o.nodes, name)
	out := make([]netip.Addr, 0, len(n.addrs))
	for _, a := range n.addrs {
		out = append(out, a.ip)
	}
	return out
}

// FirstSeen is since when each of the Node object's addresses has been observed continuously:
// wall-clock now less its monotonic age, as records' claims carry it and replicas compare them.
func (o *Observer) FirstSeen(name string, uid types.UID) map[netip.Addr]time.Time {
	return o.since(name, uid, false)
}

// FirstSeenOrdered is FirstSeen with a zero time (earliest of all) for each address whose
// beginning a list delivered or a relist left unsure: its order is not known, so a Node's
// name (a list's order) never decides who listed first.
func (o *Observer) FirstSeenOrdered(name string, uid types.UID) map[netip.Addr]time.Time {
	return o.since(name, uid, true)
}

func (o *Observer) since(name string, uid types.UID, ordered bool) map[netip.Addr]time.Time {
	now := o.clock.Now()
	o.mu.Lock()
	defer o.mu.Unlock()
	out := map[netip.Addr]time.Time{}
	if n, had := o.nodes[name]; had && n.uid == uid {
		for _, a := range n.addrs {
			if ordered && (a.list != 0 || a.lo != a.since) {
				out[a.ip] = time.Time{}
				continue
			}
			out[a.ip] = now.Round(0).Add(-time.Duration(o.nanos(now) - a.since))
		}
	}
	return out
}

// Seen is how long each of the Node's addresses has been observed at now.
func (o *Observer) Seen(name string, uid types.UID, now time.Time) map[netip.Addr]time.Duration {
	o.mu.Lock()
	defer o.mu.Unlock()
	out := map[netip.Addr]time.Duration{}
	if n, had := o.nodes[name]; had && n.uid == uid {
		for _, a := range n.addrs {
			out[a.ip] = now.Sub(o.epoch.Add(time.Duration(a.since)))
		}
	}
	return out
}
