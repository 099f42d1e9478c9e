package csrcheck

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"slices"
	"strings"
	"testing"
)

// Invariant (SECURITY.md, class 1): no certificate ever carries a reserved
// name, whoever asks. Reserved: cluster-internal names, csr.reservedNames,
// and the API server's certificate names, of which a control-plane Node
// may carry only its own name. The requester's own name grants nothing:
// every row here is also tried with the node *named* like the SAN, in
// either case, with a pattern that would match it, on a worker and on a
// control-plane node.
var (
	reservedNames  = []string{"vault.example.com", "registry.internal"}
	apiServerNames = []string{"api.example.com", "localhost", "kubernetes.default.svc", "cp-1", "cp-2.example.com", "*.k8s.example.com"}
	// loopbackNames are the loopback host's names in common /etc/hosts
	// files: a client resolving one connects to itself.
	loopbackNames = []string{"localhost", "localhost4", "localhost6", "localhost.localdomain", "localhost6.localdomain6", "ip6-localhost", "ip6-loopback"}
)

// underWildcard: is name one a wildcard entry of list ("*.k8s.example.com")
// covers (exactly one label in its place, as TLS clients match)?
func underWildcard(list []string, name string) bool {
	for _, w := range list {
		if rest, ok := strings.CutPrefix(strings.ToLower(w), "*."); ok {
			if label, parent, ok := strings.Cut(name, "."); ok && label != "" && parent == rest {
				return true
			}
		}
	}
	return false
}

// nameAllowed is the invariant, stated independently of CheckDNSSAN: may a
// certificate for node (a control-plane Node or not) carry name at all?
func nameAllowed(name, node string, controlPlane bool) bool {
	n := strings.ToLower(name)
	switch {
	case ClusterInternal(n, "cluster.local") != "", slices.Contains(reservedNames, n), readsAsIPv4(n), slices.Contains(loopbackNames, n):
		return false
	case slices.Contains(apiServerNames, n), underWildcard(apiServerNames, n):
		return controlPlane && n == strings.ToLower(node)
	}
	return true
}

// readsAsIPv4 is whether a C resolver's inet_aton takes name for an IPv4
// address (one to four parts, each decimal, octal with a leading 0, or hex
// with 0x, the last filling the bytes left): a client handed such a host
// connects to that address, and one that then checks DNS SANs against the
// host as given would accept a certificate for the name.
func readsAsIPv4(name string) bool {
	parts := strings.Split(name, ".")
	if len(parts) > 4 {
		return false
	}
	for _, p := range parts {
		digits, base := p, 10
		switch {
		case strings.HasPrefix(p, "0x"):
			digits, base = p[2:], 16
		case len(p) > 1 && p[0] == '0':
			digits, base = p[1:], 8
		}
		if p == "" {
			return false
		}
		for _, r := range digits {
			if !strings.ContainsRune("0123456789abcdef"[:base], r) {
				return false
			}
		}
	}
	return true
}

func checkReservedInvariant(t *testing.T, name, node string, controlPlane bool) {
	t.Helper()
	facts := Facts{ReservedNames: reservedNames, APIServerNames: apiServerNames, ControlPlane: controlPlane,
		Names: map[string]string{strings.ToLower(node): node}}
	policy := Policy{ClusterDomain: "cluster.local", DNSPatterns: []string{"*.example.com", "{node}.nodes.example.com", "*.internal"}}
	err := CheckDNSSAN(name, node, facts, policy)
	if err == nil && !nameAllowed(name, node, controlPlane) {
		t.Errorf("node %q (control plane: %v) may carry %q, a reserved name", node, controlPlane, name)
	}
}

