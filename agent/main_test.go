package main

import (
	"bytes"
	"crypto/ed25519"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/resources/runtime"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/talos-nodeinit/talos-nodeinit/pkg/agentkey"
	"github.com/talos-nodeinit/talos-nodeinit/pkg/contract"
	"github.com/talos-nodeinit/talos-nodeinit/pkg/harness/gobuild"
	"github.com/talos-nodeinit/talos-nodeinit/pkg/harness/testcluster"
	"github.com/talos-nodeinit/talos-nodeinit/pkg/harness/testnode"
)

var cluster *testcluster.Cluster

func TestMain(m *testing.M) {
	os.Exit(testcluster.Main(m, &cluster, testcluster.Options{AfterTests: testnode.Close}))
}

func runCmd(args ...string) (int, string, string) {
	var stdout, stderr bytes.Buffer
	code := run(args, &stdout, &stderr)
	return code, stdout.String(), stderr.String()
}

func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

const badRules = `transformations:
- name: broken-regexp
  nodeSelector:
  - matchExpressions:
    - {key: hostname, operator: Regexp, values: ["web-("]}
- name: bad-label
  labels: {"not a key": x}
`

func TestValidate(t *testing.T) {
	code, out, _ := runCmd("validate", "--rules", "testdata/talos-ccm-rules.yaml")
	if code != 0 || !strings.Contains(out, "OK") {
		t.Errorf("valid rules: exit %d, stdout %q", code, out)
	}
	code, _, errOut := runCmd("validate", "--rules", writeFile(t, "bad.yaml", badRules))
	if code != 1 {
		t.Errorf("invalid rules: exit %d, want 1", code)
	}
	for _, want := range []string{"broken-regexp", "hostname", "bad-label", "not a key"} {
		if !strings.Contains(errOut, want) {
			t.Errorf("validate errors must name every rule and field; %q missing from:\n%s", want, errOut)
		}
	}
	if code, _, _ := runCmd("validate"); code != 2 {
		t.Errorf("validate without --rules: exit %d, want 2", code)
	}
}

func TestRunRefusesInvalidRules(t *testing.T) {
	code, _, errOut := runCmd("run", "--rules-file", writeFile(t, "bad.yaml", badRules), "--kubeconfig", "/nonexistent")
	if code != 1 || !strings.Contains(errOut, "invalid rules") || !strings.Contains(errOut, "broken-regexp") {
		t.Errorf("run with invalid rules: exit %d, stderr %q; want exit 1 naming the rule", code, errOut)
	}
	code, _, _ = runCmd("run", "--rules-file", "/nonexistent/rules.yaml")
	if code != 1 {
		t.Errorf("run with an explicitly named missing rules file: exit %d, want 1", code)
	}
	if code, _, errOut := runCmd("run", "--provider-id-policy", "sometimes"); code != 2 || !strings.Contains(errOut, "sometimes") {
		t.Errorf("bad policy: exit %d, stderr %q", code, errOut)
	}
	// A key file that exists but is unusable is never replaced: the
	// coordinator trusts only the key it enrolled.
	badKey := writeFile(t, "agent.key", "not a key\n")
	code, _, errOut = runCmd("run", "--rules-file", "", "--kubeconfig", "/nonexistent", "--key-file", badKey)
	if code != 1 || !strings.Contains(errOut, badKey) || !strings.Contains(errOut, "delete") {
		t.Errorf("run with a malformed key file: exit %d, stderr %q; want exit 1 naming the file and the way out", code, errOut)
	}
	if data, _ := os.ReadFile(badKey); string(data) != "not a key\n" {
		t.Error("the malformed key file was replaced")
	}
	t.Setenv("NODEINIT_LOG_FORMAT", "xml")
	if code, _, errOut := runCmd("run"); code != 2 || !strings.Contains(errOut, "xml") {
		t.Errorf("bad log format from the environment: exit %d, stderr %q", code, errOut)
	}
}

