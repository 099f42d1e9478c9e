// Package observe holds the coordinator's own observations of Nodes, which
// no node can write: since when each Node has listed each of its addresses
// (Observer), and which of the Node informer's lists, if any, delivered an
// event (ListOrder): the order of first sights that decides who listed an
// address first.
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

// Observer remembers since when each Node's addresses have been seen
// continuously, from every informer event: an address a node adds and
// removes again (or an agent reverts) starts over. Serving CSRs are
// decided on addresses stable for csr.minAddressAge, never on one snapshot.
// Standbys observe too, so a new leader does not start blind.
//
// Which of two Nodes listed an address first is known, at best, when the
// Observer saw one of them begin to, from the informer's watch, which
// delivers changes in the order the API server committed them. A list
// does not: the informer's first (the Nodes had been listing their
// addresses for some unknown time already), or one it makes when its watch
// cannot resume after a gap (what changed meanwhile, in an order that says
// nothing about it: by name, or a stream's). Two Nodes whose listing of
// one address one list returned are each the other's earlier lister (the
// address is held against both), never by the order the list came in,
// which a node could steer with its name. Against any other Node the list
// orders them: a list returns what began after every event the watch
// delivered before it, and before every event after it (ListOrder says
// which list returned an object, and tells the observer of it before the
// informer hands it over: pend). A Node a relist returns changed may
// have stopped listing an address and begun again while the watch was
// cut: what it listed before counts as begun at an unknown time up to the
// relist (listed.lo), so it holds the address against, and is held
// against by, every Node listing it then.
//
// It holds an entry for every Node of the cluster, so it keeps them small:
// slices, not maps, for the few addresses each Node lists (at most max)
// and the Nodes listing each address (usually one).
type Observer struct {
	max int
	// epoch is what times are kept from, as nanoseconds: differences of
	// readings of the monotonic clock, which a step of the wall clock
	// does not move.
	epoch time.Time
	clock clock.PassiveClock
	mu    sync.Mutex
	nodes map[string]observed
	byIP  map[netip.Addr][]lister // who lists each address, since when
	// pending are the versions of Nodes a list returned that the informer
	// has not handed over yet: it hands a list's Nodes to the coordinator
	// one at a time while the workers run, so the first handed over must
	// not be decided before the others are known. pendingBy is each
	// Node's, by version; pending indexes them by address.
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
	// since is when the Node began to list ip, as near as the observer
	// can see, in nanoseconds from the observer's epoch (a time.Time is
	// three times the size, and the observer holds every Node's
	// addresses); it is when the address counts as stable from.
	since int64
	// lo is the earliest the Node may have begun to list ip (math.MinInt64:
	// no bound): since, unless a relist returned the Node changed after it
	// had listed ip before the watch was cut, perhaps not all along
	// (resumed).
	lo int64
	// list is the list that delivered ip first (0: the watch did, so since
	// is when the Node began to list it, as near as the observer can see).
	list uint32
}

type lister struct {
	name string
	// from and to bound since when it has listed the address, as observed
	// (nanoseconds from the observer's epoch; equal unless a relist left it
	// unsure; a pending lister's are pendingFrom).
	from, to int64
	list     uint32 // the list it was first seen in (0: none)
}

// pendingFrom is a pending lister's from: a list returned it and the
// informer has not handed it over yet. It began after everything the
// watch delivered before that list, handed over yet or not, so it is
// later than all but its list's.
const pendingFrom = math.MaxInt64

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

// earlier returns another Node that may hold ip (eligible) and has listed
// it continuously since no later than self has, as far as the observer
// knows (the earliest such, then by name), "" when none has: an address two
// Nodes list is the first lister's until one is recorded. Two Nodes that
// one list delivered listing it are each other's earlier lister.
func (o *Observer) Earlier(ip netip.Addr, self string, eligible func(node string) bool) string {
	return o.EarlierOf(ip, self, true, eligible)
}

