package observe

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
)

func TestObserverContinuity(t *testing.T) {
	o := New(2, clock.RealClock{})
	t0 := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	node := func(uid string, ips ...string) *corev1.Node {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n", UID: types.UID("u" + uid)}}
		for _, ip := range ips {
			n.Status.Addresses = append(n.Status.Addresses, corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: ip})
		}
		return n
	}
	a, b := netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("10.96.0.1")
	o.Observe(node("1", "10.0.0.1"), t0, 0)
	// A forged address appears, is reverted, and re-forged: it starts over.
	o.Observe(node("1", "10.0.0.1", "10.96.0.1"), t0.Add(time.Second), 0)
	o.Observe(node("1", "10.0.0.1"), t0.Add(1100*time.Millisecond), 0)
	o.Observe(node("1", "10.0.0.1", "10.96.0.1"), t0.Add(2*time.Second), 0)
	seen := o.Seen("n", "u1", t0.Add(3*time.Second))
	if seen[a] != 3*time.Second || seen[b] != time.Second {
		t.Fatalf("seen %v; want 10.0.0.1 for 3s and 10.96.0.1 for 1s (since its re-forging)", seen)
	}
	// The cap: a third address is not held.
	added, _ := o.Observe(node("1", "10.0.0.1", "10.96.0.1", "10.0.0.3"), t0.Add(4*time.Second), 0)
	if len(added) != 0 || len(o.Seen("n", "u1", t0)) != 2 {
		t.Fatalf("over the cap: added %v", added)
	}
	// Another Node listing an address later does not hold it; earlier does.
	other := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "m", UID: "m1"}, Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "10.0.0.1"}}}}
	o.Observe(other, t0.Add(4*time.Second), 0)
	if got := o.Earlier(a, "m", anyNode); got != "n" {
		t.Errorf("earlier lister of 10.0.0.1 for m: %q, want n", got)
	}
	if got := o.Earlier(a, "n", anyNode); got != "" {
		t.Errorf("a later lister holds n's address: %q", got)
	}
	o.Forget("m", "m1")
	// A re-created Node starts over and the old addresses are released.
	_, removed := o.Observe(node("2", "10.0.0.1"), t0.Add(5*time.Second), 0)
	if len(removed) != 2 || o.Seen("n", "u2", t0.Add(5*time.Second))[a] != 0 {
		t.Fatalf("re-created node: removed %v", removed)
	}
}

// listingAt is a start time, an address, and a Node of a given name (its
// UID the same) listing that address.
func listingAt() (time.Time, netip.Addr, func(name string) *corev1.Node) {
	ip := netip.MustParseAddr("10.0.0.9")
	return time.Date(2026, 11, 27, 8, 0, 0, 0, time.UTC), ip, func(name string) *corev1.Node {
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID(name)},
			Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: ip.String()}}}}
	}
}