func agentBinary(t testing.TB) string { return gobuild.Binary(t, ".") }

func freeAddr(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// startBinary runs the real agent for a simulated node and waits for /readyz.
func startBinary(t testing.TB, n *testnode.Node, extra ...string) (*exec.Cmd, *bytes.Buffer, string) {
	t.Helper()
	metrics := freeAddr(t)
	args := append(append(n.AgentArgs(), "--metrics-addr", metrics, "--rules-file", "testdata/talos-ccm-rules.yaml"), extra...)
	cmd := exec.Command(agentBinary(t), append([]string{"run"}, args...)...)
	var logs bytes.Buffer
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
		if t.Failed() {
			t.Logf("agent logs:\n%s", logs.String())
		}
	})
	var said string
	if !eventually(t, 30*time.Second, func() bool {
		code, body := readyz(metrics)
		said = body
		return code == 200
	}) {
		t.Fatalf("agent not ready within 30s: %s", said)
	}
	return cmd, &logs, metrics
}

// syncsOK reads the agent's count of successful syncs from its metrics.
func syncsOK(t testing.TB, metrics string) float64 {
	t.Helper()
	resp, err := http.Get("http://" + metrics + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	for line := range strings.SplitSeq(string(body), "\n") {
		if v, ok := strings.CutPrefix(line, `nodeinit_agent_syncs_total{result="ok"} `); ok {
			n, _ := strconv.ParseFloat(v, 64)
			return n
		}
	}
	return 0
}

func simNode(t testing.TB, name, ip string) *testnode.Node {
	return testnode.New(t, cluster, testnode.Spec{
		Name: name, NodeIP: netip.MustParseAddr(ip), Addresses: []string{"203.0.113.20/24", "2001:db8:9::20/64"},
		Metadata: runtime.PlatformMetadataSpec{Platform: "metal", Hostname: name, Region: "lab", Zone: "lab-a"},
	})
}

// The real binary, against the real control plane: it initializes the Node,
// serves metrics, and exits 0 promptly on SIGTERM.
func TestBinaryRunAndSIGTERM(t *testing.T) {
	n := simNode(t, "web-www", "10.1.0.10")
	cmd, logs, metrics := startBinary(t, n, "--provider-id-policy", "talos-fallback", "--log-format", "json")

	node, err := kubernetes.NewForConfigOrDie(cluster.Admin()).CoreV1().Nodes().Get(t.Context(), n.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	md, _ := contract.DecodeMetadata(node.Annotations[contract.AnnotationMetadata])
	if md.SetProviderID != "talos://metal/10.1.0.10" || node.Labels["topology.kubernetes.io/zone"] != "lab-a" {
		t.Errorf("node after ready: the report asks for providerID %q (the coordinator sets it); labels %v", md.SetProviderID, node.Labels)
	}
	if !containsAddr(node.Status.Addresses, corev1.NodeExternalIP, "2001:db8:9::20") {
		t.Errorf("addresses %v", node.Status.Addresses)
	}
	// The agent created its key and published the public half.
	key, err := agentkey.Load(n.KeyFile)
	if err != nil {
		t.Fatalf("--key-file %s: %v", n.KeyFile, err)
	}
	if st, err := os.Stat(n.KeyFile); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("key file: %v %v, want mode 0600", st, err)
	}
	want := contract.EncodeAgentKey(key.Public().(ed25519.PublicKey))
	if md, err := contract.DecodeMetadata(node.Annotations[contract.AnnotationMetadata]); err != nil || md.AgentKey != want {
		t.Errorf("metadata %+v (%v): agentKey must be %s", md, err, want)
	}

	resp, err := http.Get("http://" + metrics + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(body), `nodeinit_agent_writes_total{kind="status",result="ok"} 1`) {
		t.Errorf("metrics lack the one status write:\n%s", body)
	}

	start := time.Now()
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("exit after SIGTERM: %v, want 0", err)
		}
		t.Logf("SIGTERM → exit in %v", time.Since(start))
	case <-time.After(5 * time.Second):
		t.Fatal("no exit within 5s of SIGTERM")
	}
	if !strings.Contains(logs.String(), `"msg":"stopping"`) {
		t.Errorf("logs lack the stop message:\n%s", logs.String())
	}
	if !strings.Contains(logs.String(), want) {
		t.Errorf("the start-up log does not show the public key %s", want)
	}
}

