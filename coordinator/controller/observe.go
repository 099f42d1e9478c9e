package controller

import (
	"maps"
	"net/netip"
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
type observer struct {
	max   int
	mu    sync.Mutex
	nodes map[string]*observed
	byIP  map[netip.Addr]map[string]time.Time // who lists each address, since when
}

type observed struct {
	uid   types.UID
	since map[netip.Addr]time.Time
	order []netip.Addr
}

func newObserver(max int) *observer {
	return &observer{max: max, nodes: map[string]*observed{}, byIP: map[netip.Addr]map[string]time.Time{}}
}

func (o *observer) index(name string, n *observed, add bool) {
	if n == nil {
		return
	}
	for ip, t := range n.since {
		if add {
			if o.byIP[ip] == nil {
				o.byIP[ip] = map[string]time.Time{}
			}
			o.byIP[ip][name] = t
		} else if m := o.byIP[ip]; m != nil {
			delete(m, name)
			if len(m) == 0 {
				delete(o.byIP, ip)
			}
		}
	}
}

// earlier returns another Node that has listed ip continuously since no
// later than self has (the earliest such, then by name), "" when none has:
// an address two Nodes list is the first lister's until one is recorded.
func (o *observer) earlier(ip netip.Addr, self string) string {
	o.mu.Lock()
	defer o.mu.Unlock()
	m := o.byIP[ip]
	mine, listed := m[self]
	best, bestAt := "", time.Time{}
	for name, t := range m {
		if name == self || (listed && t.After(mine)) {
			continue
		}
		if best == "" || t.Before(bestAt) || (t.Equal(bestAt) && name < best) {
			best, bestAt = name, t
		}
	}
	return best
}

// observe records node's addresses at now and returns those added and
// removed since the last observation.
func (o *observer) observe(node *corev1.Node, now time.Time) (added, removed []netip.Addr) {
	cur := nodestate.Addresses(node, o.max)
	o.mu.Lock()
	defer o.mu.Unlock()
	prev := o.nodes[node.Name]
	if prev != nil && prev.uid != node.UID {
		removed = append(removed, prev.order...)
		prev = nil
	}
	next := &observed{uid: node.UID, since: map[netip.Addr]time.Time{}, order: cur}
	for _, ip := range cur {
		if t, ok := prev.get(ip); ok {
			next.since[ip] = t
		} else {
			next.since[ip] = now
			added = append(added, ip)
		}
	}
	if prev != nil {
		for _, ip := range prev.order {
			if _, still := next.since[ip]; !still {
				removed = append(removed, ip)
			}
		}
	}
	o.index(node.Name, o.nodes[node.Name], false)
	o.nodes[node.Name] = next
	o.index(node.Name, next, true)
	return added, removed
}

func (n *observed) get(ip netip.Addr) (time.Time, bool) {
	if n == nil {
		return time.Time{}, false
	}
	t, ok := n.since[ip]
	return t, ok
}

// forget drops a deleted Node and returns the addresses it held.
func (o *observer) forget(name string) []netip.Addr {
	o.mu.Lock()
	defer o.mu.Unlock()
	n := o.nodes[name]
	o.index(name, n, false)
	delete(o.nodes, name)
	if n == nil {
		return nil
	}
	return n.order
}

// firstSeen is since when each of the Node object's addresses has been
// observed continuously.
func (o *observer) firstSeen(name string, uid types.UID) map[netip.Addr]time.Time {
	o.mu.Lock()
	defer o.mu.Unlock()
	out := map[netip.Addr]time.Time{}
	if n := o.nodes[name]; n != nil && n.uid == uid {
		maps.Copy(out, n.since)
	}
	return out
}

// seen is how long each of the Node's addresses has been observed at now.
func (o *observer) seen(name string, uid types.UID, now time.Time) map[netip.Addr]time.Duration {
	o.mu.Lock()
	defer o.mu.Unlock()
	out := map[netip.Addr]time.Duration{}
	if n := o.nodes[name]; n != nil && n.uid == uid {
		for ip, t := range n.since {
			out[ip] = now.Sub(t)
		}
	}
	return out
}
