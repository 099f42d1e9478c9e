package records_test

import (
	"fmt"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/talos-nodeinit/talos-nodeinit/coordinator/records"
	"github.com/talos-nodeinit/talos-nodeinit/pkg/coordinator/finalize"
	"github.com/talos-nodeinit/talos-nodeinit/pkg/ipam"
)

// The prefix invariant (class 3), as a property over orders of joins,
// listings and deletions, run through the functions the coordinator's
// Node sync uses (records.NextClaims, records.InPrefix, finalize.Request,
// records.NodePrefix, the ipam allocator with every listed address
// reserved):
//
//   - a node prefix is carved for at most one live Node;
//   - no Node's pod segment ever holds an address recorded for another
//     Node, whether that Node listed it before the segment was carved or
//     after.
//
// The addresses are chosen so that segments and addresses collide: four
// /64s, and in each an address of the segment the allocator hands out
// first, and of the next ones; nodes report each address's /64 or a /96
// (a longer prefix, whose /64 is the unit of ownership).

var prefixModelAddrs = func() []netip.Addr {
	var out []netip.Addr
	for net := range 3 {
		for _, host := range []string{"0::1", "0::2", "1::5", "2::5", "3::7"} {
			out = append(out, netip.MustParseAddr(fmt.Sprintf("2001:db8:0:%x:%s", net, host)))
		}
	}
	return out
}()

type modelNode struct {
	listed []netip.Addr
	bits   map[netip.Addr]int // the prefix length the node reports around each address
	rec    records.Spec
	cidrs  []netip.Prefix
}

type prefixModel struct {
	t      *testing.T
	alloc  *ipam.Allocator
	nodes  map[string]*modelNode
	now    time.Time
	shared []netip.Prefix
}

func newPrefixModel(t *testing.T, shared ...netip.Prefix) *prefixModel {
	a, err := ipam.New(ipam.Config{Families: []ipam.Family{ipam.IPv6}})
	if err != nil {
		t.Fatal(err)
	}
	return &prefixModel{t: t, alloc: a, nodes: map[string]*modelNode{}, now: time.Date(2026, 11, 24, 0, 0, 0, 0, time.UTC), shared: shared}
}

func (m *prefixModel) near() []records.Holding {
	var out []records.Holding
	for name, n := range m.nodes {
		if p, err := netip.ParsePrefix(n.rec.Prefix); err == nil {
			out = append(out, records.Holding{Node: name, Prefix: p})
		}
		for _, c := range n.rec.Addresses {
			out = append(out, records.Holding{Node: name, Addr: netip.MustParseAddr(c.IP), Since: c.Since})
		}
	}
	return out
}

func (m *prefixModel) list(name string, ip netip.Addr, bits int) {
	n := m.nodes[name]
	if n == nil {
		n = &modelNode{bits: map[netip.Addr]int{}}
		m.nodes[name] = n
	}
	n.bits[ip] = bits
	if !slices.Contains(n.listed, ip) {
		n.listed = append(n.listed, ip)
		m.alloc.Reserve(ip) // the coordinator reserves every observed Node address
	}
	m.sync(name)
}

func (m *prefixModel) remove(name string) {
	n := m.nodes[name]
	if n == nil {
		return
	}
	m.alloc.Release(name)
	delete(m.nodes, name)
	for _, ip := range n.listed {
		still := false
		for _, o := range m.nodes {
			still = still || slices.Contains(o.listed, ip)
		}
		if !still {
			m.alloc.Unreserve(ip)
		}
	}
}

// sync is the Node sync's claim and prefix decision for one Node.
func (m *prefixModel) sync(name string) {
	m.now = m.now.Add(time.Second)
	n := m.nodes[name]
	near := m.near()
	others := map[netip.Addr]string{}
	for _, ip := range n.listed {
		owner := ""
		for other, o := range m.nodes {
			if other != name && slices.ContainsFunc(o.rec.Addresses, func(c records.Claim) bool { return c.IP == ip.String() }) {
				owner = other
			}
		}
		if owner == "" {
			owner = records.InPrefix(name, ip, near)
		}
		if owner != "" {
			others[ip] = owner
		}
	}
	pol := records.ClaimPolicy{Networks: []netip.Prefix{netip.MustParsePrefix("2001:db8::/32")}, Max: 16, Node: name}
	n.rec.Addresses, _ = records.NextClaims(n.rec.Addresses, n.listed, others, nil, pol, m.now)
	if len(n.cidrs) > 0 {
		return
	}
	var rep finalize.Reported
	for _, ip := range n.listed {
		p, _ := ip.Prefix(n.bits[ip])
		if !slices.Contains(rep.Prefixes, p) {
			rep.Prefixes = append(rep.Prefixes, p)
		}
	}
	req := finalize.Request(records.ClaimedIPs(n.rec.Addresses), rep, pol.Networks, false, false)
	if !req.IPv6Prefix.IsValid() {
		return
	}
	set, _, err := ipam.SegmentFor(req.IPv6Prefix, req.IPv6Addr)
	if err != nil {
		m.t.Fatal(err)
	}
	prefix, holder := records.NodePrefix(name, set, n.rec.Addresses, n.rec.Prefix, near, m.shared, nil)
	if holder != "" {
		return // no pool in this model: the Node gets no IPv6 segment
	}
	cidrs, err := m.alloc.Allocate(name, req)
	if err != nil {
		return // the prefix is full
	}
	n.cidrs, n.rec.Prefix = cidrs, prefix
}

