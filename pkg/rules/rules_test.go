package rules

import (
	"maps"
	"reflect"
	"strings"
	"testing"

	"github.com/talos-nodeinit/talos-nodeinit/pkg/contract"
	"github.com/talos-nodeinit/talos-nodeinit/pkg/facts"
)

func mustLoad(t *testing.T, doc string) *Rules {
	t.Helper()
	r, err := Load([]byte(doc))
	if err != nil {
		t.Fatalf("load: %v", err)
	}
	return r
}

var metalWeb = Facts{
	Metadata: facts.Platform{Platform: "metal", Hostname: "web-1", Region: "eu", Zone: "eu-1a", InstanceType: "c5", InstanceID: "42",
		Tags: map[string]string{"rack": "r7"}},
	System: facts.System{Manufacturer: "Supermicro", ProductName: "X11", SerialNumber: "SN123", UUID: "u-1", SKUNumber: "sku=a;gen=3"},
}

func TestOperators(t *testing.T) {
	cases := []struct {
		expr string
		want bool
	}{
		{`{key: platform, operator: In, values: [metal, nocloud]}`, true},
		{`{key: platform, operator: In, values: [aws]}`, false},
		{`{key: PLATFORM, operator: In, values: [metal]}`, true},  // keys are case-insensitive
		{`{key: platform, operator: In, values: [METAL]}`, false}, // values are not
		{`{key: platform, operator: NotIn, values: [aws]}`, true},
		{`{key: platform, operator: NotIn, values: [metal]}`, false},
		{`{key: externalDNS, operator: NotIn, values: [x]}`, true}, // absent key: Kubernetes semantics
		{`{key: zone, operator: Exists}`, true},
		{`{key: internaldns, operator: Exists}`, false},
		{`{key: internaldns, operator: DoesNotExist}`, true},
		{`{key: zone, operator: DoesNotExist}`, false},
		{`{key: instanceID, operator: Gt, values: ["41"]}`, true},
		{`{key: instanceID, operator: Gt, values: ["42"]}`, false},
		{`{key: instanceID, operator: Lt, values: ["100"]}`, true},
		{`{key: zone, operator: Lt, values: ["100"]}`, false}, // not an integer: no match
		{`{key: hostname, operator: Regexp, values: ["^web-[0-9]+$"]}`, true},
		{`{key: hostname, operator: Regexp, values: ["^db-"]}`, false},
		{`{key: spot, operator: In, values: ["false"]}`, true},
		{`{key: manufacturer, operator: In, values: [Supermicro]}`, true},
	}
	for _, c := range cases {
		r := mustLoad(t, "transformations:\n- name: t\n  nodeSelector:\n  - matchExpressions:\n    - "+c.expr+"\n  labels: {example.com/hit: \"yes\"}\n")
		got := r.Evaluate(metalWeb).Labels["example.com/hit"] == "yes"
		if got != c.want {
			t.Errorf("%s: matched=%v, want %v", c.expr, got, c.want)
		}
	}
}

func TestTermsOrExpressionsAnd(t *testing.T) {
	r := mustLoad(t, `
transformations:
- nodeSelector:
  - matchExpressions:
    - {key: platform, operator: In, values: [aws]}
  - matchExpressions:
    - {key: platform, operator: In, values: [metal]}
    - {key: zone, operator: In, values: [eu-1a]}
  labels: {example.com/or: "1"}
- nodeSelector:
  - matchExpressions:
    - {key: platform, operator: In, values: [metal]}
    - {key: zone, operator: In, values: [eu-1b]}
  labels: {example.com/and: "1"}
`)
	res := r.Evaluate(metalWeb)
	if res.Labels["example.com/or"] != "1" || res.Labels["example.com/and"] != "" {
		t.Fatalf("labels %v", res.Labels)
	}
}

