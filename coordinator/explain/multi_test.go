package explain

import (
	"bytes"
	"encoding/json"
	"net/netip"
	"os"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/talos-nodeinit/talos-nodeinit/coordinator/config"
	"github.com/talos-nodeinit/talos-nodeinit/pkg/contract"
	"github.com/talos-nodeinit/talos-nodeinit/pkg/desired"
	"github.com/talos-nodeinit/talos-nodeinit/pkg/facts"
	"github.com/talos-nodeinit/talos-nodeinit/pkg/rules"
)

// TestReadSeveralNodes: `talosctl -n a,b get platformmetadata -o yaml`
// prints one document per node; each becomes a node of its own.
func TestReadSeveralNodes(t *testing.T) {
	data, err := os.ReadFile("testdata/platformmetadata-multi.yaml")
	if err != nil {
		t.Fatal(err)
	}
	nodes, err := ReadNodes(data)
	if err != nil {
		t.Fatal(err)
	}
	if len(nodes) != 2 || nodes[0].Node != "172.20.0.2" || nodes[0].Metadata.Hostname != "web-www" || nodes[1].Node != "172.20.0.3" || nodes[1].Metadata.Platform != "nocloud" {
		t.Fatalf("nodes %+v", nodes)
	}
	// A document without a platform is refused with its number.
	if _, err := ReadNodes(append(data, []byte("---\nspec:\n  hostname: x\n")...)); err == nil || !strings.Contains(err.Error(), "document 3") {
		t.Fatalf("a document without a platform: %v", err)
	}
}

