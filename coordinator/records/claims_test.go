package records

import (
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/talos-nodeinit/talos-nodeinit/pkg/csrcheck"
)

func TestNextClaims(t *testing.T) {
	now := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	earlier := now.Add(-time.Hour)
	pol := ClaimPolicy{
		Networks: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("2001:db8::/32")},
		Reserved: []csrcheck.Reserved{{Prefix: netip.MustParsePrefix("10.96.0.0/12"), Why: "service CIDR"}, {Prefix: netip.MustParsePrefix("10.244.0.0/16"), Why: "pod pool"}},
		Max:      3,
	}
	ips := func(ss ...string) []netip.Addr {
		var out []netip.Addr
		for _, s := range ss {
			out = append(out, netip.MustParseAddr(s))
		}
		return out
	}
	for _, c := range []struct {
		name        string
		prev        []Claim
		current     []netip.Addr
		others      map[netip.Addr]string
		want        []string
		wantRefused []string
	}{
		{name: "first join records its addresses", current: ips("10.0.0.1", "2001:db8::1"), want: []string{"10.0.0.1", "2001:db8::1"}},
		{name: "withdrawn addresses are released", prev: []Claim{{"10.0.0.1", earlier}, {"10.0.0.2", earlier}}, current: ips("10.0.0.2"), want: []string{"10.0.0.2"}},
		{name: "another record's address is refused", current: ips("10.0.0.1", "10.0.0.9"), others: map[netip.Addr]string{netip.MustParseAddr("10.0.0.9"): "b"},
			want: []string{"10.0.0.1"}, wantRefused: []string{"Node b's"}},
		{name: "the service IP is never recorded", current: ips("10.96.0.1"), wantRefused: []string{"service CIDR"}},
		{name: "pod pool addresses are never recorded", current: ips("10.244.0.1", "10.244.1.1"), wantRefused: []string{"pod pool", "pod pool"}},
		{name: "outside the node networks", current: ips("192.0.2.1"), wantRefused: []string{"outside the node networks"}},
		{name: "loopback", current: ips("127.0.0.1"), wantRefused: []string{"not a routable"}},
		{name: "the cap", current: ips("10.0.0.1", "10.0.0.2", "10.0.0.3", "10.0.0.4", "10.0.0.5"), want: []string{"10.0.0.1", "10.0.0.2", "10.0.0.3"},
			wantRefused: []string{"limit", "limit"}},
		{name: "kept claims keep their time and order", prev: []Claim{{"10.0.0.2", earlier}}, current: ips("10.0.0.1", "10.0.0.2"), want: []string{"10.0.0.2", "10.0.0.1"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			next, refused := NextClaims(c.prev, c.current, c.others, nil, pol, now)
			var got []string
			for _, cl := range next {
				got = append(got, cl.IP)
				if cl.IP == "10.0.0.2" && len(c.prev) > 0 && !cl.Since.Equal(earlier) {
					t.Errorf("claim time %v was not kept", cl.Since)
				}
			}
			if strings.Join(got, ",") != strings.Join(c.want, ",") {
				t.Errorf("claims %v, want %v", got, c.want)
			}
			if len(refused) != len(c.wantRefused) {
				t.Fatalf("refused %q, want %d like %q", refused, len(c.wantRefused), c.wantRefused)
			}
			for i, r := range refused {
				if !strings.Contains(r, c.wantRefused[i]) {
					t.Errorf("refusal %q lacks %q", r, c.wantRefused[i])
				}
			}
		})
	}
}

