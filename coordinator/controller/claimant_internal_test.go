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
	self := node("self", "s")
	_ = c.nodeIndex.Add(self)
	c.observer.observe(self, t0, 0)
	if got := c.claimant("self", ip); got != "" {
		t.Fatalf("alone: claimant %q", got)
	}

	x := node("x", "x1")
	_ = c.nodeIndex.Add(x) // in the store, not handed over
	if got := c.claimant("self", ip); got != "x" {
		t.Errorf("x in the store, not yet handed over: claimant %q, want x", got)
	}
	c.observer.pend(x, 2) // a list returned it: it began after self's listing, which the watch delivered
	if got := c.claimant("self", ip); got != "" {
		t.Errorf("x returned by a list, not handed over: claimant %q, want none", got)
	}
	c.observer.observe(x, t0.Add(time.Second), 2)
	if got := c.claimant("self", ip); got != "" {
		t.Errorf("x handed over, listing after self: claimant %q, want none", got)
	}

	// x deleted and registered again: the store's object is not the one
	// the observer was handed.
	_ = c.nodeIndex.Update(node("x", "x2"))
	if got := c.claimant("self", ip); got != "x" {
		t.Errorf("x re-created, not yet handed over: claimant %q, want x", got)
	}
	// An object the inventory does not entitle holds nothing, seen or not.
	c.inventory = []records.Binding{{Names: []string{"self"}, Networks: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/24")}}}
	if got := c.claimant("self", ip); got != "" {
		t.Errorf("x not entitled: claimant %q, want none", got)
	}
}
