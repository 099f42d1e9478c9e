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

	"github.com/talos-nodeinit/talos-nodeinit/coordinator/records"
)

// TestTheStoreAheadOfTheHandlerDecidesNothing: the workers read the
// informer's store, which holds a Node before the handler hands it to the
// observer. A Node the store has listing an address, that the observer
// has not been handed listing it, holds the address against the Node
// synced meanwhile: which began first is not known yet. (A fake dynamic
// client only backs an empty records store: no record holds anything.)
func TestTheStoreAheadOfTheHandlerDecidesNothing(t *testing.T) {
	ip := netip.MustParseAddr("10.0.0.9")
	c := &Coordinator{observer: newObserver(4), records: records.NewStore(dynamicfake.NewSimpleDynamicClient(runtime.NewScheme())),
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
			if got := c.claimant(name, ip); got != w {
				t.Errorf("%s: claimant for %s is %q, want %q", step, name, got, w)
			}
		}
	}
	// Both in the store, neither handed over: which began first is not
	// known yet, so each holds it against the other.
	check("neither handed over", map[string]string{"self": "x", "x": "self"})
	// self handed over: x, which the handler has yet to hand over, began
	// later (the handler hands over in the store's order).
	c.observer.observe(self, t0, 0)
	check("self handed over", map[string]string{"self": "", "x": "self"})
	c.observer.pend(x, 2) // a list returned x: it began after self's listing, which the watch delivered
	check("x returned by a list", map[string]string{"self": "", "x": "self"})
	c.observer.observe(x, t0.Add(time.Second), 2)
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
