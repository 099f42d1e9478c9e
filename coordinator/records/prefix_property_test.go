package records_test

import (
	"fmt"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/talos-nodeinit/talos-nodeinit/coordinator/finalize"
	"github.com/talos-nodeinit/talos-nodeinit/coordinator/records"
	"github.com/talos-nodeinit/talos-nodeinit/pkg/ipam"
)

// The prefix invariant (class 3), as a property over orders of joins,
// listings, bindings added and removed, deletions and leader restarts, run
// through the functions the coordinator's Node sync uses
// (records.NextClaims, records.InPrefix, finalize.Request,
// records.PrefixRules.NodePrefix, records.BoundElsewhere, the ipam
// allocator with every listed address reserved):
//
//   - a node prefix is carved only for a Node the inventory binds it to,
//     or, in a first-claim network, for the first Node to list an address
//     in it; for at most one live Node;
//   - no pod segment holds, when it is carved, an address another Node
//     lists or a range the inventory binds to another Node;
//   - outside first-claim networks, no segment holds an address the
//     inventory binds to another Node, unless the binding came after the
//     carve (then records.BoundElsewhere names the conflict);
//   - no address is recorded for a Node the binding holding it does not
//     name.
//
// The addresses are chosen so that segments and addresses collide: three
// /64s, and in each an address of the low end, of the top segment the
// allocator hands out first, and of others; nodes report each address's
// /64 or a /96 (a longer prefix, whose /64 is the unit of ownership).

var prefixModelAddrs = func() []netip.Addr {
	var out []netip.Addr
	for net := range 3 {
		for _, host := range []string{"0::1", "0::2", "ffff::5", "fffe::5", "1::7"} {
			out = append(out, netip.MustParseAddr(fmt.Sprintf("2001:db8:0:%x:%s", net, host)))
		}
	}
	return out
}()

// prefixModelBindings are the bindings an op toggles: a /64 each for a and
// b, a /112 inside a's /64 around its top segment for c, and a /48 holding
// everything for d.
var prefixModelBindings = []records.Binding{
	{Names: []string{"a"}, Networks: []netip.Prefix{netip.MustParsePrefix("2001:db8:0:0::/64")}},
	{Names: []string{"b"}, Networks: []netip.Prefix{netip.MustParsePrefix("2001:db8:0:1::/64")}},
	{Names: []string{"c"}, Networks: []netip.Prefix{netip.MustParsePrefix("2001:db8:0:0:ffff::/112")}},
	{Names: []string{"d"}, Networks: []netip.Prefix{netip.MustParsePrefix("2001:db8::/48")}},
}

type modelNode struct {
	listed  []netip.Addr
	since   map[netip.Addr]time.Time // first listed
	bits    map[netip.Addr]int       // the prefix length the node reports around each address
	rec     records.Spec
	cidrs   []netip.Prefix
	carvedV int // the inventory's version at the carve
}

type prefixModel struct {
	t          *testing.T
	alloc      *ipam.Allocator
	nodes      map[string]*modelNode
	now        time.Time
	shared     []netip.Prefix
	firstClaim []netip.Prefix
	bound      []bool // which prefixModelBindings are on
	invV       int    // bumped when the inventory changes
}

func newPrefixModel(t *testing.T, shared ...netip.Prefix) *prefixModel {
	m := &prefixModel{t: t, nodes: map[string]*modelNode{}, now: time.Date(2026, 11, 24, 0, 0, 0, 0, time.UTC), shared: shared, bound: make([]bool, len(prefixModelBindings))}
	m.restart()
	return m
}

// firstClaimModel is the model with the whole test range opted in to first
// claim (ipam.firstClaimPrefixes).
func firstClaimModel(t *testing.T) *prefixModel {
	m := newPrefixModel(t)
	m.firstClaim = []netip.Prefix{netip.MustParsePrefix("2001:db8::/32")}
	return m
}

// restart is a new leader: the allocator rebuilt from the Nodes' pod CIDRs
// and listed addresses; records and Nodes stay.
func (m *prefixModel) restart() {
	a, err := ipam.New(ipam.Config{Families: []ipam.Family{ipam.IPv6}})
	if err != nil {
		m.t.Fatal(err)
	}
	m.alloc = a
	for name, n := range m.nodes {
		if len(n.cidrs) > 0 {
			_ = a.Occupy(name, n.cidrs)
		}
		for _, ip := range n.listed {
			a.Reserve(ip)
		}
	}
}

func (m *prefixModel) inventory() []records.Binding {
	var inv []records.Binding
	for i, on := range m.bound {
		if on {
			inv = append(inv, prefixModelBindings[i])
		}
	}
	return inv
}

func (m *prefixModel) rules() records.PrefixRules {
	return records.PrefixRules{Inventory: m.inventory(), FirstClaim: m.firstClaim, Shared: m.shared}
}