func containsAddr(addrs []corev1.NodeAddress, typ corev1.NodeAddressType, a string) bool {
	for _, x := range addrs {
		if x.Type == typ && x.Address == a {
			return true
		}
	}
	return false
}

// BenchmarkFootprint prints the stripped static binary's size and the
// agent's resident memory in steady state. Targets: ≤ 40 MB, ≤ 30 MiB.
//
//	go test -run '^$' -bench Footprint -benchtime 1x ./agent
func BenchmarkFootprint(b *testing.B) {
	bin := agentBinary(b)
	st, err := os.Stat(bin)
	if err != nil {
		b.Fatal(err)
	}
	n := simNode(b, "footprint", "10.1.0.20")
	cmd, _, metrics := startBinary(b, n)
	// Steady state: ready, and a resync (an admin touches an annotation
	// the agent does not own) done with nothing to write.
	synced := syncsOK(b, metrics)
	poke := []byte(`{"metadata":{"annotations":{"example.com/poke":"1"}}}`)
	if _, err := kubernetes.NewForConfigOrDie(cluster.Admin()).CoreV1().Nodes().Patch(b.Context(), n.Name, types.MergePatchType, poke, metav1.PatchOptions{}); err != nil {
		b.Fatal(err)
	}
	waitUntil(b, 10*time.Second, "resync in steady state", func() bool { return syncsOK(b, metrics) > synced })
	rss, hwm := procMemory(b, cmd.Process.Pid)
	for b.Loop() {
	}
	b.ReportMetric(float64(st.Size())/1e6, "MB-binary")
	b.ReportMetric(rss/1024, "MiB-RSS")
	b.ReportMetric(hwm/1024, "MiB-peak-RSS")
	b.Logf("binary %.1f MB (budget %.0f MB), steady-state RSS %.1f MiB, peak %.1f MiB (target ≤ 30)", float64(st.Size())/1e6, float64(sizeBudget)/1e6, rss/1024, hwm/1024)
}

// procMemory reads VmRSS and VmHWM (KiB) from /proc.
func procMemory(t testing.TB, pid int) (rss, hwm float64) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.SplitSeq(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		v, _ := strconv.ParseFloat(f[1], 64)
		switch f[0] {
		case "VmRSS:":
			rss = v
		case "VmHWM:":
			hwm = v
		}
	}
	return rss, hwm
}

