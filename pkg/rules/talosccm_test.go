package rules

import (
	"os"
	"strings"
	"testing"
)

// TestTalosCCMPublishedExamples loads every configuration Talos CCM
// publishes (testdata/talos-ccm, copied from its repository): each either
// loads, or is refused only for what Talos CCM itself never did or could
// not load, each problem at its line and column with what to write instead.
func TestTalosCCMPublishedExamples(t *testing.T) {
	cases := []struct {
		file string
		// want lists one substring per expected problem, in file order; none: it loads.
		want []string
	}{
		{"hack-ccm-config.yaml", nil},
		{"chart-values-example.yaml", nil},
		{"chart-values.yaml", nil},
		// The page's example is not valid YAML: a double-quoted template holding double quotes.
		{"config-md.yaml", []string{`line 49, column 56: invalid YAML: did not find expected key; check the indentation and quoting of this line`}},
		{"config-md-quoted.yaml", []string{
			`line 6, column 3: global: unknown key "PreferIPv6"; keys are case-sensitive: write preferIPv6 (Talos CCM ignored PreferIPv6`,
			`line 71, column 7: transformations[1] (web-nodes): features.publicIPDiscovery: not supported`,
		}},
		{"rules-yaml.yaml", []string{
			`line 31, column 9: transformations[0] (oracle): labels[talos.dev/zone"]: invalid label key`,
			`line 67, column 9: transformations[1] (openstack): features.publicIPPredict: not supported: Talos CCM has no such feature`,
		}},
	}
	for _, c := range cases {
		t.Run(c.file, func(t *testing.T) {
			data, err := os.ReadFile("testdata/talos-ccm/" + c.file)
			if err != nil {
				t.Fatal(err)
			}
			_, err = Load(data)
			if len(c.want) == 0 {
				if err != nil {
					t.Fatalf("refused:\n%v", err)
				}
				return
			}
			if err == nil {
				t.Fatal("loaded")
			}
			got := strings.Split(err.Error(), "\n")
			if len(got) != len(c.want) {
				t.Fatalf("%d problems, want %d:\n%v", len(got), len(c.want), err)
			}
			for i, w := range c.want {
				if !strings.Contains(got[i], w) {
					t.Errorf("problem %d:\n  got  %s\n  want %s", i, got[i], w)
				}
			}
		})
	}
	// The invalid key gets a suggested fix.
	data, _ := os.ReadFile("testdata/talos-ccm/rules-yaml.yaml")
	if _, err := Load(data); err == nil || !strings.Contains(err.Error(), `did you mean "talos.dev/zone"?`) {
		t.Errorf("no fix suggested for the stray quote: %v", err)
	}
}

