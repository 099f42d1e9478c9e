package ipam

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"slices"
	"strings"
	"testing"
)

func mp(s string) netip.Prefix { return netip.MustParsePrefix(s) }
func ma(s string) netip.Addr   { return netip.MustParseAddr(s) }

func TestSegmentFor(t *testing.T) {
	cases := []struct {
		prefix, addr string
		set          string
		seg          int
		err          bool
	}{
		{"2001:db8:1:2::/64", "2001:db8:1:2::5", "2001:db8:1:2::/64", 80, false},
		{"2001:db8:ff00::/56", "2001:db8:ff00:7::5", "2001:db8:ff00:7::/64", 80, false},
		{"2001:db8::/48", "2001:db8:0:9::1", "2001:db8:0:9::/64", 80, false},
		{"2001:db8:1:2:3::/80", "2001:db8:1:2:3::1", "2001:db8:1:2:3::/80", 92, false},
		{"2001:db8:1:2::/96", "2001:db8:1:2::1", "2001:db8:1:2::/96", 104, false},
		{"2001:db8::/120", "2001:db8::1", "2001:db8::/120", 122, false},
		{"2001:db8::/124", "2001:db8::1", "", 0, true},
		{"2001:db8::1/128", "2001:db8::1", "", 0, true},
		{"2001:db8::/56", "2001:db9::1", "", 0, true}, // address outside its prefix
		{"10.0.0.0/8", "10.0.0.1", "", 0, true},
	}
	for _, c := range cases {
		set, seg, err := SegmentFor(mp(c.prefix), ma(c.addr))
		if (err != nil) != c.err || (!c.err && (set != mp(c.set) || seg != c.seg)) {
			t.Errorf("SegmentFor(%s, %s) = %s /%d %v", c.prefix, c.addr, set, seg, err)
		}
	}
}

func TestAllocationCases(t *testing.T) {
	a, err := New(Config{IPv4Pool: mp("10.244.0.0/22"), IPv6Pool: mp("fd00:10:244::/64"),
		ServiceCIDRs: []netip.Prefix{mp("10.244.1.0/24"), mp("fd00:10:244::/112")}})
	if err != nil {
		t.Fatal(err)
	}
	// n1's /64 holds n3's address in its first segment: that segment is never handed out.
	a.Reserve(ma("2001:db8:1:2::5"))
	a.Reserve(ma("2001:db8:1:2:1::1"))

	n1, err := a.Allocate("n1", Request{IPv6: true, IPv6Prefix: mp("2001:db8:1:2::/64"), IPv6Addr: ma("2001:db8:1:2::5")})
	if err != nil {
		t.Fatal(err)
	}
	n2, err := a.Allocate("n2", Request{IPv6: true, IPv6Prefix: mp("2001:db8:1:2::/64"), IPv6Addr: ma("2001:db8:1:2:1::1")})
	if err != nil {
		t.Fatal(err)
	}
	if n1[0] == n2[0] || n1[0].Bits() != 80 || n1[0].Contains(ma("2001:db8:1:2::5")) || n2[0].Contains(ma("2001:db8:1:2:1::1")) {
		t.Fatalf("shared /64: %v %v", n1, n2)
	}
	n3, err := a.Allocate("n3", Request{IPv6: true, IPv6Prefix: mp("2001:db8:ff00::/56"), IPv6Addr: ma("2001:db8:ff00:7::5")})
	if err != nil || !mp("2001:db8:ff00:7::/64").Contains(n3[0].Addr()) {
		t.Fatalf("/56 node got %v %v", n3, err)
	}
	ds, err := a.Allocate("dual", Request{IPv4: true, IPv6: true})
	if err != nil || len(ds) != 2 || !ds[0].Addr().Is4() || !mp("fd00:10:244::/64").Contains(ds[1].Addr()) || ds[1].Overlaps(mp("fd00:10:244::/112")) {
		t.Fatalf("dual-stack node got %v %v", ds, err)
	}
	// The IPv4 pool has 4 /24s, one of them a service CIDR.
	for i := 0; i < 2; i++ {
		got, err := a.Allocate(fmt.Sprintf("v4-%d", i), Request{IPv4: true})
		if err != nil || got[0].Overlaps(mp("10.244.1.0/24")) {
			t.Fatalf("v4 node got %v %v", got, err)
		}
	}
	if _, err := a.Allocate("v4-full", Request{IPv4: true, IPv6: true}); !errors.Is(err, ErrExhausted) {
		t.Fatalf("exhausted pool: %v", err)
	}
	if got := a.Owned("v4-full"); len(got) != 0 {
		t.Fatalf("a failed allocation held %v", got)
	}
	a.Release("v4-0")
	if _, err := a.Allocate("v4-full", Request{IPv4: true}); err != nil {
		t.Fatalf("after a release: %v", err)
	}
	if _, err := a.Allocate("bad", Request{IPv6: true, IPv6Prefix: mp("2001:db8::/124"), IPv6Addr: ma("2001:db8::1")}); err == nil {
		t.Fatal("a /124 was carved")
	}
}

