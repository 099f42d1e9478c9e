package talosccm

import (
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/siderolabs/talos/pkg/machinery/config/configloader"
	"github.com/siderolabs/talos/pkg/machinery/config/configpatcher"

	"github.com/talos-nodeinit/talos-nodeinit/coordinator/config"
	"github.com/talos-nodeinit/talos-nodeinit/pkg/contract"
	"github.com/talos-nodeinit/talos-nodeinit/pkg/facts"
	"github.com/talos-nodeinit/talos-nodeinit/pkg/rules"
	"github.com/talos-nodeinit/talos-nodeinit/pkg/rulesource"
)

type runtimeMode struct{}

func (runtimeMode) String() string        { return "metal" }
func (runtimeMode) RequiresInstall() bool { return false }
func (runtimeMode) InContainer() bool     { return false }

// TestConvertPublishedExamples migrates Talos CCM's own configurations. The
// agent patch must be a valid Talos config document (Talos's own loader and
// validator) carrying rules the agent loads; the coordinator fragment must
// be a valid coordinator configuration; every dropped option is a note at
// its line.
func TestConvertPublishedExamples(t *testing.T) {
	cases := []struct {
		file      string
		rules     []string
		notes     []string // substrings, each in some note
		clusterID string   // clusterName in the fragment
		preferV6  *bool
	}{
		{"../rules/testdata/talos-ccm/hack-ccm-config.yaml", []string{"transformations[0] (web)", "transformations[1] (nocloud)"},
			[]string{"took the cluster name from Talos", "betaTopologyLabels: true added",
				"taint node.cloudprovider.kubernetes.io/storage-type: taint node.cloudprovider.kubernetes.io/storage-type is denied by the grant policy"}, "", nil},
		{"../rules/testdata/talos-ccm/config-md-quoted.yaml", []string{"transformations[0] (nocloud-nodes)", "transformations[1] (web-nodes)"},
			[]string{"line 6: global.PreferIPv6 dropped", "line 71: features.publicIPDiscovery dropped", "line 60: platformMetadata overrides are now also seen by later rules"}, "", nil},
		{"../rules/testdata/talos-ccm/chart-values-example.yaml", []string{"transformations[0] (web)", "transformations[1] (worker)", "transformations[2] (db)"}, nil, "", nil},
		{"../rulesource/testdata/talos-ccm-configmap.yaml", []string{"transformations[0] (web)"}, []string{"line 10: global.preferIPv6: true kept"}, "", ptr(true)},
		{"../rulesource/testdata/talos-ccm-deploy-configmap.yaml", nil, nil, "", nil},
		{"../rules/testdata/talos-ccm/chart-values-example-helm.yaml", []string{"transformations[0] (web)", "transformations[1] (worker)", "transformations[2] (db)"},
			[]string{"line 22: --node-cidr-mask-size-ipv6=80 becomes ipam.ipv6MaskSize", "Talos CCM took IPv4 pod CIDRs from --cluster-cidr",
				"Helm values image, logVerbosityLevel, daemonSet, tolerations are Talos CCM's Deployment settings"}, "", nil},
		{"testdata/helm-values-no-ipam.yaml", []string{"transformations[0] (workers)"}, []string{"enabledControllers has no node-ipam-controller: the coordinator's ipam is off too"}, "", nil},
		{"testdata/clustername.yaml", []string{"transformations[0] (cp)"}, []string{`line 4: global.clusterName "prod" moved`, "line 12: platformMetadata.hostname dropped",
			"label node-role.kubernetes.io/control-plane: node-role.kubernetes.io/control-plane marks control-plane Nodes, which the coordinator trusts; never granted"}, "prod", nil},
	}
	for _, c := range cases {
		t.Run(c.file, func(t *testing.T) {
			data, err := os.ReadFile(c.file)
			if err != nil {
				t.Fatal(err)
			}
			res, err := Convert(c.file, data)
			if err != nil {
				t.Fatalf("convert:\n%v", err)
			}
			// Talos accepts the patch as it is.
			cfg, err := configloader.NewFromBytes(res.AgentPatch)
			if err != nil {
				t.Fatalf("Talos refuses the agent patch: %v\n%s", err, res.AgentPatch)
			}
			if _, err := cfg.Validate(runtimeMode{}); err != nil {
				t.Fatalf("Talos's validator: %v", err)
			}
			if _, err := configpatcher.LoadPatch(res.AgentPatch); err != nil {
				t.Fatalf("not a machine-config patch: %v", err)
			}
			// The agent loads the rules it carries.
			rs, src, err := rulesource.Load(res.AgentPatch)
			if err != nil {
				t.Fatalf("the agent refuses the migrated rules:\n%v\n%s", err, res.AgentPatch)
			}
			if src.Kind != rulesource.KindExtensionServiceConfig || !slices.Equal(rs.Names(), c.rules) {
				t.Errorf("%s with rules %q, want %q", src.Kind, rs.Names(), c.rules)
			}
			if !rs.Global().BetaTopologyLabels {
				t.Error("betaTopologyLabels is not on")
			}
			if got := rs.Global().PreferIPv6; (got == nil) != (c.preferV6 == nil) || (got != nil && *got != *c.preferV6) {
				t.Errorf("preferIPv6 %v, want %v", got, c.preferV6)
			}
			// The coordinator loads its fragment.
			cc, err := config.Parse(res.Coordinator)
			if err != nil {
				t.Fatalf("the coordinator refuses its fragment: %v\n%s", err, res.Coordinator)
			}
			if cc.ClusterName != c.clusterID || !cc.AdoptExisting {
				t.Errorf("fragment clusterName %q adoptExisting %v", cc.ClusterName, cc.AdoptExisting)
			}
			var notes []string
			for _, n := range res.Notes {
				notes = append(notes, n.String())
			}
			for _, want := range c.notes {
				if !slices.ContainsFunc(notes, func(n string) bool { return strings.Contains(n, want) }) {
					t.Errorf("no note %q in:\n%s", want, strings.Join(notes, "\n"))
				}
				if !strings.Contains(string(res.AgentPatch), want) {
					t.Errorf("the patch's comments lack %q", want)
				}
			}
		})
	}
}

