package controller_test

import (
	"net/netip"
	"testing"
	"time"

	"github.com/talos-nodeinit/talos-nodeinit/coordinator/controller"
)

// TestNoSegmentHoldsAReservedAddress: no pod CIDR holds an address no Node
// may have: one of csr.reservedAddresses, or one of the API server's (its
// certificate's IPs, as a VIP is, which no Node lists). Each Node here
// reports a /64 whose first /80 holds such an address, as a link with a low
// static VIP and SLAAC node addresses has: the allocator hands out the
// first free /80.
func TestNoSegmentHoldsAReservedAddress(t *testing.T) {
	reserved, vip := netip.MustParseAddr("2001:db8:7:7::5"), netip.MustParseAddr("2001:db8:7:8::1")
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
