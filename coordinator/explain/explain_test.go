package explain

import (
	"bytes"
	"encoding/json"
	"maps"
	"net/netip"
	"os"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v4"

	"github.com/talos-nodeinit/talos-nodeinit/pkg/desired"
	"github.com/talos-nodeinit/talos-nodeinit/pkg/facts"
	"github.com/talos-nodeinit/talos-nodeinit/pkg/rules"
)

func ccmRules(t *testing.T) *rules.Rules {
	t.Helper()
	rs, err := rules.LoadFile("../../agent/testdata/talos-ccm-rules.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return rs
}

// The examples of the Talos CCM documentation (reference/000): a nocloud
// node gets the storage-class label; a metal node named web-<w…> gets the
// web role, which a node may not set itself, so it is requested.
func TestExplainTalosCCMExamples(t *testing.T) {
	rs := ccmRules(t)
	for _, tc := range []struct {
		name            string
		md              facts.Platform
		addresses       []string
		policy          desired.ProviderIDPolicy
		labels          map[string]string
		requestedLabels map[string]string
		providerID      string
	}{
		{
			name: "nocloud node gets the storage class label",
			md:   facts.Platform{Platform: "nocloud", Hostname: "pve-1", Region: "home", Zone: "rack-1"},
			labels: map[string]string{
				"pvc-storage-class/name": "my-storage-class", "topology.kubernetes.io/region": "home", "topology.kubernetes.io/zone": "rack-1",
			},
			requestedLabels: map[string]string{},
		},
		{
			name:            "metal web-www gets the web role, requested from the coordinator",
			md:              facts.Platform{Platform: "metal", Hostname: "web-www"},
			addresses:       []string{"192.168.1.10/24"},
			policy:          desired.ProviderIDTalosFallback,
			labels:          map[string]string{},
			requestedLabels: map[string]string{"node-role.kubernetes.io/web": ""},
			providerID:      "talos://metal/192.168.1.10",
		},
		{
			name:            "metal web-1 does not match ^web-[w]+$ (only w's)",
			md:              facts.Platform{Platform: "metal", Hostname: "web-1"},
			labels:          map[string]string{},
			requestedLabels: map[string]string{},
		},
		{
			name:            "nocloud web-www matches only the first rule",
			md:              facts.Platform{Platform: "nocloud", Hostname: "web-www"},
			labels:          map[string]string{"pvc-storage-class/name": "my-storage-class"},
			requestedLabels: map[string]string{},
		},
		{
			name:            "a cloud providerID comes from metadata",
			md:              facts.Platform{Platform: "aws", Hostname: "ip-10-0-0-1", Region: "us-east-1", Zone: "us-east-1a", InstanceType: "t3.small", ProviderID: "aws:///us-east-1a/i-0abc"},
			labels:          map[string]string{"topology.kubernetes.io/region": "us-east-1", "topology.kubernetes.io/zone": "us-east-1a", "node.kubernetes.io/instance-type": "t3.small"},
			requestedLabels: map[string]string{},
			providerID:      "aws:///us-east-1a/i-0abc",
		},
		{
			name:            "metal without the fallback policy gets no providerID",
			md:              facts.Platform{Platform: "metal", Hostname: "web-www"},
			addresses:       []string{"192.168.1.10/24"},
			labels:          map[string]string{},
			requestedLabels: map[string]string{"node-role.kubernetes.io/web": ""},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := Input{Rules: rs, Metadata: tc.md, Policy: tc.policy}
			for _, a := range tc.addresses {
				in.Addresses = append(in.Addresses, netip.MustParsePrefix(a))
			}
			out := Explain(in)
			if !maps.Equal(out.Labels, tc.labels) {
				t.Errorf("labels = %v, want %v", out.Labels, tc.labels)
			}
			if !maps.Equal(out.RequestedLabels, tc.requestedLabels) {
				t.Errorf("requestedLabels = %v, want %v", out.RequestedLabels, tc.requestedLabels)
			}
			if out.ProviderID != tc.providerID {
				t.Errorf("providerID = %q, want %q", out.ProviderID, tc.providerID)
			}
			if len(out.Errors) > 0 {
				t.Errorf("errors: %v", out.Errors)
			}
			if out.PlatformMetadata["platform"] != tc.md.Platform || out.PlatformMetadata["hostname"] != tc.md.Hostname {
				t.Errorf("platformMetadata = %v", out.PlatformMetadata)
			}
		})
	}
}

