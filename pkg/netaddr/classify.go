// Package netaddr classifies the node's addresses: which are external
// (ExternalIP candidates), and which global IPv6 prefixes the node holds (the
// source of its pod CIDR segments). It is pure; pkg/netaddr/netlinksource
// reads the addresses from the kernel.
package netaddr

import (
	"cmp"
	"net/netip"
	"path"
	"slices"
)

// Address is one kernel address with what classification needs.
type Address struct {
	// Prefix is the address with its prefix length (2001:db8::5/64).
	Prefix netip.Prefix
	// Link is the interface name; LinkUp says it is administratively up and
	// not operationally down.
	Link   string
	LinkUp bool
	// Flags from IFA_FLAGS.
	Tentative, Deprecated, Permanent, DADFailed, Temporary bool
}

// DefaultExcludedLinks are links whose addresses are never the node's own:
// loopback, overlays, CNI plumbing (Cilium, Flannel, Calico's tunnels,
// kube-router's pod bridge, Weave), the links Services' addresses are bound
// to (kube-proxy's kube-ipvs0, kube-router's kube-dummy-if, NodeLocal
// DNSCache's nodelocaldns) and Talos's KubeSpan and SideroLink. An address
// on one is never published, so the agent never vouches for it in a
// serving certificate.
var DefaultExcludedLinks = []string{"lo", "kubespan", "siderolink", "cilium*", "flannel*", "cni*", "vxlan*", "dummy*", "kube-ipvs*",
	"kube-dummy-if", "kube-bridge", "cali*", "tunl*", "wireguard.cali", "wg-v6.cali", "weave", "nodelocaldns"}

// Classifier holds the configured link exclusions (shell patterns).
type Classifier struct {
	Excluded []string
}

// NewClassifier excludes the defaults plus the extra patterns.
func NewClassifier(extra ...string) Classifier {
	return Classifier{Excluded: append(slices.Clone(DefaultExcludedLinks), extra...)}
}

// Excluded reports whether a link's addresses are ignored.
func (c Classifier) ExcludedLink(name string) bool {
	for _, p := range c.Excluded {
		if ok, _ := path.Match(p, name); ok {
			return true
		}
	}
	return false
}

// Usable reports whether an address is a settled address on a real, up link:
// not tentative, deprecated, failed DAD, or a temporary (privacy) address.
func (c Classifier) Usable(a Address) bool {
	return a.Prefix.IsValid() && a.LinkUp && !c.ExcludedLink(a.Link) &&
		!a.Tentative && !a.Deprecated && !a.DADFailed && !a.Temporary
}

var (
	sharedAddressSpace = netip.MustParsePrefix("100.64.0.0/10")
	ula                = netip.MustParsePrefix("fc00::/7")
)

// IsExternal reports whether an IP can be reached from outside the site:
// global unicast, and not RFC 1918, ULA, CGNAT (100.64.0.0/10), link-local
// or loopback.
func IsExternal(ip netip.Addr) bool {
	ip = ip.Unmap()
	return ip.IsGlobalUnicast() && !ip.IsPrivate() && !ula.Contains(ip) && !sharedAddressSpace.Contains(ip)
}

// Compare orders address lists: permanent addresses first, then IPv4 before
// IPv6, then by link and address, so a list does not depend on kernel
// listing order.
func (a Address) Compare(b Address) int {
	if a.Permanent != b.Permanent {
		if a.Permanent {
			return -1
		}
		return 1
	}
	if a.Prefix.Addr().Is4() != b.Prefix.Addr().Is4() {
		if a.Prefix.Addr().Is4() {
			return -1
		}
		return 1
	}
	return cmp.Or(cmp.Compare(a.Link, b.Link), a.Prefix.Addr().Compare(b.Prefix.Addr()))
}

// ExternalIPs are the usable external addresses, permanent ones first.
func (c Classifier) ExternalIPs(addrs []Address) []netip.Addr {
	usable := slices.DeleteFunc(slices.Clone(addrs), func(a Address) bool { return !c.Usable(a) || !IsExternal(a.Prefix.Addr()) })
	slices.SortStableFunc(usable, Address.Compare)
	var out []netip.Addr
	for _, a := range usable {
		if ip := a.Prefix.Addr().Unmap(); !slices.Contains(out, ip) {
			out = append(out, ip)
		}
	}
	return out
}

// GlobalPrefixes are the node's global IPv6 prefixes, derived from each
// usable external IPv6 address and its mask, preferred (permanent) first.
// A /128 address gives no prefix: the node holds no range.
func (c Classifier) GlobalPrefixes(addrs []Address) []netip.Prefix {
	usable := slices.DeleteFunc(slices.Clone(addrs), func(a Address) bool {
		return !c.Usable(a) || !a.Prefix.Addr().Is6() || a.Prefix.Addr().Is4In6() || !IsExternal(a.Prefix.Addr()) || a.Prefix.Bits() >= 128
	})
	slices.SortStableFunc(usable, Address.Compare)
	var out []netip.Prefix
	for _, a := range usable {
		if p := a.Prefix.Masked(); !slices.Contains(out, p) {
			out = append(out, p)
		}
	}
	return out
}