// TestReferenceExamples covers the documented examples users already have
// (reference/000: the Talos CCM blog's rules; reference/001: the labels Talos
// CCM puts on a node).
func TestReferenceExamples(t *testing.T) {
	doc := `
transformations:
# All rules are applied in order, all matched rules are applied to the node
- name: nocloud-nodes
  nodeSelector:
  - matchExpressions:
    - key: platform
      operator: In
      values:
      - nocloud
  labels:
    pvc-storage-class/name: "my-storage-class"
- name: web-nodes
  nodeSelector:
  - matchExpressions:
    - key: platform
      operator: In
      values:
      - metal
    - key: hostname
      operator: Regexp
      values:
      - ^web-[\w]+$
  labels:
    node-role.kubernetes.io/web: ""
`
	r := mustLoad(t, doc)
	cases := []struct {
		name      string
		facts     Facts
		labels    map[string]string
		requested map[string]string
	}{
		{"nocloud node", Facts{Metadata: facts.Platform{Platform: "nocloud", Hostname: "pve-1"}},
			map[string]string{"pvc-storage-class/name": "my-storage-class"}, map[string]string{}},
		{"metal web node", Facts{Metadata: facts.Platform{Platform: "metal", Hostname: "web-frontend"}},
			map[string]string{}, map[string]string{"node-role.kubernetes.io/web": ""}},
		{"metal db node", Facts{Metadata: facts.Platform{Platform: "metal", Hostname: "db-1"}},
			map[string]string{}, map[string]string{}},
	}
	for _, c := range cases {
		res := r.Evaluate(c.facts)
		if !maps.Equal(res.Labels, c.labels) || !maps.Equal(res.RequestedLabels, c.requested) {
			t.Errorf("%s: labels %v requested %v, want %v %v", c.name, res.Labels, res.RequestedLabels, c.labels, c.requested)
		}
	}

	// reference/001's node: the well-known labels come from metadata through
	// templates, split by what NodeRestriction lets the node set.
	r = mustLoad(t, `
transformations:
- name: well-known
  labels:
    topology.kubernetes.io/region: "{{ .Region }}"
    topology.kubernetes.io/zone: "{{ .Zone }}"
    node.kubernetes.io/instance-type: "{{ .InstanceType }}"
    node.cloudprovider.kubernetes.io/platform: "{{ .Platform }}"
`)
	res := r.Evaluate(Facts{Metadata: facts.Platform{Platform: "someprovider", Region: "region-2", Zone: "zone", InstanceType: "type-of-instance"}})
	wantLabels := map[string]string{"topology.kubernetes.io/region": "region-2", "topology.kubernetes.io/zone": "zone", "node.kubernetes.io/instance-type": "type-of-instance"}
	if !maps.Equal(res.Labels, wantLabels) || res.RequestedLabels["node.cloudprovider.kubernetes.io/platform"] != "someprovider" {
		t.Errorf("reference/001 node: labels %v requested %v", res.Labels, res.RequestedLabels)
	}
}

func TestTemplateFunctions(t *testing.T) {
	cases := []struct{ tmpl, want string }{
		{`{{ .Platform }}-{{ .Hostname }}`, "metal-web-1"},
		{`{{ .Manufacturer | lower }}`, "supermicro"},
		{`{{ upper .Zone }}`, "EU-1A"},
		{`{{ default "none" .InternalDNS }}`, "none"},
		{`{{ default "none" .Zone }}`, "eu-1a"},
		{`{{ empty .InternalDNS }}`, "true"},
		{`{{ coalesce .InternalDNS .ExternalDNS .Hostname }}`, "web-1"},
		{`{{ ternary "spot" "on-demand" .Spot }}`, "on-demand"},
		{`{{ trim "  x  " }}`, "x"},
		{`{{ trimSuffix "-1a" .Zone }}`, "eu"},
		{`{{ trimPrefix "web-" .Hostname }}`, "1"},
		{`{{ replace "-" "_" .Zone }}`, "eu_1a"},
		{`{{ regexFind "[0-9]+" .Hostname }}`, "1"},
		{`{{ regexFindString "^([a-z]+)-([0-9]+)$" .Hostname 2 }}`, "1"},
		{`{{ regexFindString "^([a-z]+)$" .Hostname 1 }}`, ""},
		{`{{ regexReplaceAll "[aeiou]" .Manufacturer "_" }}`, "S_p_rm_cr_"},
		{`{{ contains "micro" .Manufacturer }}`, "true"},
		{`{{ hasPrefix "web" .Hostname }}`, "true"},
		{`{{ hasSuffix "x" .Hostname }}`, "false"},
		{`{{ b64enc .Zone }}`, "ZXUtMWE="},
		{`{{ b64dec "ZXUtMWE=" }}`, "eu-1a"},
		{`{{ getValue .SKUNumber "gen" }}`, "3"},
		{`{{ getValue "novalue;gen=3" "gen" }}`, "3"},
		{`{{ getValue "novalue" "novalue" }}`, ""},
		{`{{ index .Tags "rack" }}`, "r7"},
		{`{{ .SerialNumber }}/{{ .UUID }}`, "SN123/u-1"},
		{`a<b&c`, "a<b&c"}, // text/template: no HTML escaping
	}
	for _, c := range cases {
		r := mustLoad(t, "transformations:\n- annotations:\n    example.com/out: '"+c.tmpl+"'\n")
		res := r.Evaluate(metalWeb)
		if len(res.Errors) > 0 || res.Annotations["example.com/out"] != c.want {
			t.Errorf("%s = %q (errors %v), want %q", c.tmpl, res.Annotations["example.com/out"], res.Errors, c.want)
		}
	}
}

