package config

import (
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/talos-nodeinit/talos-nodeinit/pkg/contract"
	"github.com/talos-nodeinit/talos-nodeinit/pkg/ipam"
)

func defaults(t *testing.T) *Config {
	t.Helper()
	c, err := Parse(nil)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// Labels a node may request but must never be granted by default.
func TestLabelGrants(t *testing.T) {
	g := defaults(t).Grants
	// Even an allow list that names them grants neither control-plane
	// label: the coordinator trusts that label, so it never sets it.
	wide, err := Parse([]byte("grants: {labels: {allow: ['node-role.kubernetes.io/*']}}"))
	if err != nil {
		t.Fatal(err)
	}
	if ok, _ := wide.Grants.MayGrantLabel("node-role.kubernetes.io/control-plane", ""); ok {
		t.Error("an allow list granted node-role.kubernetes.io/control-plane")
	}
	for _, tc := range []struct {
		key, value string
		grant      bool
		reason     string
	}{
		// Roles attract workloads: none is granted unless listed.
		{"node-role.kubernetes.io/ingress", "", false, "not allowed"},
		{"node-role.kubernetes.io/web", "", false, "not allowed"},
		{"node-role.kubernetes.io/worker", "true", false, "not allowed"},
		{"node-role.kubernetes.io/", "", false, ""},
		{"node.cloudprovider.kubernetes.io/platform", "metal", false, "never granted"}, // the coordinator sets it from the metadata, never on request
		{"node-role.kubernetes.io/control-plane", "", false, "never granted"},
		{"node-role.kubernetes.io/master", "", false, "never granted"},
		{"node-restriction.kubernetes.io/x", "", false, "never granted"},
		{"example.node-restriction.kubernetes.io/x", "", false, "never granted"},
		{"kubernetes.io/hostname", "other", false, "not allowed"},
		{"node.kubernetes.io/exclude-from-external-load-balancers", "", false, "not allowed"},
		{"example.com/anything", "x", false, "not allowed"},
		{"node-role.kubernetes.io/web", "bad value!", false, "valid label"},
		{"node.cloudprovider.kubernetes.io/storage-class", "ssd", true, ""},
		{"bad key!", "", false, "name part"},
	} {
		ok, reason := g.MayGrantLabel(tc.key, tc.value)
		if ok != tc.grant || !strings.Contains(reason, tc.reason) {
			t.Errorf("MayGrantLabel(%q, %q) = %v %q, want %v containing %q", tc.key, tc.value, ok, reason, tc.grant, tc.reason)
		}
	}
}

func TestTaintGrants(t *testing.T) {
	g := defaults(t).Grants
	for _, tc := range []struct {
		taint contract.Taint
		grant bool
	}{
		{contract.Taint{Key: "dedicated", Value: "web", Effect: corev1.TaintEffectNoSchedule}, true},
		{contract.Taint{Key: "example.com/gpu", Effect: corev1.TaintEffectNoExecute}, true},
		{contract.Taint{Key: contract.TaintUninitialized, Effect: corev1.TaintEffectNoSchedule}, false},
		{contract.Taint{Key: "node.kubernetes.io/not-ready", Effect: corev1.TaintEffectNoExecute}, false},
		{contract.Taint{Key: "node-role.kubernetes.io/control-plane", Effect: corev1.TaintEffectNoSchedule}, false},
		{contract.Taint{Key: "dedicated", Effect: "Sometimes"}, false},
	} {
		if ok, reason := g.MayGrantTaint(tc.taint); ok != tc.grant || (!ok && reason == "") {
			t.Errorf("MayGrantTaint(%+v) = %v %q, want %v with a reason when refused", tc.taint, ok, reason, tc.grant)
		}
	}
}

func TestParse(t *testing.T) {
	c := defaults(t)
	if !c.IPAMEnabled() || !c.AttestationRequired() || c.CSR.OnTimeout != StayPending || c.CSR.AttestationTimeout.Duration != 2*time.Minute || c.CSR.MaxDuration.Duration != 8760*time.Hour {
		t.Errorf("defaults: %+v", c)
	}
	c, err := Parse([]byte(`
clusterName: prod
ipam:
  ipv4Pool: 10.10.0.0/16
  ipv4MaskSize: 25
  ipv6Pool: fd00:10::/64
  serviceCIDRs: [10.96.0.0/12, "fd00:10:96::/112"]
grants:
  labels: {allow: ["example.com/*"]}
csr:
  attestationTimeout: 30s
  onTimeout: approve
  maxDuration: 720h
  allowedDNSNames: ["{node}.nodes.example.com"]
nodeNetworks: [10.0.0.0/8]
`))
	if err != nil {
		t.Fatal(err)
	}
	if ok, _ := c.Grants.MayGrantLabel("example.com/x", "y"); !ok {
		t.Error("configured allow list ignored")
	}
	if ok, _ := c.Grants.MayGrantLabel("node-role.kubernetes.io/web", ""); ok {
		t.Error("a configured allow list replaces the default one")
	}
	if p := c.CSRPolicy(); p.MaxDuration != 720*time.Hour || len(p.NodeNetworks) != 1 || len(p.DNSPatterns) != 1 || p.ClusterDomain != "cluster.local" {
		t.Errorf("csr policy %+v", p)
	}
	if _, err := c.Allocator(); err != nil {
		t.Error(err)
	}

	for _, bad := range []struct{ doc, want string }{
		{"ipam: {ipv4Pool: nonsense}", "ipv4Pool"},
		{"ipam: {ipv4Pool: 'fd00::/64'}", "not IPv4"},
		{"ipam: {ipv4Pool: 10.0.0.0/16, ipv4MaskSize: 8}", "ipam"},
		{"csr: {onTimeout: maybe}", "onTimeout"},
		{"csr: {attestationTimeout: soon}", "soon"},
		{"csr: {allowedIPRanges: [10.0.0.0/8]}", "replaced by the top-level nodeNetworks"},
		{"nodeNetworks: [x]", "nodeNetworks"},
		{"nodeNetworks: [10.0.0.1/8]", "host bits"},
		{"csr: {allowedDNSNames: ['*.com']}", "allowedDNSNames"},
		{"csr: {allowedDNSNames: ['{node}.svc']}", ".svc"},
		{"csr: {allowedDNSNames: ['kubernetes.{node}.example.com']}", "API server"},
		{"csr: {renewals: never}", "renewals"},
		{"csr: {maxPending: -1}", "maxPending"},
		{"maxNodeAddresses: 1000", "maxNodeAddresses"},
		{"clusterDomain: 'bad domain'", "clusterDomain"},
		{"grants: {labels: {allow: ['a*b']}}", "trailing"},
		{"ipma: {}", "ipma"},
	} {
		if _, err := Parse([]byte(bad.doc)); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("Parse(%q) = %v, want an error naming %q", bad.doc, err, bad.want)
		}
	}
}