func coordinatorConfig(t *testing.T) *config.Config {
	t.Helper()
	data, err := os.ReadFile("testdata/coordinator.yaml")
	if err != nil {
		t.Fatal(err)
	}
	c, err := config.Parse(data)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestAddressesPrefixesAndCoordinator: explain shows status.addresses, the
// prefixes reported for IPv6 pod CIDRs, and, given the coordinator's
// configuration, what the coordinator would add: its own labels, the
// requests it grants and refuses, and the pod CIDR families.
func TestAddressesPrefixesAndCoordinator(t *testing.T) {
	rs := ccmRules(t)
	out := Explain(Input{
		Rules:    rs,
		Metadata: facts.Platform{Platform: "metal", Hostname: "web-www", Spot: true},
		Addresses: []netip.Prefix{netip.MustParsePrefix("172.20.0.2/24"), netip.MustParsePrefix("2001:db8:1:2::10/64"),
			netip.MustParsePrefix("203.0.113.7/24")},
		Coordinator: coordinatorConfig(t),
	})
	wantAddrs := []corev1.NodeAddress{{Type: "InternalIP", Address: "172.20.0.2"}, {Type: "ExternalIP", Address: "203.0.113.7"},
		{Type: "ExternalIP", Address: "2001:db8:1:2::10"}, {Type: "Hostname", Address: "web-www"}}
	if !slices.Equal(out.Addresses, wantAddrs) {
		t.Errorf("addresses %v, want %v", out.Addresses, wantAddrs)
	}
	if !slices.Equal(out.Prefixes, []string{"2001:db8:1:2::/64"}) {
		t.Errorf("prefixes %v", out.Prefixes)
	}
	c := out.Coordinator
	if c == nil {
		t.Fatal("no coordinator section")
	}
	wantLabels := map[string]string{contract.LabelPlatform: "metal", contract.LabelLifecycle: "spot", contract.LabelClusterName: "prod", "node-role.kubernetes.io/web": ""}
	if len(c.Labels) != len(wantLabels) {
		t.Errorf("coordinator labels %v, want %v", c.Labels, wantLabels)
	}
	for k, v := range wantLabels {
		if got, ok := c.Labels[k]; !ok || got != v {
			t.Errorf("coordinator label %s = %q (%v), want %q", k, got, ok, v)
		}
	}
	if !slices.Equal(c.PodCIDRs, []string{"ipv4: a /24 from the pool 10.244.0.0/16", "ipv6: a /80 from the node's prefix 2001:db8:1:2::/64"}) {
		t.Errorf("pod CIDRs %q", c.PodCIDRs)
	}
	if c.RemovesTaint != contract.TaintUninitialized || len(c.Waiting) != 0 {
		t.Errorf("removes taint %q, waiting for %q", c.RemovesTaint, c.Waiting)
	}
	// The public address is not recorded as the Node's: it lies in no
	// node network (the coordinator's claim policy, records.NextClaims).
	if !slices.ContainsFunc(c.Refused, func(s string) bool { return strings.Contains(s, "203.0.113.7") }) {
		t.Errorf("refused %q, want 203.0.113.7 outside nodeNetworks", c.Refused)
	}

	// A taint the policy does not allow is shown as refused, with the reason.
	out = Explain(Input{
		Rules:       mustRules(t, "transformations:\n- taints: {dedicated: 'web:NoSchedule', example.com/gpu: NoSchedule}\n"),
		Metadata:    facts.Platform{Platform: "metal", Hostname: "n1"},
		Coordinator: coordinatorConfig(t),
	})
	if !slices.Equal(out.Coordinator.Taints, []contract.Taint{{Key: "example.com/gpu", Effect: "NoSchedule"}}) ||
		!slices.ContainsFunc(out.Coordinator.Refused, func(s string) bool { return strings.Contains(s, "taint dedicated is not allowed by the grant policy") }) {
		t.Errorf("taints %v refused %v", out.Coordinator.Taints, out.Coordinator.Refused)
	}
	if !slices.Equal(out.Coordinator.PodCIDRs, []string{"ipv4: a /24 from the pool 10.244.0.0/16", "ipv6: none: no global IPv6 prefix inside nodeNetworks holding one of the node's addresses, and no ipv6Pool"}) {
		t.Errorf("pod CIDRs without a prefix %q", out.Coordinator.PodCIDRs)
	}
}

// TestCoordinatorDecides: the coordinator section is the coordinator's
// own decision (nodestate.Decide), not a restatement of it: a node prefix
// no inventory binding and no firstClaimPrefixes network gives the Node
// is never carved, and initialization waits for what requireProviderID
// asks, removing no taint and allocating nothing meanwhile.
func TestCoordinatorDecides(t *testing.T) {
	in := Input{
		Rules:     ccmRules(t),
		Metadata:  facts.Platform{Platform: "metal", Hostname: "web-www"},
		Addresses: []netip.Prefix{netip.MustParsePrefix("172.20.0.2/24"), netip.MustParsePrefix("2001:db8:1:2::10/64")},
	}
	cc := coordinatorConfig(t)
	cc.IPAM.FirstClaimPrefixes = nil
	in.Coordinator = cc
	c := Explain(in).Coordinator
	if len(c.PodCIDRs) != 2 || c.PodCIDRs[0] != "ipv4: a /24 from the pool 10.244.0.0/16" ||
		!strings.HasPrefix(c.PodCIDRs[1], "ipv6: none: node prefix 2001:db8:1:2::/64 is bound to no Node in the coordinator's inventory") {
		t.Errorf("pod CIDRs without firstClaimPrefixes: %q", c.PodCIDRs)
	}

	cc = coordinatorConfig(t)
	cc.RequireProviderID = true
	in.Coordinator = cc
	c = Explain(in).Coordinator
	if !slices.Equal(c.Waiting, []string{"spec.providerID"}) || c.RemovesTaint != "" || len(c.Labels) != 0 ||
		!slices.Equal(c.PodCIDRs, []string{"ipv4: none yet: initialization waits", "ipv6: none yet: initialization waits"}) {
		t.Errorf("with requireProviderID and no providerID: %+v", c)
	}
	var buf bytes.Buffer
	if err := (Output{Coordinator: c}).Write(&buf, "table"); err != nil || !strings.Contains(buf.String(), "waiting for") || strings.Contains(buf.String(), "taint removed") {
		t.Errorf("table while waiting (%v):\n%s", err, buf.String())
	}
	// With the fallback policy the agent asks for one: the coordinator sets it.
	in.Policy = desired.ProviderIDTalosFallback
	if c = Explain(in).Coordinator; len(c.Waiting) != 0 || c.RemovesTaint != contract.TaintUninitialized {
		t.Errorf("with requireProviderID and a providerID asked for: %+v", c)
	}
}

// TestSeveralNodesOutput: one section per node in a table; a JSON list.
func TestSeveralNodesOutput(t *testing.T) {
	outs := Outputs{
		Explain(Input{Rules: ccmRules(t), Metadata: facts.Platform{Platform: "metal", Hostname: "web-www"}, Node: "172.20.0.2"}),
		Explain(Input{Rules: ccmRules(t), Metadata: facts.Platform{Platform: "nocloud", Hostname: "pve-1", Zone: "rack 1"}, Node: "172.20.0.3"}),
	}
	var buf bytes.Buffer
	if err := outs.Write(&buf, "table"); err != nil {
		t.Fatal(err)
	}
	table := buf.String()
	i, j := strings.Index(table, "node 172.20.0.2 (web-www)"), strings.Index(table, "node 172.20.0.3 (pve-1)")
	if i < 0 || j < i || !strings.Contains(table[j:], "error") {
		t.Errorf("table:\n%s", table)
	}
	if !outs.HasErrors() || outs[:1].HasErrors() {
		t.Error("HasErrors")
	}
	buf.Reset()
	if err := outs.Write(&buf, "json"); err != nil {
		t.Fatal(err)
	}
	var list []map[string]any
	if err := json.Unmarshal(buf.Bytes(), &list); err != nil || len(list) != 2 || list[1]["node"] != "172.20.0.3" {
		t.Errorf("json %s (%v)", buf.String(), err)
	}
}

func mustRules(t *testing.T, doc string) *rules.Rules {
	t.Helper()
	r, err := rules.Load([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	return r
}