func ptr[T any](v T) *T { return &v }

// TestConvertKeepsMeaning: the migrated rules do what Talos CCM did with the
// same configuration on the same node: same labels, the requested ones
// granted by the fragment's policy.
func TestConvertKeepsMeaning(t *testing.T) {
	data, err := os.ReadFile("../rules/testdata/talos-ccm/hack-ccm-config.yaml")
	if err != nil {
		t.Fatal(err)
	}
	res, err := Convert("ccm.yaml", data)
	if err != nil {
		t.Fatal(err)
	}
	rs, _, err := rulesource.Load(res.AgentPatch)
	if err != nil {
		t.Fatal(err)
	}
	got := rs.Evaluate(rules.Facts{
		Metadata: facts.Platform{Platform: "nocloud", Hostname: "web-1", InstanceID: "42"},
		System:   facts.System{SKUNumber: "cx22", SerialNumber: "h=web;i=1001"},
	})
	if got.Annotations["talos.dev/instance-id"] != "id-42" || got.Metadata.InstanceType != "cx22" || got.Metadata.ProviderID != "proxmox://region-1/1001" {
		t.Errorf("evaluated to %+v", got)
	}
	if _, ok := got.RequestedLabels["node-role.kubernetes.io/web"]; !ok {
		t.Fatalf("node-role.kubernetes.io/web not requested: %v", got.RequestedLabels)
	}
	cc, err := config.Parse(res.Coordinator)
	if err != nil {
		t.Fatal(err)
	}
	if ok, why := cc.Grants.MayGrantLabel("node-role.kubernetes.io/web", ""); !ok {
		t.Errorf("the fragment's policy refuses node-role.kubernetes.io/web: %s", why)
	}
	// The roles the rules set, and no other: a role attracts workloads.
	if !slices.Contains(cc.Grants.Labels.Allow, "node-role.kubernetes.io/web") {
		t.Errorf("the fragment does not list the role the rules set: %v", cc.Grants.Labels.Allow)
	}
	for _, role := range []string{"node-role.kubernetes.io/ingress", "node-role.kubernetes.io/db", "node-role.kubernetes.io/webx"} {
		if ok, _ := cc.Grants.MayGrantLabel(role, ""); ok {
			t.Errorf("the fragment's policy grants %s, which no rule sets", role)
		}
	}
	if ok, _ := cc.Grants.MayGrantTaint(contract.Taint{Key: "node.cloudprovider.kubernetes.io/storage-type", Effect: "NoSchedule"}); ok {
		t.Error("the fragment widened the taint policy silently")
	}
}