// Pools may not overlap each other or a service CIDR: the error names both.
func TestIPAMOverlaps(t *testing.T) {
	for _, tc := range []struct{ doc, want string }{
		{"ipam: {ipv4Pool: 10.96.0.0/16}", "ipam: ipv4Pool 10.96.0.0/16 overlaps serviceCIDRs 10.96.0.0/12"},
		{"ipam: {ipv4Pool: 10.0.0.0/8, serviceCIDRs: [10.96.0.0/16]}", "ipam: ipv4Pool 10.0.0.0/8 overlaps serviceCIDRs 10.96.0.0/16"},
		{"ipam: {ipv6Pool: 'fd00:10::/64', serviceCIDRs: [10.96.0.0/12, 'fd00:10::/112']}", "ipam: ipv6Pool fd00:10::/64 overlaps serviceCIDRs fd00:10::/112"},
		{"ipam: {ipv6Pool: 'fc00:db8:20::/64'}", "ipam: ipv6Pool fc00:db8:20::/64 overlaps serviceCIDRs fc00:db8:20::/112 (Talos's default"},
	} {
		if _, err := Parse([]byte(tc.doc)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Parse(%q) = %v, want an error containing %q", tc.doc, err, tc.want)
		}
	}
	if _, err := Parse([]byte("ipam: {ipv4Pool: 10.244.0.0/16, ipv6Pool: 'fd00:10:244::/64', serviceCIDRs: [10.96.0.0/12, 'fd00:10:96::/112']}")); err != nil {
		t.Errorf("disjoint pools and service CIDRs refused: %v", err)
	}
}