// The enrolment invariant as a property over orders of join, delete and
// re-create: only the first Node object ever seen under a name enrols on
// first use, and only at a join the coordinator saw or an adoption the
// admin asked for. Each step is one sync of a Node object (a fresh UID per
// registration) or a deletion; a record outlives its Node (Survives).
func TestOnlyTheFirstObjectEnrols(t *testing.T) {
	type step struct {
		uid           string
		uninitialized bool
		adopt         bool // adoptExisting on at this sync
		deleted       bool
	}
	for _, c := range []struct {
		name  string
		steps []step
		want  []bool // per step: may enrol
	}{
		{"first join", []step{{uid: "a", uninitialized: true}}, []bool{true}},
		{"re-created after delete", []step{{uid: "a", uninitialized: true}, {deleted: true}, {uid: "b", uninitialized: true}}, []bool{true, false, false}},
		{"never adopted, deleted, re-registered by a thief", []step{{uid: "a"}, {deleted: true}, {uid: "b", uninitialized: true}}, []bool{false, false, false}},
		{"never adopted, then adopted on the admin's word", []step{{uid: "a"}, {uid: "a", adopt: true}}, []bool{false, true}},
		{"adopted at first sight", []step{{uid: "a", adopt: true}}, []bool{true}},
		{"re-created without a delete seen", []step{{uid: "a", uninitialized: true}, {uid: "b", uninitialized: true}}, []bool{true, false}},
		{"the same object again", []step{{uid: "a", uninitialized: true}, {uid: "a", uninitialized: true}}, []bool{true, true}},
	} {
		t.Run(c.name, func(t *testing.T) {
			var rec *Record
			for i, s := range c.steps {
				if s.deleted {
					if rec != nil {
						kept := Survives(rec.Spec)
						kept.NodeUID = rec.Spec.NodeUID
						rec = &Record{Spec: kept}
					}
					if c.want[i] {
						t.Fatal("bad table")
					}
					continue
				}
				unrecorded := rec == nil || rec.Spec.NotAdopted && rec.Spec.NodeUID == s.uid
				adopting := unrecorded && !s.uninitialized && s.adopt
				if unrecorded && !s.uninitialized && !s.adopt {
					// The coordinator leaves it alone and remembers the name.
					if rec == nil {
						rec = &Record{Spec: Spec{NodeUID: s.uid, NotAdopted: true}}
					}
					if c.want[i] {
						t.Errorf("step %d: a Node left alone may not enrol", i)
					}
					continue
				}
				got := MayEnrolOnFirstUse(rec, s.uid, s.uninitialized, adopting)
				if got != c.want[i] {
					t.Errorf("step %d (%+v): may enrol %v, want %v", i, s, got, c.want[i])
				}
				next := Spec{NodeUID: s.uid}
				if rec != nil {
					next = rec.Spec
					if rec.Spec.NodeUID != s.uid {
						next = Survives(rec.Spec)
					}
				}
				if rec == nil && MayEnrolOnFirstUse(nil, s.uid, s.uninitialized, adopting) {
					next.EnrolUID = s.uid
				}
				next.NodeUID, next.NotAdopted = s.uid, false
				rec = &Record{Spec: next}
			}
		})
	}
}

// What the inventory must refuse: an address inside a bound network for a
// Node the binding does not list, whoever claimed it first.
func TestBound(t *testing.T) {
	inv := []Binding{
		{Names: []string{"web-*"}, Networks: []netip.Prefix{netip.MustParsePrefix("10.1.0.0/16"), netip.MustParsePrefix("2001:db8:1::/48")}},
		{Names: []string{"db-1"}, Networks: []netip.Prefix{netip.MustParsePrefix("10.1.5.0/24")}},
	}
	for _, c := range []struct {
		node, ip string
		refused  bool
	}{
		{"web-1", "10.1.0.9", false},
		{"web-1", "2001:db8:1:7::1", false},
		{"db-1", "10.1.0.9", true},        // a web network
		{"db-1", "10.1.5.9", false},       // its own binding, nested in web's
		{"web-2", "10.1.5.9", true},       // the most specific binding decides: db-1's /24, not web's /16
		{"web", "10.1.0.9", true},         // the pattern wants the dash
		{"web-1.evil", "10.1.0.9", false}, // path.Match: * spans dots; bind exact names where it matters
		{"db-10", "10.1.5.9", true},
		{"db-1", "10.1.6.9", true},    // outside its /24, web's /16 decides
		{"anyone", "10.2.0.1", false}, // unbound: first claim
		{"anyone", "2001:db8:1::1", true},
	} {
		err := Bound(inv, c.node, netip.MustParseAddr(c.ip))
		if (err != nil) != c.refused {
			t.Errorf("Bound(%s, %s) = %v, want refused %t", c.node, c.ip, err, c.refused)
		}
	}
	if err := Bound(nil, "x", netip.MustParseAddr("10.0.0.1")); err != nil {
		t.Errorf("no inventory binds nothing: %v", err)
	}
	// NextClaims: the binding wins over an earlier claim, and over a claim
	// recorded before the inventory was configured.
	pol := ClaimPolicy{Networks: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}, Max: 4, Node: "squatter", Inventory: inv}
	now := time.Now()
	next, refused := NextClaims([]Claim{{"10.1.0.9", now.Add(-time.Hour)}}, []netip.Addr{netip.MustParseAddr("10.1.0.9"), netip.MustParseAddr("10.1.0.10")}, nil, nil, pol, now)
	if len(next) != 0 || len(refused) != 2 {
		t.Errorf("squatter keeps %v (refused %q): want nothing", next, refused)
	}
}