func TestJSONShape(t *testing.T) {
	md, err := os.ReadFile("testdata/platformmetadata-talosctl.yaml")
	if err != nil {
		t.Fatal(err)
	}
	spec, err := PlatformOf(md)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := Explain(Input{Rules: ccmRules(t), Metadata: spec}).Write(&buf, "json"); err != nil {
		t.Fatal(err)
	}
	var got map[string]json.RawMessage
	if err := json.Unmarshal(buf.Bytes(), &got); err != nil {
		t.Fatal(err)
	}
	keys := slices.Sorted(maps.Keys(got))
	want := []string{"addresses", "annotations", "errors", "labels", "nodeName", "platformMetadata", "prefixes", "providerID", "requestedLabels", "requestedTaints"}
	if !slices.Equal(keys, want) {
		t.Fatalf("keys = %v, want %v", keys, want)
	}
	for k, v := range map[string]string{"errors": "[]", "requestedTaints": "[]", "annotations": "{}", "prefixes": "[]"} {
		if string(got[k]) != v {
			t.Errorf("%s = %s, want %s (empty, not null)", k, got[k], v)
		}
	}
	var pm map[string]any
	if err := json.Unmarshal(got["platformMetadata"], &pm); err != nil {
		t.Fatal(err)
	}
	if pm["instanceType"] != "m5.large" || pm["instanceId"] != "i-0abc" {
		t.Errorf("platformMetadata keys must be camelCase as in Talos: %v", pm)
	}

	// YAML carries the same object.
	buf.Reset()
	if err := Explain(Input{Rules: ccmRules(t), Metadata: spec}).Write(&buf, "yaml"); err != nil {
		t.Fatal(err)
	}
	var y map[string]any
	if err := yaml.Unmarshal(buf.Bytes(), &y); err != nil || len(y) != len(want) {
		t.Fatalf("yaml output %v (%v)", y, err)
	}
	if err := Explain(Input{Rules: ccmRules(t), Metadata: spec}).Write(&buf, "xml"); err == nil {
		t.Fatal("an unknown output format must be refused")
	}
}

func TestReadSpecs(t *testing.T) {
	for _, tc := range []struct {
		file, platform, hostname string
	}{
		{"testdata/platformmetadata-talosctl.yaml", "metal", "web-www"},
		{"testdata/platformmetadata-nocloud.yaml", "nocloud", "pve-1"},
	} {
		data, err := os.ReadFile(tc.file)
		if err != nil {
			t.Fatal(err)
		}
		spec, err := PlatformOf(data)
		if err != nil || spec.Platform != tc.platform || spec.Hostname != tc.hostname {
			t.Errorf("%s: %+v (%v)", tc.file, spec, err)
		}
	}
	data, err := os.ReadFile("testdata/systeminformation-talosctl.yaml")
	if err != nil {
		t.Fatal(err)
	}
	si, err := SystemOf(data)
	if err != nil || si.Manufacturer != "Supermicro" || si.SerialNumber != "S123" {
		t.Errorf("system information: %+v (%v)", si, err)
	}

	for _, bad := range []string{"", "spec: [", "hostname: x\n", "- a\n- b\n"} {
		if _, err := PlatformOf([]byte(bad)); err == nil {
			t.Errorf("PlatformOf(%q) accepted", bad)
		}
	}
}

// TestReadSpecsRefuseUnknownKeys: a key the spec does not have is an
// error naming it and the nearest known key, never silently dropped (a
// serialNumber selector would then match nothing).
func TestReadSpecsRefuseUnknownKeys(t *testing.T) {
	talosctl := func(spec string) string {
		return "node: 172.20.0.2\nmetadata:\n    namespace: hardware\n    id: systeminformation\nspec:\n" + spec
	}
	for _, c := range []struct {
		name, doc string
		read      func([]byte) error
		want      []string
	}{
		{"system information: talosctl's serialnumber, written serialNumber", talosctl("    manufacturer: Supermicro\n    serialNumber: S123\n"),
			readSI, []string{`"serialNumber"`, `"serialnumber"`, "line 7"}},
		{"system information, bare: a typo", "manufacturer: x\nproductname: y\n", readSI, []string{`"productname"`, `"productName"`}},
		{"platform metadata, bare: Go's casing", "platform: metal\ninstanceID: i-1\n", readMD, []string{`"instanceID"`, `"instanceId"`}},
		{"platform metadata, talosctl: a typo", talosctl("    platform: metal\n    hostnme: web-1\n"), readMD, []string{`"hostnme"`, `"hostname"`}},
		{"platform metadata: every unknown key", "platform: metal\nregoin: eu\nzoen: a\n", readMD, []string{`"regoin"`, `"region"`, `"zoen"`, `"zone"`}},
		{"platform metadata: far from anything", "platform: metal\ncolour: red\n", readMD, []string{`"colour"`, "nearest known key", "known keys: platform, hostname"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := c.read([]byte(c.doc))
			if err == nil {
				t.Fatal("accepted")
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %s", err, w)
				}
			}
		})
	}
}

func readSI(b []byte) error { _, err := SystemOf(b); return err }
func readMD(b []byte) error { _, err := PlatformOf(b); return err }

func TestTable(t *testing.T) {
	var buf bytes.Buffer
	out := Explain(Input{Rules: ccmRules(t), Metadata: facts.Platform{Platform: "metal", Hostname: "web-www"}})
	if err := out.Write(&buf, "table"); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"node-role.kubernetes.io/web", "coordinator, if granted", "providerID", "(none)"} {
		if !strings.Contains(buf.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, buf.String())
		}
	}
}