func TestOverridesVisibleToLaterRules(t *testing.T) {
	r := mustLoad(t, `
transformations:
- name: set-zone
  nodeSelector:
  - matchExpressions:
    - {key: platform, operator: In, values: [metal]}
  platformMetadata:
    Zone: "rack-{{ index .Tags \"rack\" }}"
    spot: "true"
    ProviderID: "custom://{{ .InstanceID }}"
- name: uses-zone
  nodeSelector:
  - matchExpressions:
    - {key: zone, operator: In, values: [rack-r7]}
  labels:
    topology.kubernetes.io/zone: "{{ .Zone }}"
    example.com/lifecycle: '{{ ternary "spot" "normal" .Spot }}'
`)
	res := r.Evaluate(metalWeb)
	if res.Labels["topology.kubernetes.io/zone"] != "rack-r7" || res.Labels["example.com/lifecycle"] != "spot" {
		t.Fatalf("later rule did not see the override: %v %v", res.Labels, res.Matched)
	}
	if res.Metadata.Zone != "rack-r7" || !res.Metadata.Spot || res.Metadata.ProviderID != "custom://42" {
		t.Fatalf("effective metadata %+v", res.Metadata)
	}
	if metalWeb.Metadata.Zone != "eu-1a" {
		t.Fatal("Evaluate modified its input")
	}
}

func TestTaints(t *testing.T) {
	r := mustLoad(t, `
transformations:
- taints:
    example.com/dedicated: "{{ .InstanceType }}:NoSchedule"
    example.com/maintenance: NoExecute
`)
	res := r.Evaluate(metalWeb)
	want := []contract.Taint{
		{Key: "example.com/dedicated", Value: "c5", Effect: "NoSchedule"},
		{Key: "example.com/maintenance", Effect: "NoExecute"},
	}
	if !reflect.DeepEqual(res.Taints, want) {
		t.Fatalf("taints %v", res.Taints)
	}
}

func TestEvaluationErrorsAreReportedNotFatal(t *testing.T) {
	r := mustLoad(t, `
transformations:
- name: bad-at-runtime
  labels:
    example.com/decoded: "{{ b64dec .Hostname }}"
    example.com/spaces: "{{ .Manufacturer }} {{ .ProductName }}"
    example.com/fine: "ok"
`)
	res := r.Evaluate(metalWeb)
	if res.Labels["example.com/fine"] != "ok" {
		t.Fatalf("a failing output took the others with it: %v", res.Labels)
	}
	if len(res.Errors) != 2 || !strings.Contains(strings.Join(res.Errors, "\n"), "bad-at-runtime") {
		t.Fatalf("errors %v", res.Errors)
	}
}