// With IPv6 on and no IPv6 service CIDR listed, Talos's default IPv6
// service subnet is never given to a node.
func TestIPv6ServiceCIDRDefault(t *testing.T) {
	for _, doc := range []string{
		"ipam: {ipv6Pool: 'fd00:10:244::/64'}",
		"ipam: {ipv4Pool: 10.244.0.0/16, ipv6Pool: 'fd00:10:244::/64', serviceCIDRs: [10.96.0.0/12]}",
	} {
		c, err := Parse([]byte(doc))
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Contains(c.IPAM.ServiceCIDRs, "fc00:db8:20::/112") {
			t.Errorf("%s: serviceCIDRs %v, want Talos's default IPv6 service subnet fc00:db8:20::/112 among them", doc, c.IPAM.ServiceCIDRs)
		}
		a, err := c.Allocator()
		if err != nil {
			t.Fatal(err)
		}
		got, err := a.Allocate("n", ipam.Request{IPv6: true, IPv6Prefix: netip.MustParsePrefix("fc00:db8:20::/64"), IPv6Addr: netip.MustParseAddr("fc00:db8:20:0:ffff::1")})
		if err != nil || got[0].Overlaps(netip.MustParsePrefix("fc00:db8:20::/112")) {
			t.Errorf("%s: a node whose prefix holds the default service subnet got %v %v", doc, got, err)
		}
	}
	// An explicit IPv4 list gets no IPv4 default added; an IPv4-only
	// configuration no IPv6 one.
	c, err := Parse([]byte("ipam: {ipv4Pool: 10.96.0.0/16, serviceCIDRs: [10.100.0.0/16]}"))
	if err != nil || !slices.Equal(c.IPAM.ServiceCIDRs, []string{"10.100.0.0/16"}) {
		t.Errorf("explicit IPv4 service CIDR: %v %v", c, err)
	}
}