// What the prefix invariant must refuse.
func TestPrefixHolder(t *testing.T) {
	p := netip.MustParsePrefix("2001:db8:1:1::/64")
	t0 := time.Date(2026, 11, 24, 0, 0, 0, 0, time.UTC)
	addr := func(node, ip string, at time.Duration) Holding {
		return Holding{Node: node, Addr: netip.MustParseAddr(ip), Since: t0.Add(at)}
	}
	for _, c := range []struct {
		name   string
		mine   time.Duration
		near   []Holding
		shared []netip.Prefix
		want   string
		p      string // default: the /64
	}{
		{name: "nobody else near", mine: 5},
		{name: "another carves from it", mine: 0, near: []Holding{{Node: "b", Prefix: p}}, want: "b"},
		{name: "another carves from a longer prefix inside it", mine: 0, near: []Holding{{Node: "b", Prefix: netip.MustParsePrefix("2001:db8:1:1:8000::/65")}}, want: "b"},
		{name: "another claimed an address in it first", mine: 5, near: []Holding{addr("b", "2001:db8:1:1::b", 1)}, want: "b"},
		{name: "it claimed first", mine: 1, near: []Holding{addr("b", "2001:db8:1:1::b", 5)}},
		{name: "the same second: the name decides", mine: 1, near: []Holding{addr("0b", "2001:db8:1:1::b", 1)}, want: "0b"},
		{name: "the earliest of several others", mine: 9, near: []Holding{addr("c", "2001:db8:1:1::c", 3), addr("b", "2001:db8:1:1::b", 2)}, want: "b"},
		{name: "an address outside it", mine: 5, near: []Holding{addr("b", "2001:db8:1:2::b", 1)}},
		{name: "its own entries", mine: 5, near: []Holding{{Node: "a", Prefix: p}, addr("a", "2001:db8:1:1::a", 1)}},
		{name: "no address of its own in it", mine: -1, near: []Holding{addr("b", "2001:db8:1:1::b", 9)}, want: "b"},
		{name: "another claimed first in the /64 around a longer prefix", mine: 5, near: []Holding{addr("b", "2001:db8:1:1:ffff::b", 1)}, want: "b", p: "2001:db8:1:1::/96"},
		{name: "another carves a longer prefix in the same /64", mine: 1, near: []Holding{{Node: "b", Prefix: netip.MustParsePrefix("2001:db8:1:1:ffff::/96")}}, want: "b", p: "2001:db8:1:1::/96"},
		{name: "a longer prefix in another /64", mine: 1, near: []Holding{{Node: "b", Prefix: netip.MustParsePrefix("2001:db8:1:2::/96")}}, p: "2001:db8:1:1::/96"},
		{name: "a listing not yet recorded counts", mine: 5, near: []Holding{addr("b", "2001:db8:1:1::b", 1)}, want: "b"},
		{name: "an address the inventory gives to others counts for nothing", mine: 5, near: []Holding{addr("x", "2001:db8:1:1::77", 1)}},
	} {
		mine := t0.Add(c.mine)
		if c.mine < 0 {
			mine = time.Time{}
		}
		pp := p
		if c.p != "" {
			pp = netip.MustParsePrefix(c.p)
		}
		rules := PrefixRules{FirstClaim: []netip.Prefix{netip.MustParsePrefix("2001:db8::/32")}, Shared: c.shared,
			Inventory: []Binding{{Names: []string{"y"}, Networks: []netip.Prefix{netip.MustParsePrefix("2001:db8:1:1::77/128")}}}}
		if got := rules.PrefixHolder("a", pp, mine, c.near); got != c.want {
			t.Errorf("%s: PrefixHolder = %q, want %q", c.name, got, c.want)
		}
	}
	// An address inside another Node's carved prefix is that Node's.
	near := []Holding{{Node: "b", Prefix: p}}
	if got := InPrefix("a", netip.MustParseAddr("2001:db8:1:1::99"), near); got != "b" {
		t.Errorf("InPrefix = %q, want b", got)
	}
	if got := InPrefix("a", netip.MustParseAddr("2001:db8:1:1::99"), []Holding{{Node: "b", Prefix: netip.MustParsePrefix("2001:db8:1:1:ffff::/96")}}); got != "b" {
		t.Errorf("InPrefix beside another's /96 in the same /64 = %q, want b", got)
	}
	if got := InPrefix("b", netip.MustParseAddr("2001:db8:1:1::99"), near); got != "" {
		t.Errorf("InPrefix of its own = %q", got)
	}
}

