package rulesource

import (
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/talos-nodeinit/talos-nodeinit/pkg/rules"
)

// TestFilesUsersHave: the rules load from every file that holds them, and
// the kind of file is named.
func TestFilesUsersHave(t *testing.T) {
	cases := []struct {
		file  string
		kind  Kind
		rules []string
		beta  bool
	}{
		{"../../agent/testdata/talos-ccm-rules.yaml", KindRules, []string{"transformations[0] (nocloud-nodes)", "transformations[1] (web-nodes)"}, false},
		{"../../extension/patches/rules.yaml", KindExtensionServiceConfig, []string{"transformations[0] (web-nodes)"}, false},
		{"testdata/machineconfig-worker.yaml", KindMachineConfig, []string{"transformations[0] (eu)"}, true},
		{"testdata/talos-ccm-configmap.yaml", KindTalosCCMConfigMap, []string{"transformations[0] (web)"}, false},
		{"testdata/talos-ccm-deploy-configmap.yaml", KindTalosCCMConfigMap, nil, false},
		{"../rules/testdata/talos-ccm/chart-values-example-helm.yaml", KindTalosCCMHelmValues, []string{"transformations[0] (web)", "transformations[1] (worker)", "transformations[2] (db)"}, false},
		{"../rules/testdata/talos-ccm/hack-ccm-config.yaml", KindRules, []string{"transformations[0] (web)", "transformations[1] (nocloud)"}, false},
	}
	for _, c := range cases {
		t.Run(c.file, func(t *testing.T) {
			r, s, err := LoadFile(c.file)
			if err != nil {
				t.Fatalf("refused:\n%v", err)
			}
			if s.Kind != c.kind {
				t.Errorf("kind %q, want %q", s.Kind, c.kind)
			}
			if !slices.Equal(r.Names(), c.rules) {
				t.Errorf("rules %q, want %q", r.Names(), c.rules)
			}
			if r.Global().BetaTopologyLabels != c.beta {
				t.Errorf("betaTopologyLabels %v, want %v", r.Global().BetaTopologyLabels, c.beta)
			}
		})
	}
}

const esc = `apiVersion: v1alpha1
kind: ExtensionServiceConfig
name: nodeinit-agent
configFiles:
  - mountPath: /usr/local/etc/nodeinit/rules.yaml
    content: |
      transformations:
        - name: web
          labels:
            example.com/team: web team
`

// TestProblemsInEmbeddedRulesPointIntoTheFile: a problem inside the
// ExtensionServiceConfig's content is reported at its line and column in
// the file the user edits, not in the embedded text.
func TestProblemsInEmbeddedRulesPointIntoTheFile(t *testing.T) {
	cases := []struct{ name, doc, want string }{
		{"label value", esc, `f.yaml:10:13: transformations[0] (web): labels[example.com/team]: label value "web team"`},
		{"indentation", strings.Replace(esc, "          labels:", "         labels:", 1), "f.yaml:9:10: invalid YAML"},
		{"unknown key", strings.Replace(esc, "labels:", "label:", 1), `f.yaml:9:11: transformations[0]: unknown key "label"; did you mean "labels"?`},
		{"in a machine config", "version: v1alpha1\nmachine: {type: worker}\n---\n" + esc, `f.yaml:13:13: transformations[0] (web): labels[example.com/team]`},
		{"mounted elsewhere", strings.Replace(esc, "/usr/local/etc/nodeinit/rules.yaml", "/etc/rules.yaml", 1),
			"f.yaml:5:3: ExtensionServiceConfig nodeinit-agent: no configFiles entry is mounted at /usr/local/etc/nodeinit/rules.yaml (found: /etc/rules.yaml)"},
		{"coordinator ConfigMap", "apiVersion: v1\nkind: ConfigMap\ndata:\n  coordinator.yaml: |\n    clusterName: x\n", "nodeinit-coordinator validate"},
		{"nothing of ours", "version: v1alpha1\nmachine: {type: worker}\n---\napiVersion: v1alpha1\nkind: ExtensionServiceConfig\nname: other\n", "no nodeinit-agent rules here"},
		{"two rules documents", "transformations: []\n---\ntransformations: []\n", "a rules file is one YAML document"},
		{"two ExtensionServiceConfigs", esc + "---\n" + esc, "more than one set of rules"},
		{"Helm values", "image: {tag: edge}\ntransformations:\n  - name: w\n    labels: {example.com/a: two words}\n",
			`f.yaml:4:14: transformations[0] (w): labels[example.com/a]: label value "two words"`},
		{"double-quoted content", "apiVersion: v1alpha1\nkind: ExtensionServiceConfig\nname: nodeinit-agent\nconfigFiles:\n  - mountPath: /usr/local/etc/nodeinit/rules.yaml\n    content: \"transformations: [{label: {}}]\"\n",
			`f.yaml:6:14: transformations[0]: unknown key "label"`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, _, err := Load([]byte(c.doc))
			if err == nil {
				t.Fatal("loaded")
			}
			if ps, ok := err.(rules.Problems); ok {
				err = ps.InFile("f.yaml")
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error\n  %v\nwant it to contain\n  %s", err, c.want)
			}
		})
	}
}

// TestShippedRulesFileLoads: the one rules file the repository ships.
func TestShippedRulesFileLoads(t *testing.T) {
	data, err := os.ReadFile("../../extension/patches/rules.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rules.Load(data); err == nil {
		t.Fatal("the ExtensionServiceConfig loaded as a bare rules file: the test proves nothing")
	}
	if _, _, err := Load(data); err != nil {
		t.Fatal(err)
	}
}