func TestRebuildNoDuplicates(t *testing.T) {
	cfg := Config{IPv4Pool: mp("10.0.0.0/16")}
	a, _ := New(cfg)
	state := map[string][]netip.Prefix{}
	for i := 0; i < 50; i++ {
		got, err := a.Allocate(fmt.Sprintf("n%d", i), Request{IPv4: true})
		if err != nil {
			t.Fatal(err)
		}
		state[fmt.Sprintf("n%d", i)] = got
	}
	b, _ := New(cfg) // a new leader
	for n, c := range state {
		if err := b.Occupy(n, c); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.Occupy("intruder", state["n3"]); err == nil {
		t.Fatal("an overlapping occupy was accepted")
	}
	for i := 0; i < 50; i++ {
		got, err := b.Allocate(fmt.Sprintf("new%d", i), Request{IPv4: true})
		if err != nil {
			t.Fatal(err)
		}
		for n, c := range state {
			if c[0].Overlaps(got[0]) {
				t.Fatalf("new%d got %s, already %s's", i, got[0], n)
			}
		}
	}
}

// TestProperties allocates, releases, reserves and withdraws at random in
// one /56 where everything overlaps: the fallback pool, node prefixes of
// every length (nested, shared, a /56 whose /64s are others'), service
// CIDRs inside them. No allocation may overlap another node's, a service
// CIDR, or hold an address reserved when it was made; a new leader that
// occupies what the first handed out must keep to the same rules.
func TestProperties(t *testing.T) {
	fallbacks := []struct {
		pool netip.Prefix
		mask int
	}{{mp("2001:db8:0:1::/64"), 80}, {mp("2001:db8::/62"), 80}, {mp("2001:db8::/60"), 72}, {mp("2001:db8:0:1::/72"), 88}, {}}
	nodePrefixes := []netip.Prefix{
		mp("2001:db8::/56"), // the set is the /64 holding the node's address
		mp("2001:db8:0:1::/64"), mp("2001:db8:0:2::/64"),
		mp("2001:db8:0:1::/72"), mp("2001:db8:0:1:100::/72"),
		mp("2001:db8:0:1:1::/80"), mp("2001:db8:0:1:1::/96"), mp("2001:db8:0:1::/112"),
	}
	serviceCIDRs := []netip.Prefix{mp("2001:db8:0:1::/112"), mp("2001:db8:0:1:2::/112"), mp("2001:db8:0:1:1::/100"),
		mp("2001:db8:0:2:0:0:1:0/112"), mp("2001:db8:0:1:0:100::/88"), mp("10.0.4.0/24")}
	// an address of the node inside prefix p: in one of its first segments,
	// so that reservations meet allocations
	addrIn := func(r *rand.Rand, p netip.Prefix) netip.Addr {
		set, segBits, err := SegmentFor(p, p.Addr())
		if err != nil {
			t.Fatal(err)
		}
		if p.Bits() < 64 {
			b := p.Addr().As16()
			b[7] = byte(r.IntN(4))
			set, _ = netip.AddrFrom16(b).Prefix(64)
		}
		sp, _ := newPool(set, segBits)
		seg := sp.segment(r.IntN(min(sp.n, 24)))
		b := seg.Addr().As16()
		b[15] |= byte(r.IntN(255) + 1)
		return netip.AddrFrom16(b)
	}
	type held struct {
		node string
		c    netip.Prefix
	}
	for seed := uint64(1); seed <= 30; seed++ {
		r := rand.New(rand.NewPCG(seed, seed))
		fb := fallbacks[r.IntN(len(fallbacks))]
		cfg := Config{Families: []Family{IPv4, IPv6}, IPv4Pool: mp("10.0.0.0/20"), IPv6Pool: fb.pool, IPv6MaskSize: fb.mask}
		for _, s := range serviceCIDRs {
			if r.IntN(2) == 0 {
				cfg.ServiceCIDRs = append(cfg.ServiceCIDRs, s)
			}
		}
		services := slices.Clone(cfg.ServiceCIDRs) // and those added as ServiceCIDR objects
		reserved := map[netip.Addr]bool{}
		randomRequest := func() Request {
			req := Request{IPv4: r.IntN(4) == 0, IPv6: true}
			if r.IntN(4) > 0 || !cfg.IPv6Pool.IsValid() {
				p := nodePrefixes[r.IntN(len(nodePrefixes))]
				req.IPv6Prefix, req.IPv6Addr = p, addrIn(r, p)
			}
			return req
		}
		// check refuses a new allocation that breaks a rule.
		check := func(owners map[string][]netip.Prefix, node string, got []netip.Prefix) {
			t.Helper()
			for _, c := range got {
				for other, cs := range owners {
					for _, o := range cs {
						if other != node && o.Overlaps(c) {
							t.Fatalf("seed %d (fallback %s /%d): %s got %s, overlapping %s of %s", seed, fb.pool, fb.mask, node, c, o, other)
						}
					}
				}
				for _, s := range services {
					if s.Overlaps(c) {
						t.Fatalf("seed %d: %s got %s, overlapping service CIDR %s", seed, node, c, s)
					}
				}
				for addr := range reserved {
					if c.Contains(addr) {
						t.Fatalf("seed %d: %s got %s, holding reserved node address %s", seed, node, c, addr)
					}
				}
			}
		}
		a, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		owners := map[string][]netip.Prefix{}
		allocated := 0
		for step := 0; step < 800; step++ {
			node := fmt.Sprintf("n%d", r.IntN(150))
			switch op := r.IntN(21); {
			case op < 11:
				if _, ok := owners[node]; ok {
					continue
				}
				req := randomRequest()
				got, err := a.Allocate(node, req)
				if err != nil {
					continue
				}
				check(owners, node, got)
				if req.IPv6Addr.IsValid() && slices.ContainsFunc(got, func(c netip.Prefix) bool { return c.Contains(req.IPv6Addr) }) {
					t.Fatalf("seed %d: %s got %v, holding its own address %s", seed, node, got, req.IPv6Addr)
				}
				owners[node] = got
				allocated++
			case op < 15:
				a.Release(node)
				delete(owners, node)
			case op < 18:
				addr := addrIn(r, nodePrefixes[r.IntN(len(nodePrefixes))])
				reserved[addr] = true
				a.Reserve(addr)
			case op < 20:
				for addr := range reserved {
					delete(reserved, addr)
					a.Unreserve(addr)
					break
				}
			case len(services) > len(cfg.ServiceCIDRs) && r.IntN(2) == 0:
				s := services[len(services)-1]
				services = services[:len(services)-1]
				a.RemoveServiceCIDR(s)
			default:
				s := serviceCIDRs[r.IntN(len(serviceCIDRs))]
				services = append(services, s)
				a.AddServiceCIDR(s)
			}
		}
		var all []held
		for n, cs := range owners {
			for _, c := range cs {
				all = append(all, held{n, c})
			}
		}
		for i := range all {
			for j := i + 1; j < len(all); j++ {
				if all[i].c.Overlaps(all[j].c) {
					t.Fatalf("seed %d: %s (%s) overlaps %s (%s)", seed, all[i].c, all[i].node, all[j].c, all[j].node)
				}
			}
		}
		if allocated < 100 || len(all) < 50 {
			t.Fatalf("seed %d: %d allocations, %d CIDRs held; the test exercised too little", seed, allocated, len(all))
		}

		// A new leader rebuilds from what the Nodes hold and allocates on.
		b, _ := New(cfg)
		for addr := range reserved {
			b.Reserve(addr)
		}
		for _, s := range services[len(cfg.ServiceCIDRs):] {
			b.AddServiceCIDR(s)
		}
		for n, cs := range owners {
			if err := b.Occupy(n, cs); err != nil {
				t.Fatalf("seed %d: occupy %s %v: %v", seed, n, cs, err)
			}
		}
		for i := 0; i < 100; i++ {
			node := fmt.Sprintf("new%d", i)
			if got, err := b.Allocate(node, randomRequest()); err == nil {
				check(owners, node, got)
				owners[node] = got
			}
		}
	}
}

func TestReservedNeverHandedOut(t *testing.T) {
	a, _ := New(Config{Families: []Family{IPv6}})
	p := mp("2001:db8:1::/120") // 4 segments of /122
	for i := 0; i < 3; i++ {
		a.Reserve(ma(fmt.Sprintf("2001:db8:1::%x", i*64+1)))
	}
	got, err := a.Allocate("n", Request{IPv6: true, IPv6Prefix: p, IPv6Addr: ma("2001:db8:1::1")})
	if err != nil || got[0] != mp("2001:db8:1::c0/122") {
		t.Fatalf("got %v %v, want the only segment without a node address", got, err)
	}
	if _, err := a.Allocate("m", Request{IPv6: true, IPv6Prefix: p, IPv6Addr: ma("2001:db8:1::41")}); !errors.Is(err, ErrExhausted) {
		t.Fatalf("want exhaustion, got %v", err)
	}
}

func BenchmarkAllocate(b *testing.B) {
	for _, n := range []int{5000, 50000} {
		b.Run(fmt.Sprintf("nodes=%d", n), func(b *testing.B) {
			for b.Loop() {
				a, _ := New(Config{Families: []Family{IPv4, IPv6}, IPv4Pool: mp("10.0.0.0/8")})
				for i := 0; i < n; i++ {
					if _, err := a.Allocate(fmt.Sprintf("n%d", i), Request{IPv4: true, IPv6: true,
						IPv6Prefix: mp("2001:db8::/48"), IPv6Addr: netip.AddrFrom16([16]byte{0x20, 0x01, 0x0d, 0xb8, 0, 0, byte(i >> 8), byte(i), 15: 1})}); err != nil {
						b.Fatal(err)
					}
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/node")
		})
	}
}

func BenchmarkRebuild5000(b *testing.B) {
	a, _ := New(Config{IPv4Pool: mp("10.0.0.0/8")})
	state := map[string][]netip.Prefix{}
	for i := 0; i < 5000; i++ {
		n := fmt.Sprintf("n%d", i)
		state[n], _ = a.Allocate(n, Request{IPv4: true})
	}
	for b.Loop() {
		c, _ := New(Config{IPv4Pool: mp("10.0.0.0/8")})
		for n, cs := range state {
			if err := c.Occupy(n, cs); err != nil {
				b.Fatal(err)
			}
		}
	}
}

func TestUsage(t *testing.T) {
	a, err := New(Config{IPv4Pool: netip.MustParsePrefix("10.244.0.0/22"), IPv6Pool: netip.MustParsePrefix("fd00:1::/64")})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Allocate("n1", Request{IPv4: true, IPv6: true, IPv6Prefix: netip.MustParsePrefix("2001:db8:1:2::/64"), IPv6Addr: netip.MustParseAddr("2001:db8:1:2::10")}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Allocate("n2", Request{IPv4: true, IPv6: true}); err != nil {
		t.Fatal(err)
	}
	got := map[string]Usage{}
	for _, u := range a.Usage() {
		got[u.Pool] = u
	}
	if got["ipv4"] != (Usage{"ipv4", 2, 4}) || got["ipv6"] != (Usage{"ipv6", 1, 65536}) || got["node-prefixes"].Used < 1 {
		t.Fatalf("usage = %+v", got)
	}
}

// A withdrawn reservation gives its segment back: a node listing addresses
// across the pool, then withdrawing them, leaves the pool as it was.
func TestUnreserveReturnsSegments(t *testing.T) {
	a, err := New(Config{IPv4Pool: netip.MustParsePrefix("10.244.0.0/22"), IPv4MaskSize: 24})
	if err != nil {
		t.Fatal(err)
	}
	var addrs []netip.Addr
	for i := range 4 {
		addrs = append(addrs, netip.AddrFrom4([4]byte{10, 244, byte(i), 9}))
		a.Reserve(addrs[i])
	}
	if _, err := a.Allocate("victim", Request{IPv4: true}); err == nil {
		t.Fatal("allocated from a fully reserved pool")
	}
	a.Unreserve(addrs[0])
	a.Unreserve(addrs[0]) // twice is harmless
	got, err := a.Allocate("victim", Request{IPv4: true})
	if err != nil || got[0] != netip.MustParsePrefix("10.244.0.0/24") {
		t.Fatalf("after withdrawing 10.244.0.9: %v, %v; want 10.244.0.0/24", got, err)
	}
	// A held segment stays held when an address inside it is withdrawn.
	a.Reserve(netip.MustParseAddr("10.244.0.20"))
	a.Unreserve(netip.MustParseAddr("10.244.0.20"))
	a.Unreserve(addrs[1])
	if got, err := a.Allocate("second", Request{IPv4: true}); err != nil || got[0] != netip.MustParsePrefix("10.244.1.0/24") {
		t.Fatalf("second: %v, %v; want 10.244.1.0/24, never the victim's", got, err)
	}
}

// A segment handed out by one pool is never handed out by another pool or
// per-node-prefix set that overlaps it: the fallback pool and node prefixes
// inside it, nested node prefixes, a /56 node whose /64 is another's.
func TestOverlappingPoolsAndPrefixes(t *testing.T) {
	pool := func(prefix, addr string) Request {
		if prefix == "" {
			return Request{IPv6: true}
		}
		return Request{IPv6: true, IPv6Prefix: mp(prefix), IPv6Addr: ma(addr)}
	}
	cases := []struct {
		name     string
		cfg      Config
		requests []Request // taken in turn, three rounds
	}{
		{"fallback pool and a node prefix equal to it", Config{IPv6Pool: mp("2001:db8:0:1::/64")},
			[]Request{pool("", ""), pool("2001:db8:0:1::/64", "2001:db8:0:1:ffff::1")}},
		{"fallback pool and a node /72 inside it", Config{IPv6Pool: mp("2001:db8:0:1::/64")},
			[]Request{pool("", ""), pool("2001:db8:0:1::/72", "2001:db8:0:1:ff::1")}},
		{"node /64 and another node's /72 inside it", Config{Families: []Family{IPv6}},
			[]Request{pool("2001:db8:1:2::/64", "2001:db8:1:2:ffff::1"), pool("2001:db8:1:2::/72", "2001:db8:1:2:ff::1")}},
		{"node /56 whose /64 holds a node /72", Config{Families: []Family{IPv6}},
			[]Request{pool("2001:db8:1::/56", "2001:db8:1:2:ffff::1"), pool("2001:db8:1:2::/72", "2001:db8:1:2:ff::1")}},
		{"fallback /60 of /72s and node /64s inside it", Config{IPv6Pool: mp("2001:db8::/60"), IPv6MaskSize: 72},
			[]Request{pool("", ""), pool("2001:db8::/64", "2001:db8::ffff:0:0:1"), pool("2001:db8:0:1::/64", "2001:db8:0:1:ffff::1")}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			a, err := New(tc.cfg)
			if err != nil {
				t.Fatal(err)
			}
			held := map[string]netip.Prefix{}
			for round := range 3 {
				for i, req := range tc.requests {
					node := fmt.Sprintf("n%d-%d", round, i)
					got, err := a.Allocate(node, req)
					if err != nil {
						t.Fatalf("%s: %v", node, err)
					}
					for other, c := range held {
						if c.Overlaps(got[0]) {
							t.Fatalf("%s got %s, overlapping %s of %s", node, got[0], c, other)
						}
					}
					held[node] = got[0]
				}
			}
		})
	}
}

// Releasing a segment frees it in every pool it was marked in, and only
// once nothing else there is held: a set exhausted by a nested node's
// segments gets them back when those nodes are gone, and the other way round.
func TestReleaseAcrossOverlappingSets(t *testing.T) {
	a, _ := New(Config{Families: []Family{IPv6}})
	// Each node's own address is never in its own segment: they sit where
	// other nodes' segments are.
	wide := Request{IPv6: true, IPv6Prefix: mp("2001:db8::/120"), IPv6Addr: ma("2001:db8::1")}    // 4 × /122
	narrow := Request{IPv6: true, IPv6Prefix: mp("2001:db8::/122"), IPv6Addr: ma("2001:db8::3f")} // 2 × /123, the first /122
	for n, own := range map[string]string{"inner0": "2001:db8::3f", "inner1": "2001:db8::1"} {
		narrow := narrow
		narrow.IPv6Addr = ma(own)
		if got, err := a.Allocate(n, narrow); err != nil || !mp("2001:db8::/122").Contains(got[0].Addr()) {
			t.Fatalf("%s: %v %v", n, got, err)
		}
	}
	for i := 1; i <= 3; i++ {
		if got, err := a.Allocate(fmt.Sprintf("wide%d", i), wide); err != nil || got[0].Overlaps(mp("2001:db8::/122")) {
			t.Fatalf("wide%d got %v %v while the nested nodes hold 2001:db8::/122", i, got, err)
		}
	}
	if got, err := a.Allocate("wide4", wide); !errors.Is(err, ErrExhausted) {
		t.Fatalf("wide4 got %v %v, want exhaustion", got, err)
	}
	a.Release("inner0")
	if got, err := a.Allocate("wide4", wide); !errors.Is(err, ErrExhausted) {
		t.Fatalf("wide4 got %v %v while inner1 still holds part of it", got, err)
	}
	a.Release("inner1")
	wide.IPv6Addr = ma("2001:db8::41") // in wide1's segment
	if got, err := a.Allocate("wide4", wide); err != nil || got[0] != mp("2001:db8::/122") {
		t.Fatalf("after both nested nodes left: %v %v, want 2001:db8::/122", got, err)
	}
	if got, err := a.Allocate("inner2", narrow); !errors.Is(err, ErrExhausted) {
		t.Fatalf("inner2 got %v %v inside wide4's segment", got, err)
	}
	a.Release("wide4")
	if _, err := a.Allocate("inner2", narrow); err != nil {
		t.Fatalf("after wide4 left: %v", err)
	}
}

// BenchmarkSharedPrefix is the overlapping case at scale: the fallback pool
// and the node prefix are one /64, so every allocation blocks its segment in
// both, and nodes come and go.
func BenchmarkSharedPrefix(b *testing.B) {
	const n = 5000
	for b.Loop() {
		a, _ := New(Config{IPv6Pool: mp("2001:db8:0:1::/64")})
		for i := range n {
			req := Request{IPv6: true}
			if i%2 == 1 {
				req.IPv6Prefix, req.IPv6Addr = mp("2001:db8:0:1::/64"), ma("2001:db8:0:1::1")
			}
			if _, err := a.Allocate(fmt.Sprintf("n%d", i), req); err != nil {
				b.Fatal(err)
			}
			if i%10 == 9 {
				a.Release(fmt.Sprintf("n%d", i-5))
			}
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/node")
}

// Pod CIDRs found on Nodes that overlap another Node's (not only equal
// ones) are reported, and held all the same: nothing overlapping them is
// handed out while any of their Nodes has them.
func TestOccupyOverlap(t *testing.T) {
	a, _ := New(Config{IPv4Pool: mp("10.0.0.0/20"), IPv6Pool: mp("fd00::/64")})
	if err := a.Occupy("x", []netip.Prefix{mp("10.0.0.0/23"), mp("fd00::/80")}); err != nil {
		t.Fatal(err)
	}
	for _, o := range []struct {
		node string
		c    netip.Prefix
	}{{"y", mp("10.0.1.0/24")}, {"z", mp("fd00::/96")}, {"w", mp("10.0.0.0/22")}} {
		if err := a.Occupy(o.node, []netip.Prefix{o.c}); err == nil || !strings.Contains(err.Error(), "10.0.0.0/23, already node x's") && !strings.Contains(err.Error(), "fd00::/80, already node x's") {
			t.Errorf("occupying %s for %s, overlapping x's: %v, want an error naming x", o.c, o.node, err)
		}
	}
	a.Release("x")
	a.Release("w")
	for i := 0; ; i++ {
		got, err := a.Allocate(fmt.Sprintf("n%d", i), Request{IPv4: true, IPv6: true})
		if err != nil {
			break
		}
		if got[0].Overlaps(mp("10.0.1.0/24")) || got[1].Overlaps(mp("fd00::/96")) {
			t.Fatalf("n%d got %v while y and z still hold 10.0.1.0/24 and fd00::/96", i, got)
		}
	}
}

// Only the configured families are handed out; pod CIDRs never change, so
// an IPv4-only cluster never gives a node with a prefix an IPv6 CIDR.
func TestFamilies(t *testing.T) {
	withPrefix := Request{IPv4: true, IPv6: true, IPv6Prefix: mp("2001:db8:1:2::/64"), IPv6Addr: ma("2001:db8:1:2::5")}
	for _, tc := range []struct {
		name string
		cfg  Config
		req  Request
		want []string // families of the CIDRs, in order
		err  string
	}{
		{"IPv4 pool only: IPv4 only", Config{IPv4Pool: mp("10.0.0.0/16")}, withPrefix, []string{"ipv4"}, ""},
		{"IPv4 family only", Config{Families: []Family{IPv4}, IPv4Pool: mp("10.0.0.0/16")}, withPrefix, []string{"ipv4"}, ""},
		{"both, IPv6 from the node's prefix", Config{Families: []Family{IPv4, IPv6}, IPv4Pool: mp("10.0.0.0/16")}, withPrefix, []string{"ipv4", "ipv6"}, ""},
		{"both, no prefix and no IPv6 pool", Config{Families: []Family{IPv4, IPv6}, IPv4Pool: mp("10.0.0.0/16")}, Request{IPv4: true}, []string{"ipv4"}, ""},
		{"both pools", Config{IPv4Pool: mp("10.0.0.0/16"), IPv6Pool: mp("fd00::/64")}, Request{IPv4: true, IPv6: true}, []string{"ipv4", "ipv6"}, ""},
		{"IPv6 pool only", Config{IPv6Pool: mp("fd00::/64")}, withPrefix, []string{"ipv6"}, ""},
		{"IPv6 only without a pool, a node with a prefix", Config{Families: []Family{IPv6}}, withPrefix, []string{"ipv6"}, ""},
		{"IPv6 only without a pool, a node without", Config{Families: []Family{IPv6}}, Request{IPv4: true}, nil, "no IPv6 pool"},
		{"IPv4 family without its pool", Config{Families: []Family{IPv4}}, Request{}, nil, "no IPv4 pool"},
		{"IPv6 pool but not the family", Config{Families: []Family{IPv4}, IPv4Pool: mp("10.0.0.0/16"), IPv6Pool: mp("fd00::/64")}, Request{}, nil, "IPv6 is not a family"},
		{"unknown family", Config{Families: []Family{"ipv5"}}, Request{}, nil, `"ipv5"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, err := New(tc.cfg)
			var got []netip.Prefix
			if err == nil {
				got, err = a.Allocate("n", tc.req)
			}
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("got %v %v, want an error containing %q", got, err, tc.err)
				}
				return
			}
			var fams []string
			for _, c := range got {
				fams = append(fams, map[bool]string{true: "ipv4", false: "ipv6"}[c.Addr().Is4()])
			}
			if err != nil || !slices.Equal(fams, tc.want) {
				t.Fatalf("got %v %v, want CIDRs in %v", got, err, tc.want)
			}
		})
	}
}

// Service ranges learned from the cluster (ServiceCIDR objects) are never
// handed out once added, in the cluster pools and in node prefixes' sets
// created before or after; removing one returns its segments unless the
// configuration also lists it.
func TestServiceCIDRsFromTheCluster(t *testing.T) {
	a, _ := New(Config{Families: []Family{IPv4, IPv6}, IPv4Pool: mp("10.0.0.0/22"), ServiceCIDRs: []netip.Prefix{mp("10.0.3.0/24")}})
	prefix := func(p string) Request {
		return Request{IPv6: true, IPv6Prefix: mp(p), IPv6Addr: mp(p).Addr().Next()}
	}
	if _, err := a.Allocate("before", prefix("2001:db8:1::/120")); err != nil { // creates the set
		t.Fatal(err)
	}
	a.Release("before")
	a.AddServiceCIDR(mp("10.0.0.0/23"))
	a.AddServiceCIDR(mp("2001:db8:1::80/121")) // the top half, where a node prefix is carved first
	a.AddServiceCIDR(mp("2001:db8:2::80/121"))
	a.AddServiceCIDR(mp("10.0.3.0/24")) // also configured
	for i, req := range []Request{{IPv4: true}, prefix("2001:db8:1::/120"), prefix("2001:db8:2::/120")} {
		got, err := a.Allocate(fmt.Sprintf("n%d", i), req)
		if err != nil || got[0] != []netip.Prefix{mp("10.0.2.0/24"), mp("2001:db8:1::40/122"), mp("2001:db8:2::40/122")}[i] {
			t.Fatalf("n%d got %v %v, want the first segment outside the service range", i, got, err)
		}
	}
	if got, err := a.Allocate("full", Request{IPv4: true}); !errors.Is(err, ErrExhausted) {
		t.Fatalf("got %v %v, want the IPv4 pool exhausted", got, err)
	}
	a.RemoveServiceCIDR(mp("10.0.3.0/24"))
	if got, err := a.Allocate("full", Request{IPv4: true}); !errors.Is(err, ErrExhausted) {
		t.Fatalf("got %v %v: 10.0.3.0/24 is still configured", got, err)
	}
	a.RemoveServiceCIDR(mp("10.0.0.0/23"))
	if got, err := a.Allocate("full", Request{IPv4: true}); err != nil || !mp("10.0.0.0/23").Contains(got[0].Addr()) {
		t.Fatalf("after the ServiceCIDR went: %v %v", got, err)
	}
}

// TestOwnAddressesNeverInOwnSegment: a Node is never handed a segment that
// holds one of its own addresses, whether or not the address was reserved
// yet (the coordinator reserves observed addresses from its Node events,
// which may run after a sync has read the Node they describe). A kubelet
// asks for a certificate for its addresses, and an address inside its own
// pod CIDR is a pod's: its serving CSRs would be refused for good.
func TestOwnAddressesNeverInOwnSegment(t *testing.T) {
	prefixes := []netip.Prefix{mp("2001:db8::/56"), mp("2001:db8:0:1::/64"), mp("2001:db8:0:1::/72"), mp("2001:db8:0:1:1::/96"), mp("2001:db8:0:1::/112")}
	for seed := uint64(1); seed <= 200; seed++ {
		r := rand.New(rand.NewPCG(seed, 7))
		a, err := New(Config{Families: []Family{IPv4, IPv6}, IPv4Pool: mp("10.0.0.0/22")})
		if err != nil {
			t.Fatal(err)
		}
		for i := range 8 {
			p := prefixes[r.IntN(len(prefixes))]
			set, segBits, err := SegmentFor(p, p.Addr())
			if err != nil {
				t.Fatal(err)
			}
			// An address in one of the set's first segments: the one a
			// first-free allocation would pick.
			b := set.Addr().As16()
			sp, _ := newPool(set, segBits)
			seg := sp.segment(r.IntN(3)).Addr().As16()
			copy(b[:], seg[:])
			b[15] |= byte(r.IntN(255) + 1)
			own6 := netip.AddrFrom16(b)
			own4 := netip.AddrFrom4([4]byte{10, 0, byte(r.IntN(4)), byte(r.IntN(256))})
			node := fmt.Sprintf("n%d", i)
			req := Request{IPv4: true, IPv6: true, IPv6Prefix: p, IPv6Addr: own6, Avoid: []netip.Addr{own4, own6}}
			got, err := a.Allocate(node, req)
			if err != nil {
				continue // exhausted: nothing handed out
			}
			for _, c := range got {
				for _, own := range req.Avoid {
					if c.Contains(own) {
						t.Fatalf("seed %d: %s was handed %s, which holds its own address %s (not reserved yet)", seed, node, c, own)
					}
				}
			}
			if a.Reserved(own6) || a.Reserved(own4) {
				t.Fatalf("seed %d: the allocation left %s's own addresses reserved; only the Node events reserve", seed, node)
			}
		}
	}
}

// TestAllocateAgainAvoidsAddressesListedSince: an allocation that never
// reached its Node (the patch answered 409, the sync is retried) is not
// handed out again when it holds an address the Node lists by the retry:
// the Node gets a segment without it.
func TestAllocateAgainAvoidsAddressesListedSince(t *testing.T) {
	a, _ := New(Config{Families: []Family{IPv4, IPv6}, IPv4Pool: mp("10.0.0.0/22")})
	slaac := ma("2001:db8:0:1:a8bb:ccff:fedd:eeff")
	first, err := a.Allocate("n", Request{IPv4: true, IPv6: true, IPv6Prefix: mp("2001:db8:0:1::/64"), IPv6Addr: slaac, Avoid: []netip.Addr{slaac}})
	if err != nil || len(first) != 2 || first[1] != mp("2001:db8:0:1:ffff::/80") {
		t.Fatalf("first allocation %v %v, want an IPv4 /24 and 2001:db8:0:1:ffff::/80", first, err)
	}
	static := ma("2001:db8:0:1:ffff::1") // added before the retry, inside the first /80
	again, err := a.Allocate("n", Request{IPv4: true, IPv6: true, IPv6Prefix: mp("2001:db8:0:1::/64"), IPv6Addr: slaac, Avoid: []netip.Addr{slaac, static}})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range again {
		if c.Contains(static) || c.Contains(slaac) {
			t.Fatalf("the retry handed out %v again, holding the Node's own address", again)
		}
	}
	if got := a.Owned("n"); !slices.Equal(got, again) {
		t.Errorf("the allocator holds %v for n, handed out %v", got, again)
	}
	if holder, _ := a.Holder(ma("2001:db8:0:1:ffff::2")); holder != "" {
		t.Errorf("the first /80 is still held by %q", holder)
	}
}

// TestAnOccupiedCIDRIsNeverReleasedByAnAllocation: pod CIDRs the
// allocator took from a Node (Occupy: the Node carries them) stay that
// Node's when a sync that read an older version of it, before they were
// written, asks again with addresses to avoid inside them (a new leader
// whose informer lags the list its allocator was rebuilt from). Releasing
// them would hand them to the next join while the Node holds them.
func TestAnOccupiedCIDRIsNeverReleasedByAnAllocation(t *testing.T) {
	a, _ := New(Config{IPv4Pool: mp("10.244.0.0/22"), IPv4MaskSize: 24})
	held := mp("10.244.0.0/24")
	if err := a.Occupy("n", []netip.Prefix{held}); err != nil {
		t.Fatal(err)
	}
	inside := ma("10.244.0.7") // listed by the older version, inside the CIDR written since
	got, err := a.Allocate("n", Request{IPv4: true, Avoid: []netip.Addr{inside}})
	if err != nil || !slices.Equal(got, []netip.Prefix{held}) {
		t.Errorf("a stale sync's allocation: %v %v, want the Node's own %s", got, err, held)
	}
	other, err := a.Allocate("m", Request{IPv4: true})
	if err != nil || slices.Contains(other, held) {
		t.Errorf("the next join got %v %v: %s is n's", other, err, held)
	}
	if holder, _ := a.Holder(ma("10.244.0.1")); holder != "n" {
		t.Errorf("%s is held by %q, want n", held, holder)
	}
}

// TestOutsidePool: a pool that is not the cluster's pod subnet shows as
// existing Nodes' IPv4 pod CIDRs outside it; IPv6 ones never count.
func TestOutsidePool(t *testing.T) {
	pool := netip.MustParsePrefix("10.244.0.0/16")
	p := netip.MustParsePrefix
	got := OutsidePool(map[string][]netip.Prefix{
		"inside":      {p("10.244.3.0/24")},
		"outside":     {p("10.42.0.0/24")},
		"wider":       {p("10.244.0.0/15")},
		"dual, v4 in": {p("10.244.4.0/24"), p("2001:db8:1:2::/80")},
		"v6 only":     {p("2001:db8:1:3::/80")},
		"mapped out":  {p("::ffff:10.42.1.0/120")},
		"none":        nil,
	}, pool)
	if want := []string{"mapped out", "outside", "wider"}; !slices.Equal(got, want) {
		t.Errorf("OutsidePool = %v, want %v", got, want)
	}
	if got := OutsidePool(map[string][]netip.Prefix{"a": {p("10.42.0.0/24")}}, netip.Prefix{}); got != nil {
		t.Errorf("no IPv4 pool: %v", got)
	}
}

// TestNodePrefixCarvesAwayFromHosts: segments of a node prefix come from
// its top down, never its lowest (the addresses hosts are given: ::1,
// DHCPv6 and static ranges), and never over a range the request avoids
// (an inventory binding of another Node's), whatever its size.
func TestNodePrefixCarvesAwayFromHosts(t *testing.T) {
	a, _ := New(Config{Families: []Family{IPv6}})
	own := ma("2001:db8:7:1:abcd::1")
	req := Request{IPv6: true, IPv6Prefix: mp("2001:db8:7:1::/64"), IPv6Addr: own, Avoid: []netip.Addr{own},
		AvoidRanges: []netip.Prefix{mp("2001:db8:7:1:fffe::/112"), mp("2001:db8:7:1:ffe0::/76")}}
	got, err := a.Allocate("n1", req)
	if err != nil || got[0] != mp("2001:db8:7:1:ffff::/80") {
		t.Fatalf("n1 got %v %v, want the top /80", got, err)
	}
	got, err = a.Allocate("n2", req)
	if err != nil || got[0] != mp("2001:db8:7:1:fffd::/80") {
		t.Fatalf("n2 got %v %v, want the top /80 below the ranges avoided", got, err)
	}
	// A small prefix: every segment held, the lowest never handed out.
	small := Request{IPv6: true, IPv6Prefix: mp("2001:db8:7:2::/112"), IPv6Addr: ma("2001:db8:7:2::1")}
	for i := 0; ; i++ {
		got, err := a.Allocate(fmt.Sprintf("s%d", i), small)
		if errors.Is(err, ErrExhausted) {
			if i != 15 {
				t.Fatalf("a /112 gave %d segments of /116, want 15 (all but the lowest)", i)
			}
			break
		}
		if err != nil || got[0].Contains(ma("2001:db8:7:2::1")) || got[0].Contains(ma("2001:db8:7:2::ff")) {
			t.Fatalf("s%d got %v %v", i, got, err)
		}
	}
}