func TestNoReservedNameWhoeverAsks(t *testing.T) {
	var names []string
	for _, n := range slices.Concat(reservedNames, apiServerNames, loopbackNames, []string{"kubernetes", "x.svc", "a.cluster.local", "cp-1.example.com", "node-a",
		"api.k8s.example.com", "cp-3.k8s.example.com", "a.b.k8s.example.com", "k8s.example.com"}) {
		names = append(names, n, strings.ToUpper(n))
	}
	for _, name := range names {
		for _, node := range []string{strings.ToLower(name), "node-a", "cp-1", "cp-2.example.com"} {
			for _, cp := range []bool{false, true} {
				checkReservedInvariant(t, name, node, cp)
			}
		}
	}
	// What the exemption still allows: a control-plane Node its own name,
	// which Talos puts in the API server's certificate.
	if err := CheckDNSSAN("cp-1", "cp-1", Facts{APIServerNames: apiServerNames, ControlPlane: true}, Policy{}); err != nil {
		t.Errorf("control-plane node cp-1 refused its own name: %v", err)
	}
	for _, c := range []struct{ name, node string }{{"api.example.com", "api.example.com"}, {"cp-1", "cp-1"}, {"vault.example.com", "vault.example.com"}} {
		if err := CheckDNSSAN(c.name, c.node, Facts{ReservedNames: reservedNames, APIServerNames: apiServerNames}, Policy{}); err == nil {
			t.Errorf("a worker named %q was allowed its own name, which is reserved", c.node)
		}
	}
}

// TestNoNameThatReadsAsAnAddress: no certificate carries a DNS SAN that a
// resolver reads as an IPv4 address, in any of inet_aton's forms, whoever
// asks: a Node named so included (the kubelet puts an IP-shaped Hostname in
// the IP SANs, so an honest one never asks for it as a name). Addresses go
// through the IP SAN checks only.
func TestNoNameThatReadsAsAnAddress(t *testing.T) {
	r := rand.New(rand.NewPCG(23, 17))
	forms := []func(a [4]byte) string{
		func(a [4]byte) string { return fmt.Sprintf("%d.%d.%d.%d", a[0], a[1], a[2], a[3]) },
		func(a [4]byte) string { return fmt.Sprintf("0%o.0%o.0%o.0%o", a[0], a[1], a[2], a[3]) },
		func(a [4]byte) string { return fmt.Sprintf("0x%x.0x%x.0x%x.0x%x", a[0], a[1], a[2], a[3]) },
		func(a [4]byte) string { return fmt.Sprintf("%d.%d.%d", a[0], a[1], int(a[2])<<8|int(a[3])) },
		func(a [4]byte) string { return fmt.Sprintf("%d.%d", a[0], int(a[1])<<16|int(a[2])<<8|int(a[3])) },
		func(a [4]byte) string {
			return fmt.Sprint(uint32(a[0])<<24 | uint32(a[1])<<16 | uint32(a[2])<<8 | uint32(a[3]))
		},
		func(a [4]byte) string {
			return fmt.Sprintf("0x%x", uint32(a[0])<<24|uint32(a[1])<<16|uint32(a[2])<<8|uint32(a[3]))
		},
		func(a [4]byte) string { return fmt.Sprintf("%d.%d.0x%x.0%o", a[0], a[1], a[2], a[3]) },
	}
	policy := Policy{ClusterDomain: "cluster.local", DNSPatterns: []string{"*.example.com", "{node}"}}
	for range 200 {
		var a [4]byte
		for i := range a {
			a[i] = byte(r.IntN(256))
		}
		for _, form := range forms {
			name := form(a)
			if !readsAsIPv4(name) {
				t.Fatalf("the oracle does not read %q as an address", name)
			}
			for _, node := range []string{name, "node-a"} {
				for _, cp := range []bool{false, true} {
					facts := Facts{ControlPlane: cp, Names: map[string]string{name: node}}
					if err := CheckDNSSAN(name, node, facts, policy); err == nil {
						t.Fatalf("node %q (control plane: %v) may carry %q, which reads as %d.%d.%d.%d", node, cp, name, a[0], a[1], a[2], a[3])
					}
				}
			}
		}
	}
	// Names with digits that no resolver reads as an address stay a
	// Node's own.
	for _, name := range []string{"10-0-0-5", "node-1", "123.example.com", "1a", "0xg1", "10.0.0.5a"} {
		if err := CheckDNSSAN(name, name, Facts{Names: map[string]string{name: name}}, policy); err != nil {
			t.Errorf("a Node named %q refused its own name: %v", name, err)
		}
	}
}

