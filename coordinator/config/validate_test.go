package config

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"
)

// Everything that would be wrong at run time is refused by Parse, with the
// line and column of the value at fault and what to do instead.
func TestRefused(t *testing.T) {
	for _, tc := range []struct {
		doc  string
		want []string // in the one error, in order
	}{
		// clusterName becomes a label value.
		{`clusterName: "bad name!"`, []string{"1:14: clusterName:", "not a valid label value", "node.cloudprovider.kubernetes.io/clustername"}},
		{"clusterName: " + strings.Repeat("a", 64), []string{"clusterName", "63"}},
		// Durations: negative, zero where set, or too short to mean anything.
		{"csr:\n  maxDuration: -1h", []string{"2:16: csr.maxDuration: -1h0m0s is negative", "positive duration"}},
		{"csr: {maxDuration: 0s}", []string{"1:20: csr.maxDuration: 0 is not", "remove the key for the default"}},
		{"csr: {maxDuration: 5m}", []string{"csr.maxDuration: 5m0s is shorter than 10m0s"}},
		{"csr: {attestationTimeout: -2m}", []string{"csr.attestationTimeout: -2m0s is negative"}},
		{"csr: {attestationTimeout: 0s}", []string{"csr.attestationTimeout: 0 is not"}},
		{"csr: {minAddressAge: -1s}", []string{"csr.minAddressAge: -1s is negative"}},
		{"csr: {initWait: -1s}", []string{"1:17: csr.initWait: -1s is negative", "0 (never wait)"}},
		{"csr: {initWait: 2m}", []string{"csr.initWait: 2m0s is longer than 30s"}},
		{"csr: {minAddressAge: soon, maxDuration: later}", []string{"1:22: csr.minAddressAge: \"soon\" is not a duration", "1:41: csr.maxDuration: \"later\" is not a duration"}},
		// A service CIDR inside a pod pool, and pools in the wrong family.
		{"ipam:\n  ipv4Pool: 10.244.0.0/16\n  serviceCIDRs: [10.244.5.0/24]", []string{"2:13: ipam: ipv4Pool 10.244.0.0/16 overlaps serviceCIDRs 10.244.5.0/24"}},
		{"ipam: {ipv4Pool: 10.244.0.1/16}", []string{"ipam.ipv4Pool: 10.244.0.1/16 has host bits set", "write 10.244.0.0/16"}},
		{"ipam: {ipv6Pool: 10.244.0.0/16}", []string{"ipam.ipv6Pool: 10.244.0.0/16 is not IPv6"}},
		{"ipam: {serviceCIDRs: [10.96.0.1/12]}", []string{"ipam.serviceCIDRs[0]: 10.96.0.1/12 has host bits set"}},
		{"ipam: {serviceCIDRs: [nonsense]}", []string{"ipam.serviceCIDRs[0]: \"nonsense\" is not a CIDR"}},
		{"ipam: {ipv4Pool: 10.244.0.0/16, ipv4MaskSize: 8}", []string{"ipam.ipv4MaskSize: 8 does not fit"}},
		{"ipam: {ipv4MaskSize: 33}", []string{"ipam.ipv4MaskSize: 33 does not fit"}},
		{"ipam: {ipv6Pool: 'fd00:10::/64', ipv6MaskSize: 200}", []string{"ipam.ipv6MaskSize: 200 does not fit"}},
		{"ipam: {families: [ipv4, ipv5]}", []string{"1:18: ipam: families: \"ipv5\""}},
		// Never-grantable keys in an allow list.
		{`grants: {labels: {allow: ["node-restriction.kubernetes.io/*"]}}`, []string{"1:27: grants.labels.allow[0]:", "never granted", "remove it"}},
		{`grants: {labels: {allow: ["example.node-restriction.kubernetes.io/*"]}}`, []string{"grants.labels.allow[0]", "never granted"}},
		{`grants: {labels: {allow: ["node-restriction.kubernetes.io/team"]}}`, []string{"grants.labels.allow[0]", "never granted"}},
		{`grants: {labels: {allow: ["example.com/*", "node-role.kubernetes.io/control-plane"]}}`, []string{"grants.labels.allow[1]", "marks control-plane Nodes"}},
		{`grants: {labels: {allow: ["node-role.kubernetes.io/master"]}}`, []string{"grants.labels.allow[0]", "never granted"}},
		{`grants: {labels: {allow: ["node.cloudprovider.kubernetes.io/clustername"]}}`, []string{"grants.labels.allow[0]", "the coordinator's own"}},
		{`grants: {taints: {allow: ["node.cloudprovider.kubernetes.io/uninitialized"]}}`, []string{"grants.taints.allow[0]", "never granted"}},
		{`grants: {labels: {deny: ["a*b"]}}`, []string{"grants.labels.deny[0]", "single trailing *"}},
		// A pattern no key can match: a deny typo would deny nothing.
		{`grants: {labels: {allow: ["*"], deny: ["Node-Role.kubernetes.io/*"]}}`, []string{"grants.labels.deny[0]", "matches no label key", "lower-case DNS name"}},
		{`grants: {labels: {deny: [" example.com/secure"]}}`, []string{"grants.labels.deny[0]", "matches no label key"}},
		{`grants: {labels: {deny: ["example.com/a b"]}}`, []string{"grants.labels.deny[0]", "matches no label key"}},
		{`grants: {labels: {deny: ["/x*"]}}`, []string{"grants.labels.deny[0]", "starts with /"}},
		{`grants: {taints: {deny: ["example.com/no way"]}}`, []string{"grants.taints.deny[0]", "matches no taint key"}},
		// Every other field.
		{"nodeNetworks: [10.0.0.1/8]", []string{"1:16: nodeNetworks[0]: 10.0.0.1/8 has host bits set"}},
		{"nodeNetworks: [x]", []string{"nodeNetworks[0]", "not a CIDR"}},
		{"maxNodeAddresses: 0", []string{"1:19: maxNodeAddresses: 0 is out of range", "want 1 to 64"}},
		{"maxNodeAddresses: 65", []string{"maxNodeAddresses: 65 is out of range"}},
		{"clusterDomain: 'bad domain'", []string{"clusterDomain", "not a DNS name"}},
		{"csr: {onTimeout: maybe}", []string{"1:18: csr.onTimeout: \"maybe\" is not a choice", "want pending or approve"}},
		{"csr: {renewals: never}", []string{"csr.renewals", "want sameNames or checks"}},
		{"csr: {maxPending: -1}", []string{"csr.maxPending: -1 is negative"}},
		// A reserved range over a pod pool would leave no segment there to hand out.
		{"ipam: {ipv4Pool: 10.244.0.0/16}\ncsr: {reservedAddresses: [10.0.0.0/8]}", []string{"csr.reservedAddresses[0]: 10.0.0.0/8 overlaps ipam.ipv4Pool 10.244.0.0/16"}},
		// (with ipam off, the pools hand out nothing: accepted, TestReservedAddressesWithoutIPAM)
		{"csr: {allowedIPRanges: [10.0.0.0/8]}", []string{"csr.allowedIPRanges", "move the ranges there"}},
		{"csr: {reservedAddresses: [10.0.0.5, nope]}", []string{"csr.reservedAddresses[1]", "not an address"}},
		{"csr: {reservedNames: ['bad name']}", []string{"csr.reservedNames[0]", "not a DNS name"}},
		{"csr: {allowedDNSNames: ['{node}.svc']}", []string{"csr.allowedDNSNames[0]", ".svc"}},
		{"csr: {attestationRequired: perhaps}", []string{"1:28: csr.attestationRequired: cannot unmarshal"}},
		{"maxNodeAddresses: many", []string{"1:19: maxNodeAddresses: cannot unmarshal"}},
		{"maxNodeAddresses: {a: 1}", []string{"1:19: maxNodeAddresses: cannot unmarshal !!map into int"}},
		{"clusterName: a\nclusterName: b", []string{`2:1: clusterName: mapping key "clusterName" already defined at line 1`}},
		// Typos get the nearest key.
		{"ipma: {}", []string{"1:1: ipma: unknown key", `did you mean "ipam"?`}},
		{"csr:\n  maxDuraton: 1h", []string{"2:3: csr.maxDuraton: unknown key", `did you mean "maxDuration"?`}},
		{"grants: {labels: {alow: []}}", []string{"grants.labels.alow: unknown key", `did you mean "allow"?`}},
		{"clustername: prod", []string{`did you mean "clusterName"?`}},
		{"zzz: 1", []string{"zzz: unknown key", "the keys here are adoptExisting, clusterDomain"}},
		// Syntax errors are placed where the parser stopped.
		{"csr:\n  maxDuration: 1h\n bad: [", []string{"3:2: did not find expected key"}},
		{"- a list", []string{"not a mapping"}},
	} {
		_, err := Parse([]byte(tc.doc))
		if err == nil {
			t.Errorf("Parse(%q) accepted it, want an error with %q", tc.doc, tc.want)
			continue
		}
		var es Errors
		if !errors.As(err, &es) {
			t.Errorf("Parse(%q) = %T %v, want Errors", tc.doc, err, err)
		}
		msg, rest := err.Error(), err.Error()
		for _, w := range tc.want {
			i := strings.Index(rest, w)
			if i < 0 {
				t.Errorf("Parse(%q) =\n%s\nwant %q (in order: %q)", tc.doc, msg, w, tc.want)
				break
			}
			rest = rest[i+len(w):]
		}
	}
}