// TestValidateFilesUsersHave: validate reads the files users have, under
// --rules-file (run's spelling) or the older --rules, and every problem is
// reported at its file, line and column with a fix; exit 1 on any.
func TestValidateFilesUsersHave(t *testing.T) {
	cases := []struct {
		name string
		args []string
		code int
		want []string
	}{
		{"the shipped ExtensionServiceConfig", []string{"--rules-file", "../extension/patches/rules.yaml"}, 0,
			[]string{"../extension/patches/rules.yaml: OK: ExtensionServiceConfig nodeinit-agent", `1 rules ["transformations[0] (web-nodes)"]`}},
		{"the deprecated --rules spelling", []string{"--rules", "../extension/patches/rules.yaml"}, 0, []string{"OK"}},
		{"a machine config", []string{"--rules-file", "../pkg/rulesource/testdata/machineconfig-worker.yaml"}, 0, []string{"OK: Talos machine config"}},
		{"Talos CCM's ConfigMap", []string{"--rules-file", "../pkg/rulesource/testdata/talos-ccm-configmap.yaml"}, 0, []string{"OK: Talos CCM ConfigMap"}},
		{"Talos CCM's development config", []string{"--rules-file", "../pkg/rules/testdata/talos-ccm/hack-ccm-config.yaml"}, 0, []string{"OK: rules file"}},
		{"Talos CCM's documented config", []string{"--rules-file", "../pkg/rules/testdata/talos-ccm/config-md-quoted.yaml"}, 1, []string{
			"config-md-quoted.yaml:6:3: global: unknown key \"PreferIPv6\"; keys are case-sensitive: write preferIPv6",
			"config-md-quoted.yaml:71:7: transformations[1] (web-nodes): features.publicIPDiscovery: not supported",
			"nodeinit-agent migrate --from-talos-ccm",
		}},
		{"label value with spaces", []string{"--rules-file", "spaces.yaml"}, 1, []string{`spaces.yaml:3:12: transformations[0] (team): labels[example.com/team]: label value "web team"`, `did you mean "web-team"?`}},
		{"indentation error on line 5", []string{"--rules-file", "indent.yaml"}, 1, []string{"indent.yaml:5:4: invalid YAML"}},
	}
	dir := t.TempDir()
	files := map[string]string{
		"spaces.yaml": "transformations:\n- name: team\n  labels: {example.com/team: web team}\n",
		"indent.yaml": "transformations:\n- name: a\n  labels:\n    a: b\n   c: d\n",
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			args := slices.Clone(c.args)
			if _, ok := files[args[1]]; ok {
				args[1] = filepath.Join(dir, args[1])
			}
			code, out, errOut := runCmd(append([]string{"validate"}, args...)...)
			if code != c.code {
				t.Fatalf("exit %d, want %d\nstdout: %s\nstderr: %s", code, c.code, out, errOut)
			}
			for _, w := range c.want {
				if !strings.Contains(out+errOut, w) {
					t.Errorf("output lacks %q:\nstdout: %s\nstderr: %s", w, out, errOut)
				}
			}
		})
	}
}

// TestMigrateCommand: migrate prints the agent's ExtensionServiceConfig on
// stdout (validate accepts it), writes the coordinator fragment, and lists
// every difference on stderr at its line; a file needing a person exits 1.
func TestMigrateCommand(t *testing.T) {
	frag := filepath.Join(t.TempDir(), "coordinator.yaml")
	code, out, errOut := runCmd("migrate", "--from-talos-ccm", "../pkg/rules/testdata/talos-ccm/config-md-quoted.yaml", "--coordinator-out", frag)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, want := range []string{"config-md-quoted.yaml:6:3: global.PreferIPv6 dropped", "config-md-quoted.yaml:71:7: features.publicIPDiscovery dropped", "wrote the coordinator configuration fragment to " + frag} {
		if !strings.Contains(errOut, want) {
			t.Errorf("stderr lacks %q:\n%s", want, errOut)
		}
	}
	patch := writeFile(t, "nodeinit-rules.yaml", out)
	if code, vout, verr := runCmd("validate", "--rules-file", patch); code != 0 || !strings.Contains(vout, "OK: ExtensionServiceConfig") {
		t.Errorf("validate on migrate's output: exit %d\n%s%s", code, vout, verr)
	}
	fragment, err := os.ReadFile(frag)
	if err != nil || !strings.Contains(string(fragment), "adoptExisting: true") {
		t.Errorf("fragment %q (%v)", fragment, err)
	}
	code, _, errOut = runCmd("migrate", "--from-talos-ccm", "../pkg/rules/testdata/talos-ccm/rules-yaml.yaml")
	if code != 1 || !strings.Contains(errOut, `rules-yaml.yaml:31:9: transformations[0] (oracle): labels[talos.dev/zone"]: invalid label key`) {
		t.Errorf("migrate of a file with an invalid key: exit %d\n%s", code, errOut)
	}
	if code, _, _ := runCmd("migrate"); code != 2 {
		t.Errorf("migrate without --from-talos-ccm: exit %d, want 2", code)
	}
}