func FuzzReservedNames(f *testing.F) {
	f.Add("10.96.0.1", "10.96.0.1", false)
	f.Add("api.k8s.example.com", "api.k8s.example.com", false)
	f.Add("ip6-localhost", "node-a", false)
	f.Add("0x0a.0.1", "node-a", true)
	f.Add("api.example.com", "api.example.com", false)
	f.Add("CP-1", "cp-1", false)
	f.Add("vault.example.com", "vault.example.com", true)
	f.Fuzz(func(t *testing.T, name, node string, cp bool) {
		checkReservedInvariant(t, name, node, cp)
	})
}

// Invariant (class 2): no certificate ever carries a shared API-server
// address (in its certificate but no API server's own endpoint: a VIP, a
// load balancer), whoever asks, control-plane Nodes included; an endpoint
// only a control-plane Node. Property over random addresses and sets.
func TestNoSharedAPIServerAddress(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	networks := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("2001:db8::/32")}
	addr := func() netip.Addr {
		if rng.IntN(2) == 0 {
			return netip.AddrFrom4([4]byte{10, 0, byte(rng.IntN(4)), byte(1 + rng.IntN(8))})
		}
		var b [16]byte
		copy(b[:], netip.MustParseAddr("2001:db8::").AsSlice())
		b[15] = byte(1 + rng.IntN(8))
		return netip.AddrFrom16(b)
	}
	for i := range 2000 {
		var eps, cert []netip.Addr
		for range rng.IntN(4) {
			eps = append(eps, addr())
		}
		for range rng.IntN(5) {
			cert = append(cert, addr())
		}
		cert = append(cert, eps[:rng.IntN(len(eps)+1)]...) // Talos puts the endpoints in the certificate too
		for _, cp := range []bool{false, true} {
			reserved := APIServerAddresses(eps, cert, cp)
			for _, ip := range slices.Concat(eps, cert) {
				shared := slices.Contains(cert, ip) && !slices.Contains(eps, ip)
				endpoint := slices.Contains(eps, ip)
				err := Certifiable(ip, networks, reserved)
				switch {
				case shared && err == nil:
					t.Fatalf("case %d: shared API-server address %s certifiable (control plane %v; endpoints %v, certificate %v)", i, ip, cp, eps, cert)
				case endpoint && !cp && err == nil:
					t.Fatalf("case %d: API-server endpoint %s certifiable for a worker", i, ip)
				case endpoint && cp && err != nil:
					t.Fatalf("case %d: a control-plane Node refused endpoint %s: %v", i, ip, err)
				}
			}
		}
	}
	// IPv4-mapped spellings are the same address.
	mapped := netip.AddrFrom16(netip.MustParseAddr("10.0.7.200").As16())
	if err := Certifiable(mapped, networks, APIServerAddresses(nil, []netip.Addr{netip.MustParseAddr("10.0.7.200")}, true)); err == nil {
		t.Error(fmt.Sprintf("the VIP as %s is certifiable", mapped))
	}
}

// The reserved lists are compared whatever their case: an admin writes
// csr.reservedNames as it comes ("Vault.Example.COM"), and the API
// server's certificate names are its own. Before, only the configuration
// loader's side effect (CSRPolicy lower-casing the settings in place) made
// the admin's list match; a list given as written let the name through.
func TestReservedNamesWhateverTheirCase(t *testing.T) {
	facts := Facts{ReservedNames: []string{"Vault.Example.COM"}, APIServerNames: []string{"API.Example.com"}}
	for _, name := range []string{"vault.example.com", "VAULT.EXAMPLE.COM", "Vault.Example.COM", "api.example.com", "API.EXAMPLE.COM"} {
		if err := CheckDNSSAN(name, "node-a", facts, Policy{DNSPatterns: []string{"*.example.com"}}); err == nil {
			t.Errorf("%q was allowed, a reserved name in another case", name)
		}
	}
}
