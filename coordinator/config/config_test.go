package config

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/talos-nodeinit/talos-nodeinit/pkg/contract"
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
		{"node-role.kubernetes.io/web", "", true, ""},
		{"node-role.kubernetes.io/worker", "true", true, ""},
		{"node.cloudprovider.kubernetes.io/platform", "metal", true, ""},
		{"node-role.kubernetes.io/control-plane", "", false, "never granted"},
		{"node-role.kubernetes.io/master", "", false, "never granted"},
		{"node-restriction.kubernetes.io/x", "", false, "never granted"},
		{"example.node-restriction.kubernetes.io/x", "", false, "never granted"},
		{"kubernetes.io/hostname", "other", false, "not allowed"},
		{"node.kubernetes.io/exclude-from-external-load-balancers", "", false, "not allowed"},
		{"example.com/anything", "x", false, "not allowed"},
		{"node-role.kubernetes.io/web", "bad value!", false, "valid label"},
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
	if p, err := c.CSRPolicy(); err != nil || p.MaxDuration != 720*time.Hour || len(p.NodeNetworks) != 1 || len(p.DNSPatterns) != 1 || p.ClusterDomain != "cluster.local" {
		t.Errorf("csr policy %+v %v", p, err)
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