// Every error is reported at once, in file order.
func TestAllErrorsAtOnce(t *testing.T) {
	_, err := Parse([]byte("clusterName: 'a b'\ncsr:\n  maxDuration: -1h\n  onTimeout: never\ngrants: {labels: {allow: ['node-restriction.kubernetes.io/*']}}\n"))
	var es Errors
	if !errors.As(err, &es) || len(es) != 4 {
		t.Fatalf("got %v, want 4 errors", err)
	}
	for i, line := range []int{1, 3, 4, 5} {
		if es[i].Line != line {
			t.Errorf("error %d at line %d, want %d: %v", i, es[i].Line, line, es[i])
		}
	}
}

// The files the repository ships pass, in every form a user has them: the
// ConfigMap, the chart's values file, and the bare configuration.
func TestShippedConfigs(t *testing.T) {
	for _, f := range []string{"../deploy/configmap.yaml", "../chart/nodeinit-coordinator/values.yaml"} {
		c, err := Load(f)
		if err != nil {
			t.Errorf("%s: %v", f, err)
			continue
		}
		if c.IPAM.IPv4Pool != "10.244.0.0/16" || c.IPAM.IPv4MaskSize != 24 || c.CSR.Renewals != RenewSameNames {
			t.Errorf("%s: the configuration was not read from it: %+v", f, c)
		}
	}
}

