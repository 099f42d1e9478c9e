package records

import (
	"net/netip"
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
			want: []string{"10.0.0.1"}, wantRefused: []string{"recorded as Node b's"}},
		{name: "the service IP is never recorded", current: ips("10.96.0.1"), wantRefused: []string{"service CIDR"}},
		{name: "pod pool addresses are never recorded", current: ips("10.244.0.1", "10.244.1.1"), wantRefused: []string{"pod pool", "pod pool"}},
		{name: "outside the node networks", current: ips("192.0.2.1"), wantRefused: []string{"outside the node networks"}},
		{name: "loopback", current: ips("127.0.0.1"), wantRefused: []string{"not a routable"}},
		{name: "the cap", current: ips("10.0.0.1", "10.0.0.2", "10.0.0.3", "10.0.0.4", "10.0.0.5"), want: []string{"10.0.0.1", "10.0.0.2", "10.0.0.3"},
			wantRefused: []string{"limit", "limit"}},
		{name: "kept claims keep their time and order", prev: []Claim{{"10.0.0.2", earlier}}, current: ips("10.0.0.1", "10.0.0.2"), want: []string{"10.0.0.2", "10.0.0.1"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			next, refused := NextClaims(c.prev, c.current, c.others, pol, now)
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