// Which Node listed an address first counts only when the observer saw it
// begin to: two Nodes of one list (the first, or a relist after a watch
// gap) hold it against each other, in whatever order the list came and
// whatever their names; against any other Node the list orders them.
func TestFirstListOrderIsNotKnown(t *testing.T) {
	t0, ip, lists := listingAt()
	type seen struct {
		name string
		list uint32 // the informer's list that delivered it; 0: its watch
	}
	for _, tc := range []struct {
		order []seen
		want  map[string]string // earlier(ip, name)
	}{
		// The first list.
		{[]seen{{"a", 1}, {"b", 1}}, map[string]string{"a": "b", "b": "a"}},
		{[]seen{{"b", 1}, {"a", 1}}, map[string]string{"a": "b", "b": "a"}},
		{[]seen{{"a", 1}, {"b", 1}, {"c", 1}}, map[string]string{"a": "b", "b": "a", "c": "a"}},
		{[]seen{{"z", 1}, {"a", 0}}, map[string]string{"a": "z", "z": ""}},
		{[]seen{{"a", 1}, {"z", 0}}, map[string]string{"z": "a", "a": ""}},
		{[]seen{{"z", 0}, {"a", 0}}, map[string]string{"a": "z", "z": ""}},
		{[]seen{{"a", 0}, {"z", 0}}, map[string]string{"z": "a", "a": ""}},
		// A relist after a watch gap: what it delivers began after all the
		// watch delivered before it, and before all it delivers after.
		{[]seen{{"b", 2}, {"a", 2}}, map[string]string{"a": "b", "b": "a"}},
		{[]seen{{"z", 0}, {"b", 2}, {"a", 2}}, map[string]string{"a": "z", "b": "z", "z": ""}},
		{[]seen{{"z", 1}, {"b", 2}, {"a", 2}}, map[string]string{"a": "z", "b": "z", "z": ""}},
		{[]seen{{"b", 2}, {"a", 2}, {"c", 0}}, map[string]string{"a": "b", "b": "a", "c": "a"}},
		{[]seen{{"b", 2}, {"a", 3}}, map[string]string{"a": "b", "b": ""}},
		{[]seen{{"z", 2}, {"a", 0}}, map[string]string{"a": "z", "z": ""}},
	} {
		o := New(4, clock.RealClock{})
		for i, s := range tc.order {
			o.Observe(lists(s.name), t0.Add(time.Duration(i)*time.Second), s.list)
		}
		for name, want := range tc.want {
			if got := o.Earlier(ip, name, anyNode); got != want {
				t.Errorf("seen %v: earlier lister for %s is %q, want %q", tc.order, name, got, want)
			}
		}
		// An update from the watch keeps the order a list left unknown.
		o.Observe(lists(tc.order[0].name), t0.Add(time.Minute), 0)
		for name, want := range tc.want {
			if got := o.Earlier(ip, name, anyNode); got != want {
				t.Errorf("seen %v, then %s again: earlier lister for %s is %q, want %q", tc.order, tc.order[0].name, name, got, want)
			}
		}
	}
}

func anyNode(string) bool { return true }

// atVersion is lists (listingAt) with a resource version.
func atVersion(lists func(string) *corev1.Node) func(name, rv string) *corev1.Node {
	return func(name, rv string) *corev1.Node {
		n := lists(name)
		n.ResourceVersion = rv
		return n
	}
}

// expectEarlier checks earlier(ip, name) for each name: one of the wants,
// "|" apart.
func expectEarlier(t *testing.T, o *Observer, ip netip.Addr, what string, want map[string]string) {
	t.Helper()
	for name, w := range want {
		if got := o.Earlier(ip, name, anyNode); !slices.Contains(strings.Split(w, "|"), got) {
			t.Errorf("%s: earlier lister for %s is %q, want %q", what, name, got, w)
		}
	}
}

// Only an eligible Node (the inventory entitles it) is an earlier lister:
// an ineligible one listing first hides neither the eligible Node that
// listed next nor the order among the rest.
func TestEarlierListerIsEligible(t *testing.T) {
	t0 := time.Date(2026, 11, 27, 8, 0, 0, 0, time.UTC)
	ip := netip.MustParseAddr("10.0.6.7")
	o := New(4, clock.RealClock{})
	for i, name := range []string{"aaa-decoy", "bound-first", "bound-second"} {
		o.Observe(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID(name)},
			Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: ip.String()}}}}, t0.Add(time.Duration(i)*time.Second), 0)
	}
	bound := func(n string) bool { return strings.HasPrefix(n, "bound-") }
	for self, want := range map[string]string{"bound-second": "bound-first", "bound-first": "", "aaa-decoy": ""} {
		if got := o.Earlier(ip, self, bound); got != want {
			t.Errorf("earlier lister for %s: %q, want %q", self, got, want)
		}
	}
}