// TestLoadRefuses lists files that must be refused at load time, each error
// naming the rule and the field.
func TestLoadRefuses(t *testing.T) {
	cases := []struct{ name, doc, want string }{
		{"unknown top-level key", "transformation: []", `unknown key "transformation"; did you mean "transformations"?`},
		{"unknown rule key", "transformations:\n- name: a\n  label: {a: b}", `unknown key "label"; did you mean "labels"?`},
		{"unknown expression key", "transformations:\n- nodeSelector:\n  - matchExpressions:\n    - {key: platform, op: In}", `unknown key "op"`},
		{"bad operator", "transformations:\n- name: r\n  nodeSelector:\n  - matchExpressions:\n    - {key: platform, operator: Equals, values: [a]}",
			`transformations[0] (r): nodeSelector[0].matchExpressions[0] (key "platform"): operator "Equals"`},
		{"In without values", "transformations:\n- nodeSelector:\n  - matchExpressions:\n    - {key: platform, operator: In}", "needs at least one value"},
		{"Exists with values", "transformations:\n- nodeSelector:\n  - matchExpressions:\n    - {key: platform, operator: Exists, values: [a]}", "takes no values"},
		{"Gt with two values", "transformations:\n- nodeSelector:\n  - matchExpressions:\n    - {key: instanceid, operator: Gt, values: [\"1\", \"2\"]}", "exactly one value"},
		{"Gt not an integer", "transformations:\n- nodeSelector:\n  - matchExpressions:\n    - {key: instanceid, operator: Gt, values: [x]}", "integer value"},
		{"invalid regexp", "transformations:\n- nodeSelector:\n  - matchExpressions:\n    - {key: hostname, operator: Regexp, values: [\"(\"]}", "invalid regexp"},
		{"unknown key", "transformations:\n- nodeSelector:\n  - matchExpressions:\n    - {key: platfrom, operator: Exists}", `key "platfrom" is not a known fact`},
		{"empty term", "transformations:\n- nodeSelector:\n  - matchExpressions: []", "must not be empty"},
		{"unparsable template", "transformations:\n- name: t\n  labels: {example.com/a: \"{{ .Zone \"}", "transformations[0] (t): labels[example.com/a]: invalid template"},
		{"unknown template field", "transformations:\n- labels: {example.com/a: \"{{ .Platfrom }}\"}", "can't evaluate field Platfrom"},
		{"unknown template function", "transformations:\n- labels: {example.com/a: \"{{ sha256 .Zone }}\"}", `function "sha256" not defined`},
		{"constant bad regexp in template", "transformations:\n- labels: {example.com/a: '{{ regexFind \"(\" .Zone }}'}", "fails on empty facts"},
		{"invalid label key", "transformations:\n- labels: {\"bad key\": x}", "labels[bad key]: invalid label key"},
		{"invalid annotation key", "transformations:\n- annotations: {\"/x\": x}", "invalid annotation key"},
		{"invalid taint key", "transformations:\n- taints: {\"a b\": NoSchedule}", "invalid taint key"},
		{"bad taint effect", "transformations:\n- taints: {example.com/t: \"x:Evict\"}", `effect "Evict"`},
		{"override hostname", "transformations:\n- platformMetadata: {Hostname: x}", "platformMetadata[Hostname]: cannot be overridden"},
		{"override unknown", "transformations:\n- platformMetadata: {color: x}", "cannot be overridden"},
		{"two documents", "transformations: []\n---\ntransformations: []", "more than one YAML document"},
		{"not YAML", "transformations: [", "line 1, column 19: invalid YAML"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Load([]byte(c.doc))
			if err == nil {
				t.Fatal("loaded")
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %q does not contain %q", err, c.want)
			}
		})
	}
	// Every problem is reported, not just the first.
	_, err := Load([]byte("transformations:\n- labels: {\"bad key\": x}\n- name: second\n  taints: {example.com/t: Evict}"))
	if err == nil || !strings.Contains(err.Error(), "transformations[0]") || !strings.Contains(err.Error(), "transformations[1] (second)") {
		t.Fatalf("not every error reported: %v", err)
	}
}