// Positions inside the ConfigMap are the ConfigMap file's own, so an editor
// jumps to the right line; `helm template` output (many objects) works too.
func TestConfigMapPositions(t *testing.T) {
	data, err := os.ReadFile("../deploy/configmap.yaml")
	if err != nil {
		t.Fatal(err)
	}
	bad := strings.Replace(string(data), "onTimeout: pending", "onTimeout: maybe", 1)
	line, col := 0, 0
	for i, l := range strings.Split(bad, "\n") {
		if j := strings.Index(l, "maybe"); j >= 0 {
			line, col = i+1, j+1
		}
	}
	want := fmt.Sprintf("%d:%d: csr.onTimeout", line, col)
	rendered := "---\napiVersion: v1\nkind: ServiceAccount\nmetadata: {name: x}\n---\n"
	for _, doc := range []struct {
		name, text string
		offset     int
	}{{"configmap", bad, 0}, {"helm template", rendered + bad, 5}} {
		_, err := Parse([]byte(doc.text))
		want := want
		if doc.offset > 0 {
			want = fmt.Sprintf("%d:%d: csr.onTimeout", line+doc.offset, col)
		}
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want an error at %q", doc.name, err, want)
		}
	}
	// A typo in the chart's values file is placed in values.yaml.
	data, err = os.ReadFile("../chart/nodeinit-coordinator/values.yaml")
	if err != nil {
		t.Fatal(err)
	}
	bad = strings.Replace(string(data), "    renewals: sameNames", "    renewal: sameNames", 1)
	for i, l := range strings.Split(bad, "\n") {
		if strings.HasPrefix(l, "    renewal:") {
			line = i + 1
		}
	}
	if _, err := Parse([]byte(bad)); err == nil || !strings.Contains(err.Error(), fmt.Sprintf("%d:5: csr.renewal: unknown key; did you mean \"renewals\"?", line)) {
		t.Errorf("values.yaml: %v, want the typo at line %d column 5", err, line)
	}
	// Two configurations in one file are refused rather than one guessed.
	if _, err := Parse([]byte(string(data) + "\n---\n" + bad)); err == nil || !strings.Contains(err.Error(), "2 configurations") {
		t.Errorf("two configurations: %v", err)
	}
}