// TestProblemsCarryPositionAndFix: every kind of mistake is reported at its
// line and column, with what to write instead.
func TestProblemsCarryPositionAndFix(t *testing.T) {
	cases := []struct{ name, doc, want string }{
		{"indentation error on line 5", "transformations:\n- name: a\n  labels:\n    a: b\n   c: d\n",
			"line 5, column 4: invalid YAML: did not find expected key; check the indentation of this line"},
		{"tab", "transformations:\n- name: a\n\tlabels: {}\n", "line 3, column 1: invalid YAML: found a tab character that violates indentation; indent with spaces"},
		{"unclosed flow list", "transformations: [\n", "line 2, column 1: invalid YAML: did not find expected node content; check for an unclosed bracket or quote"},
		{"unknown top-level key", "transformation: []", `line 1, column 1: unknown key "transformation"; did you mean "transformations"?`},
		{"unknown rule key", "transformations:\n- name: a\n  label: {a: b}", `line 3, column 3: transformations[0]: unknown key "label"; did you mean "labels"?`},
		{"unknown selector key", "transformations:\n- nodeSelectors: []", `did you mean "nodeSelector"?`},
		{"key typo", "transformations:\n- nodeSelector:\n  - matchExpressions:\n    - {key: platfrom, operator: Exists}",
			`line 4, column 7: transformations[0]: nodeSelector[0].matchExpressions[0] (key "platfrom"): key "platfrom" is not a known fact; known keys (case-insensitive): platform, `},
		{"key typo fix", "transformations:\n- nodeSelector:\n  - matchExpressions:\n    - {key: platfrom, operator: Exists}", `; did you mean "platform"?`},
		{"operator case", "transformations:\n- nodeSelector:\n  - matchExpressions:\n    - key: zone\n      operator: in\n      values: [a]",
			`line 4, column 7: transformations[0]: nodeSelector[0].matchExpressions[0] (key "zone"): operator "in" is not one of`},
		{"operator fix", "transformations:\n- nodeSelector:\n  - matchExpressions:\n    - {key: zone, operator: in, values: [a]}", `did you mean "In"?`},
		{"named term", "transformations:\n- nodeSelector:\n  - name: eu\n    matchExpressions: []", `line 4, column 5: transformations[0]: nodeSelector[0] (eu).matchExpressions: must not be empty`},
		{"label value with spaces", "transformations:\n- name: r\n  labels:\n    example.com/team: two words\n",
			`line 4, column 5: transformations[0] (r): labels[example.com/team]: label value "two words": a valid label must be`},
		{"label value fix", "transformations:\n- labels: {example.com/team: two words}", `did you mean "two-words"?`},
		{"label value too long", "transformations:\n- labels: {example.com/x: " + strings.Repeat("a", 64) + "}", "must be no more than 63"},
		{"templated label with a slash", "transformations:\n- labels: {example.com/x: '{{ .Region }}/{{ .Zone }}'}", `holds '/', which no label value may contain`},
		{"taint value with spaces", "transformations:\n- taints: {example.com/t: 'a b:NoSchedule'}", `taint value "a b"`},
		{"taint effect typo", "transformations:\n- taints: {example.com/t: NoSchedul}", `did you mean "NoSchedule"?`},
		{"values not a list", "transformations:\n- nodeSelector:\n  - matchExpressions:\n    - {key: zone, operator: In, values: a}",
			`line 4, column 41: transformations[0].nodeSelector[0].matchExpressions[0].values: must be a list, not the value "a"`},
		{"labels not a mapping", "transformations:\n- labels: [a]", `line 2, column 11: transformations[0].labels: must be a mapping`},
		{"key twice", "transformations:\n- labels: {a: b}\n  labels: {c: d}", `line 3, column 3: transformations[0].labels: key "labels" is given twice`},
		{"clusterName", "global:\n  clusterName: prod\n", `line 2, column 3: global.clusterName: the cluster name is set by the coordinator`},
		{"clusterName fix", "global:\n  clusterName: prod\n", `set clusterName: "prod" in the coordinator's configuration`},
		{"PreferIPv6 spelled as in Talos CCM's docs", "global:\n  PreferIPv6: true\n", `write preferIPv6`},
		{"global endpoints", "global:\n  endpoints: [1.2.3.4]\n", `machined socket`},
		{"preferIPv6 not a bool", "global:\n  preferIPv6: yes please\n", `line 2, column 15: global.preferIPv6: must be true or false`},
		{"publicIPPredict", "transformations:\n- features: {publicIPPredict: true}", `features.publicIPPredict: not supported: Talos CCM has no such feature`},
		{"override hostname", "transformations:\n- platformMetadata: {Hostname: x}", `line 2, column 22: transformations[0]: platformMetadata[Hostname]: cannot be overridden; remove it (Talos CCM skipped it silently)`},
		{"override typo", "transformations:\n- platformMetadata: {zome: x}", `did you mean "zone"?`},
		{"an ExtensionServiceConfig given as a bare rules file", "apiVersion: v1alpha1\nkind: ExtensionServiceConfig\n",
			"line 1, column 1: unknown key \"apiVersion\"; this is a Kubernetes or Talos document, not a bare rules file: the agent's --rules-file is the file Talos mounts from the ExtensionServiceConfig's configFiles; `nodeinit-agent validate --rules-file` reads the document itself"},
		{"a machine config given as a bare rules file", "version: v1alpha1\nmachine: {}\n", `unknown key "machine"; this is a Talos machine config`},
		{"kind inside a rule is only an unknown key", "transformations:\n- kind: x\n", `transformations[0]: unknown key "kind"; known keys here: name, nodeSelector`},
		{"two documents", "transformations: []\n---\ntransformations: []", "line 3, column 1: more than one YAML document"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Load([]byte(c.doc))
			if err == nil {
				t.Fatal("loaded")
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error\n  %s\nwant it to contain\n  %s", err, c.want)
			}
		})
	}
}
