package netaddr

import (
	"net/netip"
	"slices"
	"testing"
)

func addr(cidr, link string, mods ...func(*Address)) Address {
	a := Address{Prefix: netip.MustParsePrefix(cidr), Link: link, LinkUp: true, Permanent: true}
	for _, m := range mods {
		m(&a)
	}
	return a
}

func tentative(a *Address)  { a.Tentative = true }
func deprecated(a *Address) { a.Deprecated = true }
func dynamic(a *Address)    { a.Permanent = false }
func down(a *Address)       { a.LinkUp = false }
func temporary(a *Address)  { a.Temporary = true }

func TestIsExternal(t *testing.T) {
	cases := map[string]bool{
		"203.0.113.5": true, "2001:db8::1": true, "8.8.8.8": true, "2a01::1": true,
		"10.1.2.3": false, "172.16.0.1": false, "192.168.1.1": false, "100.64.0.1": false, "100.127.255.254": false,
		"fd00::1": false, "fc12::1": false, "fe80::1": false, "127.0.0.1": false, "::1": false,
		"169.254.1.1": false, "0.0.0.0": false, "224.0.0.1": false, "ff02::1": false, "::ffff:10.0.0.1": false,
		"100.128.0.1": true,
	}
	for ip, want := range cases {
		if got := IsExternal(netip.MustParseAddr(ip)); got != want {
			t.Errorf("IsExternal(%s) = %v, want %v", ip, got, want)
		}
	}
}

func TestClassify(t *testing.T) {
	c := NewClassifier("ext*")
	addrs := []Address{
		addr("2001:db8:1::9/64", "eth0", dynamic),    // SLAAC: after permanent ones
		addr("2001:db8:1::5/64", "eth0"),             // permanent
		addr("203.0.113.5/24", "eth0"),               // permanent IPv4
		addr("10.0.0.5/24", "eth0"),                  // private
		addr("2001:db8:2::1/64", "eth1", tentative),  // not settled
		addr("2001:db8:3::1/64", "eth1", deprecated), // going away
		addr("2001:db8:4::1/64", "eth1", temporary),  // privacy address
		addr("198.51.100.7/32", "eth2", down),        // link down
		addr("192.0.2.77/32", "cilium_host"),         // default exclusion
		addr("192.0.2.78/32", "ext0"),                // configured exclusion
		addr("2001:db8:5::1/128", "eth3"),            // /128 only: an IP, no prefix
		addr("2001:db8:6:100::1/56", "eth3"),         // a /56
		addr("fd00::1/64", "eth0"),                   // ULA
		addr("100.64.3.4/10", "tailscale0"),          // CGNAT
	}
	gotIPs := c.ExternalIPs(addrs)
	wantIPs := []netip.Addr{
		netip.MustParseAddr("203.0.113.5"), netip.MustParseAddr("2001:db8:1::5"),
		netip.MustParseAddr("2001:db8:5::1"), netip.MustParseAddr("2001:db8:6:100::1"),
		netip.MustParseAddr("2001:db8:1::9"),
	}
	if !slices.Equal(gotIPs, wantIPs) {
		t.Errorf("ExternalIPs = %v\nwant %v", gotIPs, wantIPs)
	}
	gotPrefixes := c.GlobalPrefixes(addrs)
	wantPrefixes := []netip.Prefix{netip.MustParsePrefix("2001:db8:1::/64"), netip.MustParsePrefix("2001:db8:6:100::/56")}
	if !slices.Equal(gotPrefixes, wantPrefixes) {
		t.Errorf("GlobalPrefixes = %v, want %v", gotPrefixes, wantPrefixes)
	}
}

// TestServiceAndCNILinksAreExcluded: a public address on a link Services'
// addresses are bound to, or on CNI plumbing, is never the node's own (the
// agent would publish it as an ExternalIP and vouch for it in a serving
// certificate); one on a host link is.
func TestServiceAndCNILinksAreExcluded(t *testing.T) {
	c := NewClassifier()
	for _, link := range []string{"lo", "kubespan", "siderolink", "kube-ipvs0", "kube-dummy-if", "kube-bridge",
		"nodelocaldns", "cilium_host", "cilium_vxlan", "flannel.1", "cni0", "vxlan.calico", "cali1a2b3c4d5e6",
		"tunl0", "wireguard.cali", "wg-v6.cali", "weave", "dummy0"} {
		if got := c.ExternalIPs([]Address{addr("198.51.100.250/32", link)}); len(got) != 0 {
			t.Errorf("an address on %s is published: %v", link, got)
		}
	}
	for _, link := range []string{"eth0", "enp3s0", "bond0", "br0", "eth0.100"} {
		if got := c.ExternalIPs([]Address{addr("198.51.100.250/32", link)}); len(got) != 1 {
			t.Errorf("an address on the host link %s is not published: %v", link, got)
		}
	}
}