// Load names the file in each error.
func TestLoadNamesTheFile(t *testing.T) {
	f := t.TempDir() + "/c.yaml"
	if err := os.WriteFile(f, []byte("\nclusterName: 'bad name!'\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(f); err == nil || !strings.HasPrefix(err.Error(), f+":2:14: clusterName") {
		t.Errorf("Load = %v, want it to start with %s:2:14: clusterName", err, f)
	}
}

// A typo does not hide the other errors.
func TestUnknownKeysWithOtherErrors(t *testing.T) {
	_, err := Parse([]byte("clusterName: 'bad name!'\nipma: {}\ncsr: {maxDuration: -1h}\n"))
	var es Errors
	if !errors.As(err, &es) || len(es) != 3 || es[0].Path != "clusterName" || es[1].Path != "ipma" || es[2].Path != "csr.maxDuration" {
		t.Errorf("got %v, want clusterName, ipma and csr.maxDuration in file order", err)
	}
}

func TestConfigMapWithoutTheKey(t *testing.T) {
	_, err := Parse([]byte("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: nodeinit-coordinator}\ndata:\n  config.yaml: |\n    clusterName: prod\n"))
	if err == nil || !strings.Contains(err.Error(), "without data.coordinator.yaml") {
		t.Errorf("a ConfigMap without coordinator.yaml: %v", err)
	}
}

// Bad input is an error, never a panic.
func FuzzParse(f *testing.F) {
	for _, s := range []string{"", "clusterName: x", "apiVersion: v1\nkind: ConfigMap\ndata:\n  coordinator.yaml: |\n    csr: {maxDuration: 1h}\n",
		"config: |\n  ipma: 1\n", "ipam: {ipv4Pool: 10.0.0.0/8, serviceCIDRs: [10.96.0.0/12]}", "- a", "kind: ConfigMap\ndata: {coordinator.yaml: 'x: ['}",
		"grants: {labels: {allow: ['*', 'node-restriction.kubernetes.io/*']}}", "csr: {maxDuration: 5m, minAddressAge: -1s}\n---\nclusterName: y"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := Parse(data)
		if err == nil && c == nil {
			t.Fatal("no configuration and no error")
		}
		if err != nil {
			_ = err.Error()
		}
	})
}

// Patterns any key can match pass: the refusals above are not too broad.
func TestPatternsAccepted(t *testing.T) {
	doc := `grants:
  labels:
    allow: ["*", "node-*", "node-role.kubernetes.io/*", "example.com/Role", "Web", "example.com/*", "example.com/a_b.c-d"]
    deny: ["node-role.kubernetes.io/control-plane*", "team.example.com/*"]
  taints:
    allow: ["*"]
    deny: ["node.kubernetes.io/*", "dedicated"]
`
	if _, err := Parse([]byte(doc)); err != nil {
		t.Errorf("Parse refused valid patterns: %v", err)
	}
}

// csr.initWait: unset is the default, 0 is "never wait" (not the default).
func TestCSRInitWait(t *testing.T) {
	for doc, want := range map[string]time.Duration{"": DefaultCSRInitWait, "csr: {initWait: 0s}": 0, "csr: {initWait: 5s}": 5 * time.Second} {
		c, err := Parse([]byte(doc))
		if err != nil {
			t.Fatalf("%q: %v", doc, err)
		}
		if got := c.CSRInitWait(); got != want {
			t.Errorf("%q: csr.initWait %v, want %v", doc, got, want)
		}
	}
}

// TestReservedAddressesWithoutIPAM: without allocation a reserved range over
// the (default) pool is no problem: nothing is handed out from it.
func TestReservedAddressesWithoutIPAM(t *testing.T) {
	if _, err := Parse([]byte("ipam: {enabled: false}\ncsr: {reservedAddresses: [10.244.0.5]}")); err != nil {
		t.Errorf("ipam off, a reserved address in the default pool: %v", err)
	}
}