// ipam.families: the default follows the pools; IPv4 without a pool gets
// the default pool, IPv6 without one comes from nodes' own prefixes only;
// a family that is off is never allocated.
func TestFamilies(t *testing.T) {
	for _, tc := range []struct {
		doc          string
		v4, v6       bool
		pool4, pool6 string
	}{
		{"", true, false, "10.244.0.0/16", ""},
		{"ipam: {ipv4Pool: 10.10.0.0/16}", true, false, "10.10.0.0/16", ""},
		{"ipam: {ipv6Pool: 'fd00:10:244::/64'}", false, true, "", "fd00:10:244::/64"},
		{"ipam: {ipv4Pool: 10.10.0.0/16, ipv6Pool: 'fd00:10:244::/64'}", true, true, "10.10.0.0/16", "fd00:10:244::/64"},
		{"ipam: {families: [ipv4, ipv6]}", true, true, "10.244.0.0/16", ""},
		{"ipam: {families: [ipv6]}", false, true, "", ""},
		{"ipam: {families: [ipv6, ipv4], ipv6Pool: 'fd00:10:244::/64'}", true, true, "10.244.0.0/16", "fd00:10:244::/64"},
	} {
		c, err := Parse([]byte(tc.doc))
		if err != nil {
			t.Errorf("Parse(%q): %v", tc.doc, err)
			continue
		}
		if v4, v6 := c.Families(); v4 != tc.v4 || v6 != tc.v6 || c.IPAM.IPv4Pool != tc.pool4 || c.IPAM.IPv6Pool != tc.pool6 {
			t.Errorf("Parse(%q): families IPv4 %t IPv6 %t, pools %q %q; want %t %t, %q %q", tc.doc, v4, v6, c.IPAM.IPv4Pool, c.IPAM.IPv6Pool, tc.v4, tc.v6, tc.pool4, tc.pool6)
		}
	}

	withPrefix := ipam.Request{IPv4: true, IPv6: true, IPv6Prefix: netip.MustParsePrefix("2001:db8:1:2::/64"), IPv6Addr: netip.MustParseAddr("2001:db8:1:2::5")}
	for _, tc := range []struct {
		doc  string
		req  ipam.Request
		want int // CIDRs given
		err  string
	}{
		{"", withPrefix, 1, ""}, // IPv4 only: a node's prefix gives no IPv6 CIDR
		{"ipam: {families: [ipv4, ipv6]}", withPrefix, 2, ""},
		{"ipam: {families: [ipv4, ipv6]}", ipam.Request{IPv4: true}, 1, ""},
		{"ipam: {families: [ipv6]}", withPrefix, 1, ""},
		{"ipam: {families: [ipv6]}", ipam.Request{}, 0, "no IPv6 pool"},
	} {
		c, err := Parse([]byte(tc.doc))
		if err != nil {
			t.Fatal(err)
		}
		a, err := c.Allocator()
		if err != nil {
			t.Fatal(err)
		}
		got, err := a.Allocate("n", tc.req)
		if len(got) != tc.want || (err == nil) != (tc.err == "") || (err != nil && !strings.Contains(err.Error(), tc.err)) {
			t.Errorf("%q: %+v got %v %v; want %d CIDRs, error %q", tc.doc, tc.req, got, err, tc.want, tc.err)
		}
		if v4, v6 := c.Families(); len(got) > 0 && (got[0].Addr().Is4() && !v4 || got[len(got)-1].Addr().Is6() && !v6) {
			t.Errorf("%q: got %v outside the families", tc.doc, got)
		}
	}

	for _, bad := range []struct{ doc, want string }{
		{"ipam: {families: [ipv5]}", `ipam: families: "ipv5"`},
		{"ipam: {families: []}", "ipam: families is empty"},
		{"ipam: {families: [ipv4, ipv4]}", "ipam: families lists ipv4 twice"},
		{"ipam: {families: [ipv4], ipv6Pool: 'fd00::/64'}", "ipam: ipv6Pool is set but ipv6 is not in families"},
		{"ipam: {families: [ipv6], ipv4Pool: 10.0.0.0/16}", "ipam: ipv4Pool is set but ipv4 is not in families"},
	} {
		if _, err := Parse([]byte(bad.doc)); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("Parse(%q) = %v, want an error containing %q", bad.doc, err, bad.want)
		}
	}
}

// CSRPolicy reads the configuration and changes nothing in it: before, it
// lower-cased csr.reservedNames in place, a side effect the CSR path
// depended on (pkg/csrcheck now compares without case).
func TestCSRPolicyLeavesTheConfigurationAlone(t *testing.T) {
	c, err := Parse([]byte("csr:\n  reservedNames: [Vault.Example.COM]\n"))
	if err != nil {
		t.Fatal(err)
	}
	c.CSRPolicy()
	if got := c.CSR.ReservedNames; len(got) != 1 || got[0] != "Vault.Example.COM" {
		t.Errorf("csr.reservedNames after CSRPolicy: %q, want it as written", got)
	}
}

// A misspelt key inside a list item is refused like any other: an inventory
// binding whose "networks" is misspelt would bind nothing, and the admin's
// protection would silently be absent.
func TestUnknownKeyInsideAListItem(t *testing.T) {
	_, err := Parse([]byte(`
nodeNetworks: [10.0.0.0/8]
inventory:
- nodes: [web-1]
  networks: [10.1.0.0/16]
- nodes: [web-2]
  network: [10.2.0.0/16]
`))
	if err == nil || !strings.Contains(err.Error(), "inventory[1].network") || !strings.Contains(err.Error(), "networks") {
		t.Fatalf("Parse = %v, want the misspelt inventory[1].network refused, naming networks", err)
	}
}

