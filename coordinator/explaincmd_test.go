package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const (
	ccmRules = "../agent/testdata/talos-ccm-rules.yaml"
	testdata = "explain/testdata/"
)

func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestExplainCommand(t *testing.T) {
	code, out, errOut := runCmd("explain", "--rules-file", ccmRules,
		"--platform-metadata", testdata+"platformmetadata-talosctl.yaml",
		"--system-information", testdata+"systeminformation-talosctl.yaml",
		"--addresses", "192.168.1.10/24,2001:db8::10/64", "--provider-id-policy", "talos-fallback", "-o", "json")
	if code != 0 {
		t.Fatalf("explain: exit %d: %s", code, errOut)
	}
	var got struct {
		Labels          map[string]string `json:"labels"`
		RequestedLabels map[string]string `json:"requestedLabels"`
		ProviderID      string            `json:"providerID"`
		Errors          []string          `json:"errors"`
	}
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("explain -o json is not one JSON object: %v\n%s", err, out)
	}
	if _, ok := got.RequestedLabels["node-role.kubernetes.io/web"]; !ok || got.Labels["topology.kubernetes.io/zone"] != "eu-central-1" ||
		got.ProviderID != "talos://metal/192.168.1.10" || len(got.Errors) != 0 {
		t.Errorf("explain output: %+v", got)
	}
	if code, _, errOut := runCmd("explain", "--platform-metadata", writeFile(t, "md.yaml", "hostname: x\n")); code != 1 || !strings.Contains(errOut, "no platform") {
		t.Errorf("explain with metadata lacking a platform: exit %d, stderr %q", code, errOut)
	}
	if code, _, errOut := runCmd("explain"); code != 2 || !strings.Contains(errOut, "--platform-metadata FILE is required") {
		t.Errorf("explain without --platform-metadata: exit %d, want 2: %q", code, errOut)
	}
	if code, _, errOut := runCmd("explain", "--nope"); code != 2 || !strings.Contains(errOut, "unknown flag: --nope\nRun 'nodeinit-coordinator explain --help' for usage.\n") {
		t.Errorf("explain's bad flag: exit %d, %q", code, errOut)
	}
	// --help lists one-letter flags as -o and the others as --name.
	if code, _, errOut := runCmd("explain", "--help"); code != 0 || !strings.Contains(errOut, "\n  -o string\n") || strings.Contains(errOut, "--o ") ||
		!strings.Contains(errOut, "\n  --platform-metadata FILE\n") || !strings.Contains(errOut, "\n  --config FILE\n") {
		t.Errorf("explain --help: exit %d\n%s", code, errOut)
	}
}

// TestExplainSeveralNodesWithCoordinator: explain takes a multi-node talosctl
// output (one section per node), the coordinator's configuration (or its
// ConfigMap), any rules source under --rules-file, and exits 1 when it shows
// an error.
func TestExplainSeveralNodesWithCoordinator(t *testing.T) {
	code, out, errOut := runCmd("explain", "--rules-file", "../extension/patches/rules.yaml",
		"--platform-metadata", testdata+"platformmetadata-multi.yaml",
		"--config", "deploy/configmap.yaml", "-o", "table")
	if code != 1 {
		t.Errorf("exit %d, want 1: node 172.20.0.3's zone \"rack 1\" is no label value\n%s%s", code, out, errOut)
	}
	web, pve, ok := strings.Cut(out, "== node 172.20.0.3 (pve-1)")
	if !ok || !strings.Contains(web, "== node 172.20.0.2 (web-www)") {
		t.Fatalf("no section per node:\n%s", out)
	}
	for _, want := range []string{"node-role.kubernetes.io/web", "coordinator", "InternalIP", "172.20.0.2", "node.cloudprovider.kubernetes.io/platform",
		"ipv4: a /24 from the pool 10.244.0.0/16", "node.cloudprovider.kubernetes.io/uninitialized"} {
		if !strings.Contains(web, want) {
			t.Errorf("web-www's section lacks %q:\n%s", want, web)
		}
	}
	if !strings.Contains(pve, `metadata zone "rack 1" is not a valid label value`) || !strings.Contains(pve, "node.cloudprovider.kubernetes.io/lifecycle") {
		t.Errorf("pve-1's section:\n%s", pve)
	}
	if !strings.Contains(errOut, "errors") {
		t.Errorf("stderr does not say why the exit code is 1: %q", errOut)
	}
	// One node without errors: exit 0.
	code, _, errOut = runCmd("explain", "--rules-file", ccmRules, "--platform-metadata", testdata+"platformmetadata-talosctl.yaml")
	if code != 0 {
		t.Errorf("exit %d: %s", code, errOut)
	}
	if code, _, errOut := runCmd("explain", "--platform-metadata", testdata+"platformmetadata-multi.yaml", "--addresses", "10.0.0.1/24"); code != 2 || !strings.Contains(errOut, "--addresses") {
		t.Errorf("--addresses with several nodes: exit %d %q", code, errOut)
	}
}

// explain reads the agent's settings from the document's environment, as
// the agent's run does (the last entry of a name): a migration patch's
// NODEINIT_PROVIDER_ID_POLICY=talos-fallback appended after the install's
// metadata shows in explain's providerID.
func TestExplainReadsTheDocumentsEnvironment(t *testing.T) {
	const escHead = "apiVersion: v1alpha1\nkind: ExtensionServiceConfig\nname: nodeinit-agent\nconfigFiles:\n" +
		"  - mountPath: /usr/local/etc/nodeinit/rules.yaml\n    content: |\n      transformations: []\nenvironment:\n"
	doc := writeFile(t, "merged.yaml", escHead+"  - NODEINIT_PROVIDER_ID_POLICY=metadata\n  - NODEINIT_PROVIDER_ID_POLICY=talos-fallback\n")
	md := writeFile(t, "md.yaml", "platform: metal\nhostname: w1\n")
	code, out, errOut := runCmd("explain", "--rules-file", doc, "--platform-metadata", md, "--addresses", "192.168.1.10/24", "-o", "json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if !strings.Contains(out, `"providerID": "talos://metal/192.168.1.10"`) || !strings.Contains(errOut, "provider-id-policy talos-fallback, from "+doc+":10") {
		t.Errorf("explain with the merged document's environment:\nstdout %s\nstderr %s", out, errOut)
	}
	// The command line still wins.
	if code, out, _ := runCmd("explain", "--rules-file", doc, "--platform-metadata", md, "--addresses", "192.168.1.10/24", "--provider-id-policy", "never", "-o", "json"); code != 0 || strings.Contains(out, "talos://") {
		t.Errorf("--provider-id-policy never: exit %d, %s", code, out)
	}
}