// TestLoadRefusesOwnDomain: nodeinit.io is the agent↔coordinator contract.
// A rule writing nodeinit.io/csr-review (or any key in nodeinit.io or a
// subdomain of it) would make the agent and the coordinator fight over it.
func TestLoadRefusesOwnDomain(t *testing.T) {
	for _, c := range []struct{ name, rule, key string }{
		{"annotation csr-review", "annotations: {nodeinit.io/csr-review: x}", "nodeinit.io/csr-review"},
		{"annotation in a subdomain", "annotations: {x.nodeinit.io/y: x}", "x.nodeinit.io/y"},
		{"label the node may set", "labels: {nodeinit.io/owned-labels: x}", "nodeinit.io/owned-labels"},
		{"label in a subdomain", "labels: {a.b.nodeinit.io/role: x}", "a.b.nodeinit.io/role"},
		{"taint", "taints: {nodeinit.io/t: NoSchedule}", "nodeinit.io/t"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := Load([]byte("transformations:\n- name: mine\n  " + c.rule + "\n"))
			if err == nil {
				t.Fatalf("a rule writing %s loaded", c.key)
			}
			for _, want := range []string{"transformations[0] (mine)", c.key, "nodeinit.io"} {
				if !strings.Contains(err.Error(), want) {
					t.Fatalf("error %q does not name %q", err, want)
				}
			}
		})
	}
	// Only the domain itself and its subdomains: look-alikes are users' own.
	mustLoad(t, `
transformations:
- labels: {notnodeinit.io/a: x, nodeinit.io.example.com/b: x, example.com/nodeinit.io: x}
  annotations: {nodeinit.iox/c: x}
  taints: {example.com/nodeinit.io: NoSchedule}
`)
}

// TestLoadRefusesPublicIPDiscovery: the agent has no per-rule public IP
// discovery, so the knob would do nothing; it is refused, saying what the
// agent does instead.
func TestLoadRefusesPublicIPDiscovery(t *testing.T) {
	for _, v := range []string{"true", "false"} {
		_, err := Load([]byte("transformations:\n- name: pub\n  features:\n    publicIPDiscovery: " + v + "\n"))
		if err == nil {
			t.Fatalf("publicIPDiscovery: %s loaded", v)
		}
		for _, want := range []string{"transformations[0] (pub)", "features.publicIPDiscovery", "not supported", "ExternalIP", `"external" link`} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("publicIPDiscovery: %s: error %q lacks %q", v, err, want)
			}
		}
	}
	mustLoad(t, "transformations:\n- features: {}\n") // an empty features block sets nothing
}

func TestEmptyAndNil(t *testing.T) {
	r := mustLoad(t, "")
	if res := r.Evaluate(metalWeb); len(res.Labels)+len(res.RequestedLabels)+len(res.Annotations) != 0 || res.Metadata.Platform != "metal" {
		t.Fatalf("empty rules produced %+v", res)
	}
	var none *Rules
	if res := none.Evaluate(metalWeb); res.Metadata.Zone != "eu-1a" {
		t.Fatal("nil rules lost the metadata")
	}
}

func FuzzLoadEvaluate(f *testing.F) {
	f.Add([]byte("transformations:\n- name: a\n  nodeSelector:\n  - matchExpressions:\n    - {key: platform, operator: In, values: [metal]}\n  labels: {example.com/a: '{{ .Zone | upper }}'}\n"), "metal", "z")
	f.Add([]byte("transformations:\n- platformMetadata: {zone: '{{ getValue .Hostname \"a\" }}'}\n  taints: {example.com/t: 'x:NoSchedule'}\n"), "nocloud", "a=b;c")
	f.Add([]byte("transformations:\n- labels: {a: '{{ regexFindString \"(x)\" .Hostname 5 }}{{ b64dec .Zone }}'}\n"), "", "")
	f.Fuzz(func(t *testing.T, doc []byte, platform, hostname string) {
		r, err := Load(doc)
		if err != nil {
			return
		}
		res := r.Evaluate(Facts{Metadata: facts.Platform{Platform: platform, Hostname: hostname, Zone: hostname}})
		for k, v := range res.Labels {
			if !contract.NodeMaySetLabel(k) || contract.CheckLabel(k, v) != nil {
				t.Fatalf("label %q=%q should not be in Labels", k, v)
			}
		}
	})
}