// check returns the first broken invariant, "" when both hold.
func (m *prefixModel) check() string {
	for a, na := range m.nodes {
		for b, nb := range m.nodes {
			if a == b {
				continue
			}
			pa, errA := netip.ParsePrefix(na.rec.Prefix)
			pb, errB := netip.ParsePrefix(nb.rec.Prefix)
			if errA == nil && errB == nil && slash64(pa).Overlaps(slash64(pb)) {
				return fmt.Sprintf("node prefixes %s (%s) and %s (%s) are both carved", pa, a, pb, b)
			}
			for _, seg := range na.cidrs {
				for _, c := range nb.rec.Addresses {
					if ip := netip.MustParseAddr(c.IP); seg.Contains(ip) {
						return fmt.Sprintf("%s's pod segment %s holds %s, recorded for %s", a, seg, ip, b)
					}
				}
			}
		}
	}
	return ""
}

// run plays ops: two bytes each, a Node (of four) and what it does.
func (m *prefixModel) run(ops []byte) string {
	names := []string{"a", "b", "c", "d"}
	for i := 0; i+1 < len(ops); i += 2 {
		name := names[int(ops[i])%len(names)]
		switch ops[i] / 64 {
		case 0: // list an address in a reported /64 (its sync follows)
			m.list(name, prefixModelAddrs[int(ops[i+1])%len(prefixModelAddrs)], 64)
		case 1: // list an address in a reported /96 (a longer prefix)
			m.list(name, prefixModelAddrs[int(ops[i+1])%len(prefixModelAddrs)], 96)
		case 2: // deleted (a re-join lists again)
			m.remove(name)
		default: // a resync of every Node, in name order
			for _, n := range names {
				if m.nodes[n] != nil {
					m.sync(n)
				}
			}
		}
		if broken := m.check(); broken != "" {
			return fmt.Sprintf("after op %d (%v): %s", i/2, ops[:i+2], broken)
		}
	}
	return ""
}

func slash64(p netip.Prefix) netip.Prefix {
	if p.Bits() > 64 {
		p, _ = p.Addr().Prefix(64)
	}
	return p
}

func TestPrefixOwnershipOrders(t *testing.T) {
	for _, c := range []struct {
		name string
		ops  []byte
	}{
		// b lists an address of a's /64 after a carved its segment there.
		{"a later address inside a carved segment", []byte{0, 0, 1, 2}},
		// The attacker (b) lists an unused address of the victim's /64
		// before the victim (a) joins.
		{"an attacker pre-claims the victim's /64", []byte{1, 3, 0, 0, 0, 2}},
		{"two Nodes list the same /64 at once", []byte{0, 0, 1, 1, 192, 0}},
		{"delete and re-join in the other order", []byte{0, 0, 1, 1, 128, 0, 1, 2, 0, 3}},
	} {
		t.Run(c.name, func(t *testing.T) {
			if broken := newPrefixModel(t).run(c.ops); broken != "" {
				t.Fatal(broken)
			}
		})
	}
	// Every sequence of four ops over these addresses.
	ops := make([]byte, 8)
	var walk func(i int)
	count := 0
	walk = func(i int) {
		if t.Failed() {
			return
		}
		if i == len(ops) {
			count++
			if broken := newPrefixModel(t).run(ops); broken != "" {
				t.Fatal(broken)
			}
			return
		}
		for _, kind := range []byte{0, 64 + 1, 128 + 2, 192 + 3} {
			for _, arg := range []byte{0, 1, 2, 3, 5} {
				if kind >= 128 && arg != 0 {
					continue
				}
				ops[i], ops[i+1] = kind, arg
				walk(i + 2)
			}
		}
	}
	walk(0)
	t.Logf("%d orders checked", count)
}

// In an ipam.sharedPrefixes network several Nodes carve distinct segments
// from one /64 (a link shared by many nodes), none around another's
// address listed before. What sharing gives up, and why it is opt-in: an
// address listed later, inside a segment already carved, is recorded for
// its Node all the same.
func TestSharedPrefixesAreCarvedByEveryone(t *testing.T) {
	m := newPrefixModel(t, netip.MustParsePrefix("2001:db8::/32"))
	if broken := m.run([]byte{0, 0, 1, 1}); broken != "" {
		t.Fatal(broken)
	}
	for _, name := range []string{"a", "b"} {
		if len(m.nodes[name].cidrs) != 1 || m.nodes[name].rec.Prefix != "" {
			t.Errorf("%s: cidrs %v, recorded prefix %q: want one segment and no exclusive prefix", name, m.nodes[name].cidrs, m.nodes[name].rec.Prefix)
		}
	}
	if broken := m.run([]byte{2, 2}); broken == "" {
		t.Error("in a shared prefix, an address listed inside a's carved segment was not recorded for c: the model no longer shows what sharing gives up")
	}
	// The same order without sharing: c's address is a's, never c's.
	if broken := newPrefixModel(t).run([]byte{0, 0, 1, 1, 2, 2}); broken != "" {
		t.Fatal(broken)
	}
}

func FuzzPrefixOwnership(f *testing.F) {
	f.Add([]byte{0, 0, 1, 2})
	f.Add([]byte{1, 3, 0, 0, 0, 2})
	f.Add([]byte{0, 0, 1, 1, 192, 0, 130, 0, 2, 4, 3, 9})
	f.Fuzz(func(t *testing.T, ops []byte) {
		if len(ops) > 64 {
			ops = ops[:64]
		}
		if broken := newPrefixModel(t).run(ops); broken != "" {
			t.Fatal(broken)
		}
	})
}