// TestConvertRefuses: what needs a person is refused at its line, in the
// file given; options that did nothing in Talos CCM are not among them.
func TestConvertRefuses(t *testing.T) {
	cases := []struct{ file, want, notWant string }{
		{"../rules/testdata/talos-ccm/rules-yaml.yaml", `line 31, column 9: transformations[0] (oracle): labels[talos.dev/zone"]: invalid label key`, "publicIPPredict"},
		{"../rules/testdata/talos-ccm/config-md.yaml", "line 49, column 56: invalid YAML", ""},
		{"../../extension/patches/rules.yaml", "already nodeinit-agent configuration", ""},
		{"testdata/ccm-configmap-broken.yaml", "line 11, column 17: transformations[0]: nodeSelector[0].matchExpressions[0] (key \"hostname\"): operator is missing; add operator: one of In,", ""},
		{"testdata/ccm-configmap-broken.yaml", "line 12, column 17: transformations[0]: nodeSelector[0].matchExpressions[1] (key \"hostnme\"): key \"hostnme\" is not a known fact", ""},
	}
	for _, c := range cases {
		t.Run(c.file, func(t *testing.T) {
			data, err := os.ReadFile(c.file)
			if err != nil {
				t.Fatal(err)
			}
			_, err = Convert(c.file, data)
			if err == nil {
				t.Fatal("converted")
			}
			if !strings.Contains(err.Error(), c.want) || (c.notWant != "" && strings.Contains(err.Error(), c.notWant)) {
				t.Fatalf("error\n%v\nwant %q, not %q", err, c.want, c.notWant)
			}
		})
	}
}

// TestConvertHelmValuesIPAM: Talos CCM's node-ipam-controller settings,
// given as Helm values, become the coordinator's ipam section.
func TestConvertHelmValuesIPAM(t *testing.T) {
	cases := []struct {
		file           string
		enabled        bool
		v4, v6         bool
		v4Mask, v6Mask int
	}{
		{"../rules/testdata/talos-ccm/chart-values-example-helm.yaml", true, true, true, 24, 80},
		{"testdata/helm-values-no-ipam.yaml", false, false, false, 0, 0},
	}
	for _, c := range cases {
		data, err := os.ReadFile(c.file)
		if err != nil {
			t.Fatal(err)
		}
		res, err := Convert(c.file, data)
		if err != nil {
			t.Fatal(err)
		}
		cc, err := config.Parse(res.Coordinator)
		if err != nil {
			t.Fatalf("%s: %v\n%s", c.file, err, res.Coordinator)
		}
		if cc.IPAMEnabled() != c.enabled {
			t.Errorf("%s: ipam enabled %v", c.file, cc.IPAMEnabled())
			continue
		}
		if !c.enabled {
			continue
		}
		v4, v6 := cc.Families()
		if v4 != c.v4 || v6 != c.v6 || cc.IPAM.IPv4MaskSize != c.v4Mask || cc.IPAM.IPv6MaskSize != c.v6Mask {
			t.Errorf("%s: families %v %v masks %d %d\n%s", c.file, v4, v6, cc.IPAM.IPv4MaskSize, cc.IPAM.IPv6MaskSize, res.Coordinator)
		}
	}
}
