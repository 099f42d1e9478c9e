package controller

import (
	"net/netip"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"

	"github.com/talos-nodeinit/talos-nodeinit/coordinator/observe"
	"github.com/talos-nodeinit/talos-nodeinit/coordinator/records"
)

// claim is claimant for the version of the Node the store holds, as a
// sync reads it.
func claim(c *Coordinator, name string, ip netip.Addr) string {
	obj, ok, _ := c.nodeIndex.GetByKey(name)
	if !ok {
		return "no " + name + " in the store"
	}
	return c.claimant(obj.(*corev1.Node), ip)
}

// TestTheStoreAheadOfTheHandlerDecidesNothing: the workers read the
// informer's store, which holds a Node before the handler hands it to the
// observer. A Node the store has listing an address, that the observer
// has not been handed listing it, holds the address against the Node
// synced meanwhile: which began first is not known yet. (A fake dynamic
// client only backs an empty records store: no record holds anything.)
func TestTheStoreAheadOfTheHandlerDecidesNothing(t *testing.T) {
	ip := netip.MustParseAddr("10.0.0.9")
	c := &Coordinator{observer: observe.New(4, clock.RealClock{}), records: records.NewStore(dynamicfake.NewSimpleDynamicClient(runtime.NewScheme())),
		nodeIndex: cache.NewIndexer(cache.MetaNamespaceKeyFunc, nodeIndexers(4))}
	node := func(name, uid string) *corev1.Node {
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID(uid)},
			Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: ip.String()}}}}
	}
	t0 := time.Now()
	self, x := node("self", "s"), node("x", "x1")
	_ = c.nodeIndex.Add(self)
	_ = c.nodeIndex.Add(x)
	check := func(step string, want map[string]string) {
		t.Helper()
		for name, w := range want {
			if got := claim(c, name, ip); got != w {
				t.Errorf("%s: claimant for %s is %q, want %q", step, name, got, w)
			}
		}
	}
	// Both in the store, neither handed over: which began first is not
	// known yet, so each holds it against the other.
	check("neither handed over", map[string]string{"self": "x", "x": "self"})
	// self handed over: x, which the handler has yet to hand over, began
	// later (the handler hands over in the store's order).
	c.observer.Observe(self, t0, 0)
	check("self handed over", map[string]string{"self": "", "x": "self"})
	c.observer.Pend(x, 2) // a list returned x: it began after self's listing, which the watch delivered
	check("x returned by a list", map[string]string{"self": "", "x": "self"})
	c.observer.Observe(x, t0.Add(time.Second), 2)
	check("x handed over", map[string]string{"self": "", "x": "self"})

	// self deleted and registered again: the store's object is not the one
	// the observer was handed, so x, handed over, counts as earlier.
	_ = c.nodeIndex.Update(node("self", "s2"))
	check("self re-created, not yet handed over", map[string]string{"self": "x"})
	// x re-created too, neither handed over.
	_ = c.nodeIndex.Update(node("x", "x2"))
	check("both re-created", map[string]string{"self": "x"})
	// An object the inventory does not entitle holds nothing, seen or not.
	c.inventory = []records.Binding{{Names: []string{"self"}, Networks: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/24")}}}
	check("x not entitled", map[string]string{"self": ""})
}

// Only the very version the workers read, handed over listing the
// address, orders a Node: not a pending version a list returned, not
// another object of its name, not an earlier version of the same object
// whose listing stopped since.
func TestOnlyTheVersionReadOrdersANode(t *testing.T) {
	ip := netip.MustParseAddr("10.0.0.9")
	node := func(name, uid, rv string, lists bool) *corev1.Node {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID(uid), ResourceVersion: rv}}
		if lists {
			n.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: ip.String()}}
		}
		return n
	}
	fresh := func() *Coordinator {
		return &Coordinator{observer: observe.New(4, clock.RealClock{}), records: records.NewStore(dynamicfake.NewSimpleDynamicClient(runtime.NewScheme())),
			nodeIndex: cache.NewIndexer(cache.MetaNamespaceKeyFunc, nodeIndexers(4))}
	}
	t0 := time.Now()

	// a. o and n in the store, neither handed over; a relist returns n's
	// next version (pending), not o's (the store has it).
	c := fresh()
	_ = c.nodeIndex.Add(node("o", "o", "35", true))
	_ = c.nodeIndex.Add(node("n", "n", "50", true))
	c.observer.Pend(node("n", "n", "50", true), 2)
	if got := claim(c, "n", ip); got != "o" {
		t.Errorf("n known only as pending: claimant %q, want o", got)
	}

	// b. a pending version of another object of n's name.
	c = fresh()
	c.observer.Pend(node("n", "n1", "50", true), 2)
	_ = c.nodeIndex.Add(node("b", "b", "60", true))
	_ = c.nodeIndex.Add(node("n", "n2", "62", true))
	if got := claim(c, "n", ip); got != "b" {
		t.Errorf("n re-created, its earlier object pending: claimant %q, want b", got)
	}

	// c. n listed ip, stopped, b began, n began again: the store has n's
	// latest version, the observer its first.
	c = fresh()
	c.observer.Observe(node("n", "n", "10", true), t0, 0)
	_ = c.nodeIndex.Add(node("n", "n", "30", true))
	_ = c.nodeIndex.Add(node("b", "b", "25", true))
	if got := claim(c, "n", ip); got != "b" {
		t.Errorf("n's listing since its first version not known: claimant %q, want b", got)
	}
	// Handed the versions in the store's order (n@20 dropped ip), n is later.
	c.observer.Observe(node("n", "n", "20", false), t0.Add(time.Second), 0)
	c.observer.Observe(node("b", "b", "25", true), t0.Add(2*time.Second), 0)
	c.observer.Observe(node("n", "n", "30", true), t0.Add(3*time.Second), 0)
	if got := claim(c, "n", ip); got != "b" {
		t.Errorf("handed over: claimant %q, want b", got)
	}
	if got := claim(c, "b", ip); got != "" {
		t.Errorf("handed over: claimant for b %q, want none", got)
	}
}
