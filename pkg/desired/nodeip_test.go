package desired

import (
	"net/netip"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/talos-nodeinit/talos-nodeinit/pkg/netaddr"
)

// TestInternalIPsOnlyFromTheKernel: without machined's NodeIP resource (the
// static pod), the kubelet's alpha.kubernetes.io/provided-node-ip, which the
// node's credential writes, only picks among the addresses the kernel holds
// on a usable link: it never adds one.
func TestInternalIPsOnlyFromTheKernel(t *testing.T) {
	kernel := []netaddr.Address{
		{Prefix: netip.MustParsePrefix("10.0.0.5/24"), Link: "eth0", LinkUp: true, Permanent: true},
		{Prefix: netip.MustParsePrefix("2001:db8:1:2::5/64"), Link: "eth0", LinkUp: true, Permanent: true},
		{Prefix: netip.MustParsePrefix("10.0.0.8/24"), Link: "eth0", LinkUp: true, Permanent: true}, // a secondary (a kube-vip address, say)
		{Prefix: netip.MustParsePrefix("2001:db8:1:2::8/64"), Link: "eth0", LinkUp: true, Permanent: true},
		{Prefix: netip.MustParsePrefix("10.0.0.6/24"), Link: "eth1", LinkUp: false, Permanent: true},
		{Prefix: netip.MustParsePrefix("10.0.0.7/24"), Link: "eth0", LinkUp: true, Tentative: true},
		{Prefix: netip.MustParsePrefix("10.5.0.1/32"), Link: "kubespan", LinkUp: true, Permanent: true},
		{Prefix: netip.MustParsePrefix("127.0.0.1/8"), Link: "lo", LinkUp: true, Permanent: true},
	}
	ips := func(s ...string) []netip.Addr {
		var out []netip.Addr
		for _, a := range s {
			out = append(out, netip.MustParseAddr(a))
		}
		return out
	}
	for _, tc := range []struct {
		name     string
		machined []netip.Addr // Talos's NodeIP resource (nil: the static pod)
		provided []netip.Addr // the annotation
		want     []netip.Addr
	}{
		{"another node's address", nil, ips("10.0.0.99"), nil},
		{"the API server's VIP", nil, ips("10.0.0.100"), nil},
		{"a foreign address before the node's own", nil, ips("10.0.0.99", "10.0.0.5"), ips("10.0.0.5")},
		{"a foreign address, IPv4-mapped", nil, ips("::ffff:10.0.0.99"), nil},
		{"a kernel address on a link that is down", nil, ips("10.0.0.6"), nil},
		{"a tentative kernel address", nil, ips("10.0.0.7"), nil},
		{"a KubeSpan address", nil, ips("10.5.0.1"), nil},
		{"loopback", nil, ips("127.0.0.1"), nil},
		{"the node's own address", nil, ips("10.0.0.5"), ips("10.0.0.5")},
		{"the node's own addresses, dual stack", nil, ips("10.0.0.5", "2001:db8:1:2::5"), ips("10.0.0.5", "2001:db8:1:2::5")},
		{"the node's own address, IPv4-mapped", nil, ips("::ffff:10.0.0.5"), ips("10.0.0.5")},
		// The kubelet takes at most one --node-ip per family: more is no
		// kubelet's annotation, and each would be vouched for.
		{"two IPv4 addresses: the first", nil, ips("10.0.0.5", "10.0.0.8"), ips("10.0.0.5")},
		{"every address the node holds: the first of each family", nil, ips("10.0.0.5", "2001:db8:1:2::5", "10.0.0.8", "2001:db8:1:2::8"), ips("10.0.0.5", "2001:db8:1:2::5")},
		{"a foreign address does not take its family's place", nil, ips("10.0.0.99", "10.0.0.8"), ips("10.0.0.8")},
		{"machined's NodeIP wins; the annotation adds nothing", ips("10.0.0.5"), ips("10.0.0.99", "2001:db8:1:2::5"), ips("10.0.0.5")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := inputs(t, "")
			in.Talos.NodeIPs, in.Talos.ExternalIPs, in.Addresses, in.ProvidedNodeIPs = tc.machined, nil, kernel, tc.provided
			st, ok, err := Compute(in)
			if err != nil || !ok {
				t.Fatalf("compute: %v %v", ok, err)
			}
			var got []netip.Addr
			for _, a := range st.Addresses {
				if a.Type == corev1.NodeInternalIP {
					got = append(got, netip.MustParseAddr(a.Address))
				}
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("InternalIPs %v, want %v", got, tc.want)
			}
		})
	}
}

// TestAVIPIsNoNodesAddress: Talos puts a shared VIP on the interface of
// whichever control-plane node holds it, and lists it among the kubelet's
// NodeIPConfig ExcludeSubnets. A public VIP is then no ExternalIP of the
// holder's (its kubelet would ask for it, and be denied it as an API-server
// address), whether on a kernel link or on Talos's external link; every
// other public address is.
func TestAVIPIsNoNodesAddress(t *testing.T) {
	kernel := []netaddr.Address{
		{Prefix: netip.MustParsePrefix("10.0.0.5/24"), Link: "eth0", LinkUp: true, Permanent: true},
		{Prefix: netip.MustParsePrefix("203.0.113.5/24"), Link: "eth0", LinkUp: true, Permanent: true},
		{Prefix: netip.MustParsePrefix("203.0.113.100/32"), Link: "eth0", LinkUp: true, Permanent: true}, // the VIP
		{Prefix: netip.MustParsePrefix("2001:db8:1:2::5/64"), Link: "eth0", LinkUp: true, Permanent: true},
		{Prefix: netip.MustParsePrefix("2001:db8:1:2::100/128"), Link: "eth0", LinkUp: true, Permanent: true}, // an IPv6 VIP
	}
	externalIPs := func(vips []netip.Addr, external ...netip.Addr) []string {
		in := inputs(t, "")
		in.Addresses, in.Talos.ExternalIPs, in.Talos.VIPs = kernel, external, vips
		st, ok, err := Compute(in)
		if err != nil || !ok {
			t.Fatalf("compute: %v %v", ok, err)
		}
		var got []string
		for _, a := range st.Addresses {
			if a.Type == corev1.NodeExternalIP {
				got = append(got, a.Address)
			}
		}
		return got
	}
	external := []netip.Addr{netip.MustParseAddr("198.51.100.7"), netip.MustParseAddr("198.51.100.8")}
	all := []string{"203.0.113.5", "203.0.113.100", "2001:db8:1:2::5", "2001:db8:1:2::100", "198.51.100.7", "198.51.100.8"}
	if got := externalIPs(nil, external...); !slices.Equal(got, all) {
		t.Fatalf("without VIPs the ExternalIPs are %v, want %v: the test would prove nothing", got, all)
	}
	vips := []netip.Addr{netip.MustParseAddr("203.0.113.100"), netip.MustParseAddr("2001:db8:1:2::100"), netip.MustParseAddr("198.51.100.8")}
	want := []string{"203.0.113.5", "2001:db8:1:2::5", "198.51.100.7"}
	if got := externalIPs(vips, external...); !slices.Equal(got, want) {
		t.Errorf("with the VIPs the ExternalIPs are %v, want %v", got, want)
	}
}
