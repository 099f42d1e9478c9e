package ipam

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
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

// TestProperties allocates, releases and reserves at random and checks no two
// nodes ever overlap and no segment holds a reserved address.
func TestProperties(t *testing.T) {
	for seed := uint64(1); seed <= 20; seed++ {
		r := rand.New(rand.NewPCG(seed, seed))
		a, _ := New(Config{IPv4Pool: mp("10.0.0.0/20"), IPv6Pool: mp("fd00::/72"), IPv6MaskSize: 80})
		prefixes := []netip.Prefix{mp("2001:db8:1::/64"), mp("2001:db8:2::/56"), mp("2001:db8:3::/96")}
		var reserved []netip.Addr
		for i := 0; i < 40; i++ { // node addresses known before any allocation
			p := prefixes[r.IntN(len(prefixes))]
			b := p.Addr().As16()
			b[8], b[9], b[15] = byte(r.IntN(2)), byte(r.IntN(256)), byte(r.IntN(256)|1)
			if p.Bits() == 96 {
				b[8], b[9], b[12] = 0, 0, byte(r.IntN(256))
			}
			addr := netip.AddrFrom16(b)
			reserved = append(reserved, addr)
			a.Reserve(addr)
		}
		for step := 0; step < 600; step++ {
			node := fmt.Sprintf("n%d", r.IntN(200))
			switch op := r.IntN(8); {
			case op < 6:
				p := prefixes[r.IntN(len(prefixes))]
				req := Request{IPv4: r.IntN(2) == 0, IPv6: true}
				if r.IntN(3) > 0 {
					addr := p.Addr().Next()
					req.IPv6Prefix, req.IPv6Addr = p, addr
				}
				_, _ = a.Allocate(node, req)
			default:
				a.Release(node)
			}
		}
		var all []struct {
			node string
			c    netip.Prefix
		}
		for n, cs := range a.owners {
			for _, c := range cs {
				all = append(all, struct {
					node string
					c    netip.Prefix
				}{n, c})
			}
		}
		for i := range all {
			for j := i + 1; j < len(all); j++ {
				if all[i].c.Overlaps(all[j].c) {
					t.Fatalf("seed %d: %s (%s) overlaps %s (%s)", seed, all[i].c, all[i].node, all[j].c, all[j].node)
				}
			}
		}
		for _, x := range all {
			for _, addr := range reserved {
				if x.c.Contains(addr) {
					t.Fatalf("seed %d: %s given to %s holds node address %s", seed, x.c, x.node, addr)
				}
			}
		}
		if len(all) < 20 {
			t.Fatalf("seed %d: only %d CIDRs held; the test exercised too little", seed, len(all))
		}
	}
}

func TestReservedNeverHandedOut(t *testing.T) {
	a, _ := New(Config{})
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
				a, _ := New(Config{IPv4Pool: mp("10.0.0.0/8")})
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