// near is what other Nodes hold: records' prefixes and claims, and what
// they list since they first listed it.
func (m *prefixModel) near() []records.Holding {
	var out []records.Holding
	for name, n := range m.nodes {
		if p, err := netip.ParsePrefix(n.rec.Prefix); err == nil {
			out = append(out, records.Holding{Node: name, Prefix: p})
		}
		for _, c := range n.rec.Addresses {
			out = append(out, records.Holding{Node: name, Addr: netip.MustParseAddr(c.IP), Since: c.Since})
		}
		for _, ip := range n.listed {
			out = append(out, records.Holding{Node: name, Addr: ip, Since: n.since[ip]})
		}
	}
	return out
}

func (m *prefixModel) list(name string, ip netip.Addr, bits int) {
	n := m.nodes[name]
	if n == nil {
		n = &modelNode{bits: map[netip.Addr]int{}, since: map[netip.Addr]time.Time{}}
		m.nodes[name] = n
	}
	n.bits[ip] = bits
	if !slices.Contains(n.listed, ip) {
		m.now = m.now.Add(time.Second)
		n.listed = append(n.listed, ip)
		n.since[ip] = m.now
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
	inv := m.inventory()
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
		if owner != "" && records.Bound(inv, owner, ip) == nil {
			others[ip] = owner
		}
	}
	pol := records.ClaimPolicy{Networks: []netip.Prefix{netip.MustParsePrefix("2001:db8::/32")}, Max: 16, Node: name, Inventory: inv}
	n.rec.Addresses, _ = records.NextClaims(n.rec.Addresses, n.listed, others, n.since, pol, m.now)
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
	mine := records.Earliest(set, n.rec.Addresses, n.since)
	prefix, holder, why := m.rules().NodePrefix(name, set, mine, n.rec.Prefix, near, nil)
	if holder != "" || why != "" {
		return // no pool in this model: the Node gets no IPv6 segment
	}
	req.Avoid = n.listed
	req.AvoidRanges = records.BoundElsewhere(inv, name, set)
	cidrs, err := m.alloc.Allocate(name, req)
	if err != nil {
		return // the prefix is full
	}
	n.cidrs, n.rec.Prefix, n.carvedV = cidrs, prefix, m.invV
	for other, o := range m.nodes {
		for _, ip := range o.listed {
			if other != name && cidrs[0].Contains(ip) {
				m.t.Fatalf("%s's segment %s, carved now, holds %s, which %s lists", name, cidrs[0], ip, other)
			}
		}
	}
	if _, why := m.rules().Entitled(name, set); why != "" {
		m.t.Fatalf("%s carved %s from %s: %s", name, cidrs[0], set, why)
	}
	if r := records.BoundElsewhere(inv, name, cidrs[0]); len(r) > 0 {
		m.t.Fatalf("%s's segment %s, carved now, overlaps %v, bound to others", name, cidrs[0], r)
	}
}