// A Node re-created as an object without a UID (as fakes make) and
// without addresses releases the earlier object's, as any other.
func TestObserverReleasesWithoutUID(t *testing.T) {
	o := New(4, clock.RealClock{})
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n", UID: "u1"}, Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "10.0.0.1"}}}}
	o.Observe(n, time.Now(), 0)
	_, removed := o.Observe(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n"}}, time.Now(), 0)
	if len(removed) != 1 || o.Earlier(netip.MustParseAddr("10.0.0.1"), "m", anyNode) != "" {
		t.Errorf("removed %v; the address still listed by n: %q", removed, o.Earlier(netip.MustParseAddr("10.0.0.1"), "m", anyNode))
	}
}

// BenchmarkObserverHeld is what the observer keeps per Node on a cluster
// of 5,000, each listing an IPv4 and an IPv6 address: it holds an entry
// for every Node, leader or standby (make bench-scale's coordinator RSS).
func BenchmarkObserverHeld(b *testing.B) {
	const nodes = 5000
	list := make([]*corev1.Node, nodes)
	for i := range list {
		list[i] = &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("node-%05d", i), UID: types.UID(fmt.Sprintf("uid-%05d", i))},
			Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{
				{Type: corev1.NodeInternalIP, Address: fmt.Sprintf("10.%d.%d.%d", i>>16, (i>>8)&255, i&255)},
				{Type: corev1.NodeInternalIP, Address: fmt.Sprintf("2001:db8:%x::1", i)},
			}}}
	}
	now := time.Now()
	var held float64
	for b.Loop() {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		o := New(16, clock.RealClock{})
		for _, n := range list {
			o.Observe(n, now, 1)
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		held = float64(after.HeapAlloc-before.HeapAlloc) / nodes
		runtime.KeepAlive(o)
	}
	b.ReportMetric(held, "heap-B/node")
}

// A list's Nodes count from the moment the list returns them, before the
// informer hands them over one at a time while the workers run: the first
// handed over is not decided before the others are known. A pending
// lister began after all the watch delivered before its list, handed over
// yet or not.
func TestAListIsKnownBeforeItIsHandedOver(t *testing.T) {
	t0, ip, lists := listingAt()
	check := func(o *Observer, step string, want map[string]string) {
		t.Helper()
		for name, w := range want {
			if got := o.Earlier(ip, name, anyNode); got != w {
				t.Errorf("%s: earlier lister for %s is %q, want %q", step, name, got, w)
			}
		}
	}
	o := New(4, clock.RealClock{})
	o.Pend(lists("a"), 2)
	o.Pend(lists("b"), 2)
	check(o, "a relist returned a and b", map[string]string{"a": "b", "b": "a", "c": "a"})
	// The watch's event of x, queued before the gap, handed over after the
	// relist returned: x began first.
	o.Observe(lists("x"), t0, 0)
	check(o, "x handed over late", map[string]string{"a": "x", "b": "x", "x": ""})
	o.Observe(lists("a"), t0.Add(time.Second), 2)
	check(o, "a handed over", map[string]string{"a": "x", "b": "x", "x": ""})
	o.Observe(lists("b"), t0.Add(2*time.Second), 2)
	check(o, "b handed over", map[string]string{"a": "x", "b": "x", "x": ""})
	if len(o.pending) != 0 || len(o.pendingBy) != 0 {
		t.Errorf("pending entries left after the list was handed over: %v %v", o.pending, o.pendingBy)
	}

	o = New(4, clock.RealClock{})
	o.Observe(lists("x"), t0, 0)
	o.Pend(lists("a"), 2)
	check(o, "x before the gap, a pending", map[string]string{"a": "x", "x": ""})
	o.Forget("a", "a")
	check(o, "a deleted before it was handed over", map[string]string{"x": ""})
	if len(o.pending) != 0 || len(o.pendingBy) != 0 {
		t.Errorf("a deleted Node left pending entries: %v %v", o.pending, o.pendingBy)
	}
	// A Node a list returns with the addresses it already listed keeps
	// its order.
	o.Pend(lists("x"), 3)
	o.Observe(lists("y"), t0.Add(time.Minute), 0)
	check(o, "x returned again by a list", map[string]string{"y": "x", "x": ""})

	// What a list returned stays pending until that version is handed over
	// or that object deleted: not for an older version the watch delivered
	// late, nor for the late delete of an earlier object of the name.
	o = New(4, clock.RealClock{})
	o.Pend(lists("n"), 2)
	o.Observe(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n", UID: "n"}}, t0, 0)
	check(o, "an older version of n handed over late", map[string]string{"c": "n"})
	o.Forget("n", "an earlier object")
	check(o, "an earlier object of n deleted late", map[string]string{"c": "n"})
	o.Forget("n", "n")
	check(o, "n deleted", map[string]string{"c": ""})

	// Two lists in a row: a Node keeps the earliest that returned it, so
	// the second does not make it later than the first's others.
	o = New(4, clock.RealClock{})
	o.Pend(lists("p"), 2)
	o.Pend(lists("q"), 2)
	o.Pend(lists("p"), 3)
	check(o, "p returned again by the next list", map[string]string{"p": "q", "q": "p"})
	// A list that never completes is dropped.
	o.DropList(2)
	if len(o.pending) != 0 || len(o.pendingBy) != 0 {
		t.Errorf("a dropped list left pending entries: %v %v", o.pending, o.pendingBy)
	}

	// Pending is per version. Lists 1 and 2 in flight while the informer
	// hands over list 1: handing over v's version of list 1 (without the
	// address) leaves its version of list 2 (with it) pending, so c of
	// list 2 does not take the address before v is handed over.
	version := func(name, rv string, ips ...string) *corev1.Node {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID(name), ResourceVersion: rv}}
		for _, ip := range ips {
			n.Status.Addresses = append(n.Status.Addresses, corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: ip})
		}
		return n
	}
	o = New(4, clock.RealClock{})
	o.Pend(version("v", "11"), 1)
	o.Pend(version("v", "21", ip.String()), 2)
	o.Pend(version("c", "22", ip.String()), 2)
	o.Observe(version("v", "11"), t0, 1)
	o.Observe(version("c", "22", ip.String()), t0.Add(time.Second), 2)
	check(o, "v of list 1 handed over, c of list 2 too", map[string]string{"c": "v"})
	o.Observe(version("v", "21", ip.String()), t0.Add(2*time.Second), 2)
	check(o, "v of list 2 handed over", map[string]string{"c": "v", "v": "c"})

	// A later list that never completes drops its versions only: v keeps
	// list 1's, and c of list 1 does not take the address from it.
	o = New(4, clock.RealClock{})
	o.Pend(version("v", "31", ip.String()), 1)
	o.Pend(version("c", "32", ip.String()), 1)
	o.Pend(version("v", "41", ip.String(), "10.0.0.10"), 2)
	o.DropList(2)
	o.Observe(version("c", "32", ip.String()), t0, 1)
	check(o, "list 2 dropped, c of list 1 handed over", map[string]string{"c": "v"})

	// A later version of the object the watch hands over ends what a list
	// returned and the informer never applied; an older one does not.
	o = New(4, clock.RealClock{})
	o.Pend(version("v", "50", ip.String()), 3)
	o.Observe(version("v", "49"), t0, 0)
	check(o, "an older version handed over", map[string]string{"c": "v"})
	o.Observe(version("v", "51"), t0.Add(time.Second), 0)
	check(o, "a later version handed over", map[string]string{"c": ""})
	if len(o.pending) != 0 || len(o.pendingBy) != 0 {
		t.Errorf("a later version left pending entries: %v %v", o.pending, o.pendingBy)
	}
}

