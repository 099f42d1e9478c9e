package controller

import (
	"net/netip"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/talos-nodeinit/talos-nodeinit/coordinator/config"
	"github.com/talos-nodeinit/talos-nodeinit/coordinator/podcidrs"
	"github.com/talos-nodeinit/talos-nodeinit/pkg/ipam"
)

// TestAllocationAvoidsAddressesNotYetReserved: the informer's store (and
// its indexes) hold a Node's addresses before the handler that reserves
// them runs. An allocation made in between never hands out a segment that
// holds an address a Node in the store lists: its own, or another's inside
// the prefix it carves from (a shared /64, ipam.sharedPrefixes). Nothing
// here was reserved: no handler ran.
func TestAllocationAvoidsAddressesNotYetReserved(t *testing.T) {
	settings, err := config.Parse([]byte("{}"))
	if err != nil {
		t.Fatal(err)
	}
	pools := []netip.Prefix{netip.MustParsePrefix("fd00:10:244::/64")}
	c := &Coordinator{settings: settings, cidrs: podcidrs.New(NewMetrics(prometheus.NewRegistry()).PoolSegments, pools),
		nodeIndex: cache.NewIndexer(cache.MetaNamespaceKeyFunc, nodeIndexers(settings.MaxNodeAddresses))}
	alloc, err := ipam.New(ipam.Config{Families: []ipam.Family{ipam.IPv6}, IPv6Pool: pools[0]})
	if err != nil {
		t.Fatal(err)
	}
	c.cidrs.Rebuild(alloc, false, true, nil, nil)
	node := func(name string, ips ...string) *corev1.Node {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}
		for _, ip := range ips {
			n.Status.Addresses = append(n.Status.Addresses, corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: ip})
		}
		return n
	}
	// b lists the ::1 of the top /80 of the /64 a carves from (carving
	// goes from the top down), and a's own address is in the next.
	for _, n := range []*corev1.Node{node("a", "2001:db8:1:2:fffe::a"), node("b", "2001:db8:1:2:ffff::1")} {
		if err := c.nodeIndex.Add(n); err != nil {
			t.Fatal(err)
		}
	}
	own := netip.MustParseAddr("2001:db8:1:2:fffe::a")
	got, err := c.allocate("a", ipam.Request{IPv6: true, IPv6Prefix: netip.MustParsePrefix("2001:db8:1:2::/64"), IPv6Addr: own, Avoid: []netip.Addr{own}})
	if err != nil {
		t.Fatal(err)
	}
	for _, ip := range []string{"2001:db8:1:2:ffff::1", "2001:db8:1:2:fffe::a"} {
		if len(got) != 1 || got[0].Contains(netip.MustParseAddr(ip)) {
			t.Fatalf("a was handed %v, holding %s, which a Node in the store lists", got, ip)
		}
	}
	if got[0] != netip.MustParsePrefix("2001:db8:1:2:fffd::/80") {
		t.Errorf("a was handed %v, want the top /80 holding no listed address, 2001:db8:1:2:fffd::/80", got)
	}
}
