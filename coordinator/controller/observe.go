package controller

import (
	"net/netip"
	"slices"
	"sync"
	"time"

	"github.com/talos-nodeinit/talos-nodeinit/coordinator/nodestate"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// observer remembers since when each Node's addresses have been seen
// continuously, from every informer event: an address a node adds and
// removes again (or an agent reverts) starts over. Serving CSRs are
// decided on addresses stable for csr.minAddressAge, never on one snapshot.
// Standbys observe too, so a new leader does not start blind.
//
// Which of two Nodes listed an address first is known, at best, when the
// observer saw one of them begin to: the Nodes of its first list had been
// listing theirs for some unknown time already. (A relist after a watch
// gap still delivers the Nodes that began during the gap in the list's
// order: SECURITY.md, "Still open".) Two of those listing one
// address each count as the other's earlier lister (the address is held
// against both), never by the order the list happened to come in, which a
// node could steer with its name.
//
// It holds an entry for every Node of the cluster, so it keeps them small:
// slices, not maps, for the few addresses each Node lists (at most max)
// and the Nodes listing each address (usually one).
type observer struct {
	max   int
	mu    sync.Mutex
	nodes map[string]observed
	byIP  map[netip.Addr][]lister // who lists each address, since when
}

// observed is one Node object's addresses, in its order.
type observed struct {
	uid   types.UID
	addrs []listed
}

type listed struct {
	ip    netip.Addr
	since time.Time
	// seenToBegin: observed after the first list, so since is when the
	// Node began to list ip, not merely when this process first saw it.
	seenToBegin bool
}

type lister struct {
	name string
	from time.Time // since when it has listed the address; zero when not known (first list)
}

func (a listed) from() time.Time {
	if a.seenToBegin {
		return a.since
	}
	return time.Time{}
}

func newObserver(max int) *observer {
	return &observer{max: max, nodes: map[string]observed{}, byIP: map[netip.Addr][]lister{}}
}

func (o *observer) index(name string, n observed) {
	for _, a := range n.addrs {
		o.byIP[a.ip] = append(o.byIP[a.ip], lister{name: name, from: a.from()})
	}
}

func (o *observer) unindex(name string, n observed) {
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
// Nodes list is the first lister's until one is recorded. Two Nodes of the
// first list are each other's earlier lister.
func (o *observer) earlier(ip netip.Addr, self string, eligible func(node string) bool) string {
	o.mu.Lock()
	defer o.mu.Unlock()
	l := o.byIP[ip]
	var mine time.Time
	i := slices.IndexFunc(l, func(l lister) bool { return l.name == self })
	if i >= 0 {
		mine = l[i].from
	}
	best, bestAt := "", time.Time{}
	for _, other := range l {
		if other.name == self || (i >= 0 && other.from.After(mine)) || !eligible(other.name) {
			continue
		}
		if best == "" || other.from.Before(bestAt) || (other.from.Equal(bestAt) && other.name < best) {
			best, bestAt = other.name, other.from
		}
	}
	return best
}

// observe records node's addresses at now and returns those added and
// removed since the last observation. firstList: node comes from the
// informer's first list, so its addresses were listed before now, since
// a time the observer cannot know.
func (o *observer) observe(node *corev1.Node, now time.Time, firstList bool) (added, removed []netip.Addr) {
	cur := nodestate.Addresses(node, o.max)
	o.mu.Lock()
	defer o.mu.Unlock()
	old, had := o.nodes[node.Name]
	prev := old
	if had && prev.uid != node.UID {
		for _, a := range prev.addrs {
			removed = append(removed, a.ip)
		}
		prev = observed{}
	}
	if had && old.uid == node.UID && slices.EqualFunc(old.addrs, cur, func(a listed, ip netip.Addr) bool { return a.ip == ip }) {
		return nil, nil // the same addresses, in the same order: nothing to re-index
	}
	next := observed{uid: node.UID, addrs: make([]listed, 0, len(cur))}
	for _, ip := range cur {
		if a, ok := prev.get(ip); ok {
			next.addrs = append(next.addrs, a)
		} else {
			next.addrs = append(next.addrs, listed{ip: ip, since: now, seenToBegin: !firstList})
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

func (n observed) get(ip netip.Addr) (listed, bool) {
	for _, a := range n.addrs {
		if a.ip == ip {
			return a, true
		}
	}
	return listed{}, false
}

// forget drops a deleted Node and returns the addresses it held.
func (o *observer) forget(name string) []netip.Addr {
	o.mu.Lock()
	defer o.mu.Unlock()
	n, had := o.nodes[name]
	if !had {
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
func (o *observer) firstSeen(name string, uid types.UID) map[netip.Addr]time.Time {
	o.mu.Lock()
	defer o.mu.Unlock()
	out := map[netip.Addr]time.Time{}
	if n, had := o.nodes[name]; had && n.uid == uid {
		for _, a := range n.addrs {
			out[a.ip] = a.since
		}
	}
	return out
}

// seen is how long each of the Node's addresses has been observed at now.
func (o *observer) seen(name string, uid types.UID, now time.Time) map[netip.Addr]time.Duration {
	o.mu.Lock()
	defer o.mu.Unlock()
	out := map[netip.Addr]time.Duration{}
	if n, had := o.nodes[name]; had && n.uid == uid {
		for _, a := range n.addrs {
			out[a.ip] = now.Sub(a.since)
		}
	}
	return out
}