// A Node the watch saw begin to list an address, and that a relist after
// a watch gap returns changed, may have stopped listing it and begun again
// meanwhile: the observer cannot see which. So it keeps its order against
// no one: it and every Node listing the address before the relist hold it
// against each other, as do Nodes the relist returned; a Node the watch
// sees begin later is still later. Returned unchanged (the same version),
// it listed the address all along and keeps its place. Its address's
// stability counts from the relist.
func TestARelistDoesNotKeepAnOrderItCannotSee(t *testing.T) {
	t0, ip, lists := listingAt()
	at := atVersion(lists)
	for _, tc := range []struct {
		name string
		// n began first, then p, both seen by the watch; the relist
		// (list 2) returns n at rv and m, new; q begins after it.
		rv   string
		want map[string]string // earlier(ip, name): one of these, "|" apart
		seen time.Duration     // n's address's stability at the end
	}{
		{"n changed across the gap", "20", map[string]string{"n": "p", "p": "n", "m": "n", "q": "n|p|m"}, time.Minute - 3*time.Second},
		{"n unchanged", "10", map[string]string{"n": "", "p": "n", "m": "n", "q": "n|p|m"}, time.Minute},
	} {
		o := New(4, clock.RealClock{})
		o.Observe(at("n", "10"), t0, 0)
		o.Observe(at("p", "11"), t0.Add(time.Second), 0)
		// The relist: the Nodes it returns are noted as pending first, as
		// ListOrder does, then handed over.
		o.Pend(at("n", tc.rv), 2)
		o.Pend(at("m", "21"), 2)
		o.Observe(at("n", tc.rv), t0.Add(3*time.Second), 2)
		o.Observe(at("m", "21"), t0.Add(3*time.Second), 2)
		o.Observe(at("q", "30"), t0.Add(4*time.Second), 0)
		expectEarlier(t, o, ip, tc.name, tc.want)
		if got := o.Seen("n", "n", t0.Add(time.Minute))[ip]; got != tc.seen {
			t.Errorf("%s: n's address seen for %v, want %v", tc.name, got, tc.seen)
		}
	}
	// Two Nodes of the first list hold an address against each other,
	// whichever was handed over first; one returned changed by a relist
	// still does (a list's Node has no known start), and again after a
	// second relist and a watch update.
	for _, first := range []string{"a", "n"} {
		o := New(4, clock.RealClock{})
		second := map[string]string{"a": "n", "n": "a"}[first]
		o.Observe(at(first, "10"), t0, 1)
		o.Observe(at(second, "11"), t0.Add(time.Second), 1)
		for i, step := range []struct {
			rv   string
			list uint32
		}{{"20", 2}, {"30", 3}, {"31", 0}} {
			if step.list != 0 {
				o.Pend(at("n", step.rv), step.list)
			}
			o.Observe(at("n", step.rv), t0.Add(time.Duration(2+i)*time.Second), step.list)
			expectEarlier(t, o, ip, fmt.Sprintf("%s handed over first, n at %s (list %d)", first, step.rv, step.list), map[string]string{"a": "n", "n": "a"})
		}
	}
}

