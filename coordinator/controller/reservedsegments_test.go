package controller_test

import (
	"context"
	"net/netip"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/talos-nodeinit/talos-nodeinit/coordinator/controller"
)

// TestNoSegmentHoldsAReservedAddress: no pod CIDR holds an address no Node
// may have: one of csr.reservedAddresses, or one of the API server's (its
// certificate's IPs, as a VIP is, which no Node lists), or a Service's
// load-balancer address (MetalLB hands out low addresses of the nodes'
// /64). Each Node here
// reports a /64 whose first /80 holds such an address, as a link with a low
// static VIP and SLAAC node addresses has: the allocator hands out the
// first free /80.
func TestNoSegmentHoldsAReservedAddress(t *testing.T) {
	reserved, vip, lb := netip.MustParseAddr("2001:db8:7:7::5"), netip.MustParseAddr("2001:db8:7:8::1"), netip.MustParseAddr("2001:db8:7:9::10")
	svc, err := admin().CoreV1().Services("default").Create(t.Context(), &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "lb-v6"},
		Spec:       corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, Ports: []corev1.ServicePort{{Port: 443}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = admin().CoreV1().Services("default").Delete(context.Background(), "lb-v6", metav1.DeleteOptions{})
	})
	svc.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: lb.String()}}
	if _, err := admin().CoreV1().Services("default").UpdateStatus(t.Context(), svc, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	startCoordinatorAs(t, "reservedseg", ipamSettings+"  reservedAddresses: [\""+reserved.String()+"\"]\n", coordinatorIdentity(t),
		func(c *controller.Config) {
			c.APIServerNames = []string{"kubernetes", "localhost"}
			c.APIServerIPs = []netip.Addr{netip.MustParseAddr("127.0.0.1"), vip}
		})
	for _, s := range []struct {
		name, ip, v6, prefix string
		avoid                netip.Addr
	}{
		{"resv-a", "10.0.5.91", "2001:db8:7:7:1::a", "2001:db8:7:7::/64", reserved},
		{"resv-b", "10.0.5.92", "2001:db8:7:8:1::b", "2001:db8:7:8::/64", vip},
		{"resv-c", "10.0.5.93", "2001:db8:7:9:1::c", "2001:db8:7:9::/64", lb},
	} {
		n := register(t, s.name, s.ip)
		n.publish(t, report{providerID: "talos://metal/" + s.name, externalIPs: []string{s.v6}, prefixes: []string{s.prefix}})
		waitFor(t, 20*time.Second, s.name+" initialized", func() bool { return initialized(get(t, s.name)) })
		cidrs := podCIDRs(t, get(t, s.name))
		var v6 bool
		for _, c := range cidrs {
			v6 = v6 || c.Addr().Is6()
			if c.Contains(s.avoid) {
				t.Errorf("%s's pod CIDR %s holds %s, which no Node may have", s.name, c, s.avoid)
			}
		}
		if !v6 {
			t.Errorf("%s got no IPv6 pod CIDR from its prefix: %v", s.name, cidrs)
		}
	}
}