// check returns the first broken invariant, "" when all hold.
func (m *prefixModel) check() string {
	inv := m.inventory()
	for a, na := range m.nodes {
		for _, c := range na.rec.Addresses {
			if err := records.Bound(inv, a, netip.MustParseAddr(c.IP)); err != nil {
				return fmt.Sprintf("%s holds %s: %v", a, c.IP, err)
			}
		}
		for _, seg := range na.cidrs {
			if len(m.shared) == 0 && len(m.firstClaim) == 0 && len(inv) == 0 && na.carvedV == m.invV {
				return fmt.Sprintf("%s carved %s with no inventory and no first claim", a, seg)
			}
			if na.carvedV == m.invV && len(m.firstClaim) == 0 {
				if r := records.BoundElsewhere(inv, a, seg); len(r) > 0 {
					return fmt.Sprintf("%s's segment %s overlaps %v, bound to others", a, seg, r)
				}
			}
		}
		for b, nb := range m.nodes {
			if a == b {
				continue
			}
			pa, errA := netip.ParsePrefix(na.rec.Prefix)
			pb, errB := netip.ParsePrefix(nb.rec.Prefix)
			if errA == nil && errB == nil && slash64(pa).Overlaps(slash64(pb)) && na.carvedV == m.invV && nb.carvedV == m.invV {
				return fmt.Sprintf("node prefixes %s (%s) and %s (%s) are both carved", pa, a, pb, b)
			}
			for _, seg := range na.cidrs {
				for _, c := range nb.rec.Addresses {
					// (A binding added after the carve gives b its address
					// inside a's segment: a conflict the coordinator reports,
					// never certified while the segment is a's.)
					if ip := netip.MustParseAddr(c.IP); seg.Contains(ip) && na.carvedV == m.invV {
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
		arg := int(ops[i+1])
		switch ops[i] / 64 {
		case 0: // list an address in a reported /64 (its sync follows)
			m.list(name, prefixModelAddrs[arg%len(prefixModelAddrs)], 64)
		case 1: // list an address in a reported /96 (a longer prefix)
			m.list(name, prefixModelAddrs[arg%len(prefixModelAddrs)], 96)
		case 2: // deleted (a re-join lists again)
			m.remove(name)
		default:
			switch arg % 3 {
			case 0: // a resync of every Node, in name order
			case 1: // the admin adds or removes a binding
				b := (arg / 3) % len(m.bound)
				m.bound[b] = !m.bound[b]
				m.invV++
			case 2: // a leader restart
				m.restart()
			}
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
	bind := func(b int) []byte { return []byte{192, byte(1 + 3*b)} } // toggles prefixModelBindings[b]
	for _, c := range []struct {
		name       string
		firstClaim bool
		ops        []byte
	}{
		{"without an inventory nobody carves", false, []byte{0, 0, 1, 6}},
		{"a bound Node carves", false, slices.Concat(bind(0), []byte{0, 0})},
		// b lists an address of a's /64 after a carved its segment there.
		{"a later address inside a carved segment", true, []byte{0, 0, 1, 2}},
		// The attacker (b) lists an unused address of the victim's /64
		// before the victim (a) joins.
		{"an attacker pre-claims the victim's /64", true, []byte{1, 3, 0, 0, 0, 2}},
		{"an attacker pre-claims a bound /64", false, slices.Concat(bind(0), []byte{1, 3, 0, 0, 0, 2})},
		{"two Nodes list the same /64 at once", true, []byte{0, 0, 1, 1, 192, 0}},
		{"delete and re-join in the other order", true, []byte{0, 0, 1, 1, 128, 0, 1, 2, 0, 3}},
		{"a /112 bound inside a bound /64", false, slices.Concat(bind(0), bind(2), []byte{0, 2, 2, 2})},
		{"a /112 bound after the carve", false, slices.Concat(bind(0), []byte{0, 2}, bind(2), []byte{2, 2})},
		{"the most specific binding wins", false, slices.Concat(bind(3), bind(0), []byte{3, 0, 0, 1})},
		{"a leader restart between listing and carve", false, slices.Concat([]byte{0, 0}, []byte{192, 2}, bind(0))},
	} {
		t.Run(c.name, func(t *testing.T) {
			m := newPrefixModel(t)
			if c.firstClaim {
				m = firstClaimModel(t)
			}
			if broken := m.run(c.ops); broken != "" {
				t.Fatal(broken)
			}
		})
	}
	// Every sequence of four ops over these addresses and bindings, with
	// and without first claim.
	ops := make([]byte, 8)
	var walk func(i int, mk func(*testing.T) *prefixModel)
	count := 0
	walk = func(i int, mk func(*testing.T) *prefixModel) {
		if t.Failed() {
			return
		}
		if i == len(ops) {
			count++
			if broken := mk(t).run(ops); broken != "" {
				t.Fatal(broken)
			}
			return
		}
		for _, kind := range []byte{0, 64 + 1, 128 + 2, 192 + 3} {
			for _, arg := range []byte{1, 2, 4, 7, 10} {
				if kind >= 128 && kind < 192 && arg != 0 {
					continue
				}
				ops[i], ops[i+1] = kind, arg
				walk(i+2, mk)
			}
		}
	}
	walk(0, func(t *testing.T) *prefixModel { return newPrefixModel(t) })
	walk(0, firstClaimModel)
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
	// c lists an address inside a's segment (the top /80 of the /64).
	if broken := m.run([]byte{2, 2}); broken == "" {
		t.Error("in a shared prefix, an address listed inside a's carved segment was not recorded for c: the model no longer shows what sharing gives up")
	}
	// The same order with first claim: c's address is a's, never c's.
	if broken := firstClaimModel(t).run([]byte{0, 0, 1, 1, 2, 2}); broken != "" {
		t.Fatal(broken)
	}
}

func FuzzPrefixOwnership(f *testing.F) {
	f.Add(false, []byte{0, 0, 1, 2})
	f.Add(true, []byte{1, 3, 0, 0, 0, 2})
	f.Add(false, []byte{192, 1, 0, 0, 1, 1, 192, 0, 130, 0, 2, 4, 192, 7, 3, 9})
	f.Fuzz(func(t *testing.T, firstClaim bool, ops []byte) {
		if len(ops) > 64 {
			ops = ops[:64]
		}
		m := newPrefixModel(t)
		if firstClaim {
			m = firstClaimModel(t)
		}
		if broken := m.run(ops); broken != "" {
			t.Fatal(broken)
		}
	})
}