// TestServingIs: the certificate the record names is one CSR object. The
// same name on another object (the name is free once the issued CSR is
// deleted) is not it, so it neither skips nor clears the renewal rule; a
// record from before UIDs were kept names no object (its name may be
// anyone's by now).
func TestServingIs(t *testing.T) {
	s := &Serving{CSR: "csr-1", UID: "u1"}
	legacy := &Serving{CSR: "csr-1"}
	for _, c := range []struct {
		name string
		s    *Serving
		csr  string
		uid  string
		want bool
	}{
		{"the recorded object", s, "csr-1", "u1", true},
		{"its name on another object", s, "csr-1", "u2", false},
		{"another name", s, "csr-2", "u1", false},
		{"no certificate recorded", nil, "csr-1", "u1", false},
		{"a record from before UIDs is no object's", legacy, "csr-1", "u2", false},
		{"not even with an empty UID", legacy, "csr-1", "", false},
		{"a record from before UIDs, another name", legacy, "csr-2", "u2", false},
	} {
		if got := c.s.Is(c.csr, c.uid); got != c.want {
			t.Errorf("%s: Is(%q, %q) = %v, want %v", c.name, c.csr, c.uid, got, c.want)
		}
	}
}

// Who may carve from a node prefix at all (class 3): the inventory's most
// specific binding of its /64, else first claim where the admin chose it,
// else nobody; a shared prefix is everyone's.
func TestEntitled(t *testing.T) {
	rules := PrefixRules{
		Inventory: []Binding{
			{Names: []string{"web-*"}, Networks: []netip.Prefix{netip.MustParsePrefix("2001:db8:1::/48")}},
			{Names: []string{"db-1"}, Networks: []netip.Prefix{netip.MustParsePrefix("2001:db8:1:5::/64")}},
			{Names: []string{"tiny"}, Networks: []netip.Prefix{netip.MustParsePrefix("2001:db8:1:6::/112")}},
		},
		FirstClaim: []netip.Prefix{netip.MustParsePrefix("2001:db8:f000::/36")},
		Shared:     []netip.Prefix{netip.MustParsePrefix("2001:db8:5::/48")},
	}
	for _, c := range []struct {
		node, set  string
		ok, shared bool
	}{
		{"web-1", "2001:db8:1:7::/64", true, false},
		{"db-1", "2001:db8:1:7::/64", false, false},  // web's
		{"db-1", "2001:db8:1:5::/64", true, false},   // the most specific binding
		{"web-1", "2001:db8:1:5::/64", false, false}, // db-1's, though inside web's /48
		{"web-1", "2001:db8:1:5::/96", false, false}, // a longer prefix: its /64 decides
		{"tiny", "2001:db8:1:6::/64", false, false},  // a /112 does not give its /64
		{"web-1", "2001:db8:1:6::/64", true, false},  // web's /48 holds the /64 (the carve avoids tiny's /112)
		{"anyone", "2001:db8:f000:1::/64", true, false},
		{"anyone", "2001:db8:2:1::/64", false, false}, // unbound, not first claim: nobody's
		{"anyone", "2001:db8:5:1::/64", true, true},
	} {
		shared, why := rules.Entitled(c.node, netip.MustParsePrefix(c.set))
		if (why == "") != c.ok || shared != c.shared {
			t.Errorf("Entitled(%s, %s) = %t, %q; want entitled %t, shared %t", c.node, c.set, shared, why, c.ok, c.shared)
		}
	}
	for _, c := range []struct {
		node, r string
		want    []string
	}{
		{"web-1", "2001:db8:1::/48", []string{"2001:db8:1:5::/64", "2001:db8:1:6::/112"}},
		{"web-1", "2001:db8:1:6::/64", []string{"2001:db8:1:6::/112"}},
		{"web-1", "2001:db8:1:7::/64", nil},
		{"db-1", "2001:db8:1:5::/64", nil}, // its own /64, inside web's /48
		{"db-1", "2001:db8:1:6::/64", []string{"2001:db8:1:6::/64"}},
		{"tiny", "2001:db8:1:6::/64", []string{"2001:db8:1:6::/64"}},
		{"anyone", "2001:db8:2::/64", nil},
		{"anyone", "::/0", []string{"2001:db8:1::/48", "2001:db8:1:5::/64", "2001:db8:1:6::/112"}},
	} {
		var want []netip.Prefix
		for _, w := range c.want {
			want = append(want, netip.MustParsePrefix(w))
		}
		if got := BoundElsewhere(rules.Inventory, c.node, netip.MustParsePrefix(c.r)); !slices.Equal(got, want) {
			t.Errorf("BoundElsewhere(%s, %s) = %v, want %v", c.node, c.r, got, want)
		}
	}
}