// A Node a relist returned changed, not handed over yet, is as unsure of
// its order as once it is: the version before the gap (which a sync may
// still read from the store) does not let it take an address from a Node
// the same relist returned.
func TestAPendingChangeUnsettlesTheOrder(t *testing.T) {
	t0, ip, lists := listingAt()
	at := atVersion(lists)
	o := New(4, clock.RealClock{})
	o.Observe(at("n", "10"), t0, 0)
	o.Pend(at("n", "20"), 2)
	o.Pend(at("m", "21"), 2)
	expectEarlier(t, o, ip, "n returned changed by the relist, not handed over", map[string]string{"n": "m", "m": "n"})
	// A Node that did not list the address before the gap, returned
	// changed listing it, began after every Node the watch saw list it:
	// it holds nothing against them.
	o = New(4, clock.RealClock{})
	o.Observe(at("m", "11"), t0, 0)
	o.Observe(func() *corev1.Node { n := at("n", "12"); n.Status.Addresses[0].Address = "10.0.0.10"; return n }(), t0, 0)
	o.Pend(at("n", "20"), 2)
	expectEarlier(t, o, ip, "n newly listing the address in the relist, not handed over", map[string]string{"m": "", "n": "m"})
	// Returned unchanged: n keeps its place.
	o = New(4, clock.RealClock{})
	o.Observe(at("n", "10"), t0, 0)
	o.Pend(at("n", "10"), 2)
	o.Pend(at("m", "21"), 2)
	expectEarlier(t, o, ip, "n returned unchanged by the relist", map[string]string{"n": "", "m": "n"})
}

// Of several earlier listers none of which is known to have begun before
// the others, the one named is the same however they are held: the
// Event that names it does not change from one sync to the next.
func TestTheEarlierListerNamedIsStable(t *testing.T) {
	ip := netip.MustParseAddr("10.0.0.9")
	want := ""
	for i := range 50 {
		o := New(4, clock.RealClock{})
		l := []lister{{name: "c", from: 10, to: 10}, {name: "a", from: 20, to: 20}, {name: "b", from: 0, to: 30}}
		rand.Shuffle(len(l), func(i, j int) { l[i], l[j] = l[j], l[i] })
		o.byIP[ip] = append(l, lister{name: "self", from: 40, to: 40})
		got := o.Earlier(ip, "self", anyNode)
		if i == 0 {
			want = got
		}
		if got != want || got == "" {
			t.Fatalf("order %v: earlier lister %q, earlier %q", l, got, want)
		}
	}
}