// TestCertificateDuration: how long a certificate approved for a request
// may be valid, for the record (the renewal rule and the names' owner
// last as long). A request that sets no expirationSeconds, as the kubelet
// does, gets the signer's duration (kube-controller-manager's
// --cluster-signing-duration), whatever csr.maxDuration caps.
func TestCertificateDuration(t *testing.T) {
	secs := func(d time.Duration) *int32 { s := int32(d / time.Second); return &s }
	for _, c := range []struct {
		config string
		asked  *int32
		want   time.Duration
	}{
		{"", nil, 365 * 24 * time.Hour},
		{"csr: {maxDuration: 720h}\n", nil, 365 * 24 * time.Hour},
		{"csr: {maxDuration: 720h, signerDuration: 87600h}\n", nil, 87600 * time.Hour},
		{"csr: {maxDuration: 720h}\n", secs(time.Hour), time.Hour},
		{"", secs(48 * time.Hour), 48 * time.Hour},
		{"csr: {maxDuration: 87600h}\n", secs(20000 * time.Hour), 365 * 24 * time.Hour}, // the signer caps what is asked
	} {
		cfg, err := Parse([]byte(c.config))
		if err != nil {
			t.Fatalf("%q: %v", c.config, err)
		}
		if got := cfg.CertificateDuration(c.asked); got != c.want {
			t.Errorf("%q, expirationSeconds %v: %v, want %v", c.config, c.asked, got, c.want)
		}
	}
}

// ipam.firstClaimPrefixes is checked like ipam.sharedPrefixes: IPv6
// prefixes only, each error at its entry.
func TestFirstClaimPrefixes(t *testing.T) {
	if _, err := Parse([]byte("ipam: {firstClaimPrefixes: ['2001:db8::/32']}\n")); err != nil {
		t.Fatalf("a valid list: %v", err)
	}
	for in, want := range map[string]string{
		"ipam: {firstClaimPrefixes: ['10.0.0.0/8']}\n": "ipam.firstClaimPrefixes[0]",
		"ipam: {firstClaimPrefixes: ['nonsense']}\n":   "ipam.firstClaimPrefixes",
	} {
		if _, err := Parse([]byte(in)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want an error naming %s", in, err, want)
		}
	}
}

// From a review: two "{node}" patterns that derive one name from two node
// names, and an IPv4-mapped inventory range that matches no address, are
// refused at start.
func TestPatternsAndRangesThatCannotHold(t *testing.T) {
	for in, want := range map[string]string{
		"csr: {allowedDNSNames: ['{node}.nodes.example.com', '{node}.example.com']}\n": "can derive one name for two Nodes",
		"inventory: [{nodes: [a], networks: ['::ffff:10.0.0.0/120']}]\n":               "IPv4-mapped",
	} {
		if _, err := Parse([]byte(in)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want %q", in, err, want)
		}
	}
	if _, err := Parse([]byte("csr: {allowedDNSNames: ['{node}.nodes.example.com', '{node}.pods.example.org', '*.lb.example.com']}\n")); err != nil {
		t.Errorf("patterns that never meet: %v", err)
	}
}

// A configuration with a problem gives no Config: what reads one (CSRPolicy, Networks, the
// allocator) relies on validation and checks nothing again.
func TestParseGivesNoConfigWithErrors(t *testing.T) {
	for _, doc := range []string{
		"nodeNetworks: [10.0.0.1/8]\n",
		"clusterDomain: -bad-\n",
		"ipam: {ipv4Pool: 2001:db8::/64}\n",
		"csr: {allowedDNSNames: [\"{node}.svc\"]}\n",
		"nmae: x\n",
	} {
		c, err := Parse([]byte(doc))
		if err == nil || c != nil {
			t.Errorf("Parse(%q) = %v, %v; want no Config and an error", doc, c, err)
		}
	}
}