// earlierOf is earlier; when !selfHanded, the observer has not been
// handed the version of self the caller decides on, listing ip, and any
// other Node it knows listing ip counts as earlier.
func (o *Observer) EarlierOf(ip netip.Addr, self string, selfHanded bool, eligible func(node string) bool) string {
	o.mu.Lock()
	defer o.mu.Unlock()
	l := o.byIP[ip]
	if len(o.pendingBy) > 0 {
		// A Node handed over listing ip before a list returned it changed
		// (pending) is as unsure of its order as once that version is
		// handed over (listed.resumed): a sync may still read the version
		// from before the gap. (One that did not list ip then began to
		// after the watch's last event: it is pending below.)
		l = slices.Clone(l)
		for k, x := range l {
			if list, changed := o.changedIn(x.name); changed {
				l[k] = x.resumed(list)
			}
		}
	}
	if p := o.pending[ip]; len(p) > 0 {
		// A Node not handed over listing ip, by the earliest list that
		// returned a version of it listing ip.
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
		// Which of several that none is known to precede is named must not
		// depend on the order they are held in.
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

// changedIn says whether a list returned a version of the Node other than
// the one handed over last, not handed over yet, and the earliest such
// list; o.mu is held.
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

// after says whether a began to list an address after b did, as far as
// the observer knows: never when one list returned both, nor when either
// may have begun at the other's time.
func (a lister) after(b lister) bool {
	if a.list != 0 && a.list == b.list {
		return false
	}
	return a.from > b.to
}

// resourceVersion reads an object's resource version as the integer the
// API server gives (etcd's revision).
func resourceVersion(s string) (uint64, bool) {
	n, err := strconv.ParseUint(s, 10, 64)
	return n, err == nil
}

// handed says whether the version handed over last of the Node is this
// one (uid, rv), listing ip.
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

// pend notes a version of a Node a list returned, before the informer
// hands it over (ListOrder calls it): its addresses count as listed from
// then on, by the earliest list that returned a version listing them.
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

// dropList drops what a list returned that the informer will not hand
// over: the list never completed (ListOrder calls it when the next begins).
func (o *Observer) DropList(list uint32) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for name := range o.pendingBy {
		o.unpend(name, func(v pendingVersion) bool { return v.list == list })
	}
}

// observe records node's addresses at now and returns those added and
// removed since the last observation. list is the informer's list that
// delivered node (0: its watch did): the addresses it adds were listed
// before now, since a time the observer cannot know but after the
// watch's last event before that list.
func (o *Observer) Observe(node *corev1.Node, now time.Time, list uint32) (added, removed []netip.Addr) {
	cur := nodestate.Addresses(node, o.max)
	o.mu.Lock()
	defer o.mu.Unlock()
	// What a list returned of this Node and is still pending goes when
	// that version is handed over, or a later one of the object: versions
	// earlier lists returned were handed over before it, or never will be.
	// An older version the watch delivered late leaves it pending. (Resource
	// versions compare as integers, as client-go's mutation cache takes
	// them; one that does not parse is older than none.)
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
	// A relist returned the object changed: the watch missed what it
	// listed meanwhile.
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

// resumed is a listing seen before a watch gap and again in list at now:
// it began between its earliest bound then (none when a list delivered
// it) and now, and it is stable from now.
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

// forget drops a deleted Node object (uid; "": whichever) and returns
// the addresses it held. What a list returned of a later object of the
// name stays pending.
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

// firstSeen is since when each of the Node object's addresses has been
// observed continuously.
// The date is the wall clock's now less the address's age on the
// monotonic clock: a record's claim carries it, and replicas compare them.
func (o *Observer) FirstSeen(name string, uid types.UID) map[netip.Addr]time.Time {
	return o.since(name, uid, false)
}

// firstSeenOrdered is firstSeen with a zero time (earliest of all) for
// each address whose beginning a list delivered, or a relist left unsure:
// its order against another Node's is not known, so a Node's name (the
// order of a list) never decides who listed first.
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

// seen is how long each of the Node's addresses has been observed at now.
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
