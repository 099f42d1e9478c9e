package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"

	"github.com/talos-nodeinit/talos-nodeinit/pkg/contract"
	"github.com/talos-nodeinit/talos-nodeinit/pkg/harness/gobuild"
	"github.com/talos-nodeinit/talos-nodeinit/pkg/harness/kubeapply"
	"github.com/talos-nodeinit/talos-nodeinit/pkg/harness/kubeletsim"
	"github.com/talos-nodeinit/talos-nodeinit/pkg/harness/syncbuf"
	"github.com/talos-nodeinit/talos-nodeinit/pkg/harness/testcluster"
)

var cluster *testcluster.Cluster

func TestMain(m *testing.M) {
	os.Exit(testcluster.Main(m, &cluster, testcluster.Options{ControllerManager: true}))
}

func runCmd(args ...string) (int, string, string) {
	var stdout, stderr bytes.Buffer
	code := run(args, &stdout, &stderr)
	return code, stdout.String(), stderr.String()
}

func TestValidateAndBadConfig(t *testing.T) {
	dir := t.TempDir()
	good, bad := filepath.Join(dir, "good.yaml"), filepath.Join(dir, "bad.yaml")
	_ = os.WriteFile(good, []byte("ipam: {ipv4Pool: 10.244.0.0/16}\n"), 0o600)
	_ = os.WriteFile(bad, []byte("ipam: {ipv4Pool: nonsense}\ncsr: {onTimeout: maybe}\n"), 0o600)
	if code, out, _ := runCmd("validate", "--config", good); code != 0 || !strings.Contains(out, "OK") {
		t.Errorf("valid config: %d %q", code, out)
	}
	code, _, errOut := runCmd("validate", "--config", bad)
	if code != 1 || !strings.Contains(errOut, "ipv4Pool") || !strings.Contains(errOut, "onTimeout") {
		t.Errorf("invalid config: exit %d, %q; want 1 naming every error", code, errOut)
	}
	if code, _, errOut := runCmd("run", "--config", bad, "--metrics-addr", ""); code != 1 || !strings.Contains(errOut, "invalid configuration") {
		t.Errorf("run with an invalid config: exit %d, %q", code, errOut)
	}
}

// coordinatorBinary builds this package's binary, or returns
// $NODEINIT_COORDINATOR_BINARY: an attack can then be replayed against
// another build (an older release, to see it fail there).
func coordinatorBinary(t testing.TB) string {
	if bin := os.Getenv("NODEINIT_COORDINATOR_BINARY"); bin != "" {
		return bin
	}
	return gobuild.Binary(t, ".")
}

type proc struct {
	id   string
	cmd  *exec.Cmd
	logs *syncbuf.Buffer
}

// lookedAgain touches Node name (an annotation of the test's own) and
// waits until the coordinator's log says it synced that version, its
// serving CSRs with it: everything before has been looked at, and what
// did not happen then is not about to.
func (p *proc) lookedAgain(t *testing.T, name string) {
	t.Helper()
	patch := fmt.Sprintf(`{"metadata":{"annotations":{"test.nodeinit.io/touched":%q}}}`, time.Now().Format(time.RFC3339Nano))
	n, err := adminClient().CoreV1().Nodes().Patch(t.Context(), name, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
	if err != nil {
		t.Fatal(err)
	}
	marker := fmt.Sprintf(`msg="node synced" node=%s resourceVersion=%s`, name, n.ResourceVersion)
	until(t, 20*time.Second, name+" synced at "+n.ResourceVersion, func() bool { return strings.Contains(p.logs.String(), marker) })
}

// startProcess runs the real coordinator binary as its ServiceAccount.
func startProcess(t *testing.T, id, kubeconfig, configFile string) *proc {
	t.Helper()
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	metrics := ln.Addr().String()
	ln.Close()
	p := &proc{id: id, logs: &syncbuf.Buffer{}}
	p.cmd = exec.Command(coordinatorBinary(t), "run", "--kubeconfig", kubeconfig, "--config", configFile, "--id", id,
		"--lease-duration", "4s", "--renew-deadline", "3s", "--retry-period", "250ms", "--metrics-addr", metrics, "--log-level", "debug")
	p.cmd.Stdout, p.cmd.Stderr = p.logs, p.logs
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if p.cmd.ProcessState == nil {
			_ = p.cmd.Process.Kill()
			_ = p.cmd.Wait()
		}
		if t.Failed() {
			t.Logf("%s logs:\n%s", id, p.logs.String())
		}
	})
	return p
}

func holder(t testing.TB, cs kubernetes.Interface) string {
	lease, err := cs.CoordinationV1().Leases("kube-system").Get(t.Context(), "nodeinit-coordinator", metav1.GetOptions{})
	if apierrors.IsNotFound(err) || err != nil || lease.Spec.HolderIdentity == nil {
		return ""
	}
	return *lease.Spec.HolderIdentity
}

// join registers a node like a kubelet and publishes what its agent would.
func join(t testing.TB, name string, ip netip.Addr) error {
	id, err := cluster.NodeIdentity(name)
	if err != nil {
		return err
	}
	if _, err := kubeletsim.Register(t.Context(), kubeletsim.Config{NodeName: name, NodeIPs: []netip.Addr{ip}, Identity: id.Config()}); err != nil {
		return err
	}
	self := kubernetes.NewForConfigOrDie(id.Config())
	md, _ := contract.EncodeMetadata(contract.Metadata{Platform: "metal", Hostname: name})
	six := netip.AddrFrom16([16]byte{0x20, 0x01, 0x0d, 0xb8, 0, 0xf0, 0, 0, 0, 0, 0, 0, 0, 0, ip.As4()[2], ip.As4()[3]})
	prefixes, _ := contract.EncodePrefixes([]netip.Prefix{netip.MustParsePrefix("2001:db8:f0::/64")})
	status, _ := json.Marshal(map[string]any{"status": map[string]any{"addresses": []corev1.NodeAddress{
		{Type: corev1.NodeInternalIP, Address: ip.String()}, {Type: corev1.NodeExternalIP, Address: six.String()}, {Type: corev1.NodeHostName, Address: name},
	}}})
	if _, err := self.CoreV1().Nodes().Patch(t.Context(), name, types.MergePatchType, status, metav1.PatchOptions{}, "status"); err != nil {
		return err
	}
	meta, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{
		contract.AnnotationMetadata: md, contract.AnnotationPrefixes: prefixes,
	}}})
	_, err = self.CoreV1().Nodes().Patch(t.Context(), name, types.MergePatchType, meta, metav1.PatchOptions{})
	return err
}

func joinMany(t *testing.T, prefix string, from, n int) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, n)
	sem := make(chan struct{}, 8)
	for i := from; i < from+n; i++ {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			if err := join(t, fmt.Sprintf("%s-%03d", prefix, i), netip.AddrFrom4([4]byte{10, 9, byte(i / 250), byte(i%250 + 1)})); err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

// allInitialized checks every node with the prefix, and that no pod CIDR
// was ever given twice across the whole cluster.
func allInitialized(t testing.TB, cs kubernetes.Interface, prefix string, want int) (bool, string) {
	list, err := cs.CoreV1().Nodes().List(t.Context(), metav1.ListOptions{})
	if err != nil {
		return false, err.Error()
	}
	seen := map[string]string{}
	var done, total int
	for _, n := range list.Items {
		for _, c := range n.Spec.PodCIDRs {
			if other, dup := seen[c]; dup {
				t.Fatalf("pod CIDR %s assigned to both %s and %s", c, other, n.Name)
			}
			seen[c] = n.Name
		}
		if !strings.HasPrefix(n.Name, prefix) {
			continue
		}
		total++
		if len(n.Spec.PodCIDRs) == 2 && !slices.ContainsFunc(n.Spec.Taints, func(t corev1.Taint) bool { return t.Key == contract.TaintUninitialized }) {
			done++
		}
	}
	return total == want && done == want, fmt.Sprintf("%d/%d of %d initialized", done, total, want)
}

func waitAll(t *testing.T, cs kubernetes.Interface, prefix string, want int, timeout time.Duration) time.Duration {
	t.Helper()
	status := ""
	defer func() {
		if t.Failed() {
			t.Log(status)
		}
	}()
	return until(t, timeout, "all "+prefix+"* nodes initialized", func() (ok bool) {
		ok, status = allInitialized(t, cs, prefix, want)
		return ok
	})
}

// Two real coordinator processes; the leader is killed with SIGKILL during a
// burst of 100 joins. The standby takes over, no CIDR is assigned twice,
// and every node finishes. Then a fresh process rebuilds from Nodes alone.
func TestFailoverAndRestart(t *testing.T) {
	admin := kubernetes.NewForConfigOrDie(cluster.Admin())
	kc := coordinatorKubeconfig(t, "coordinator")
	cfg := filepath.Join(t.TempDir(), "coordinator.yaml")
	if err := os.WriteFile(cfg, []byte("ipam:\n  ipv4Pool: 10.244.0.0/16\n  ipv6Pool: fd00:10:244::/64\n  serviceCIDRs: [10.96.0.0/16]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	coordinatorBinary(t)
	procs := map[string]*proc{}
	for _, id := range []string{"coord-1", "coord-2"} {
		procs[id] = startProcess(t, id, kc, cfg)
	}
	var leader string
	waitFor := func(what string, timeout time.Duration, cond func() bool) time.Duration {
		return until(t, timeout, what, cond)
	}
	waitFor("a leader", 20*time.Second, func() bool { leader = holder(t, admin); return procs[leader] != nil })
	t.Logf("leader: %s", leader)

	burst := make(chan struct{})
	go func() { defer close(burst); joinMany(t, "burst", 0, 100) }()
	waitFor("the burst under way: ten nodes initialized", 30*time.Second, func() bool {
		list, err := admin.CoreV1().Nodes().List(t.Context(), metav1.ListOptions{})
		done := 0
		for _, n := range list.Items {
			if err == nil && strings.HasPrefix(n.Name, "burst-") && !contract.Uninitialized(&n) {
				done++
			}
		}
		return done >= 10
	})
	killed := time.Now()
	if err := procs[leader].cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = procs[leader].cmd.Wait()
	var next string
	waitFor("takeover", 30*time.Second, func() bool { next = holder(t, admin); return next != "" && next != leader })
	takeover := time.Since(killed)
	<-burst
	all := waitAll(t, admin, "burst-", 100, 60*time.Second)
	t.Logf("SIGKILL of leader %s → %s holds the lease after %v (lease duration 4s); all 100 nodes initialized %v after the burst ended",
		leader, next, takeover.Round(time.Millisecond), all.Round(time.Millisecond))

	// Restart: a fresh process rebuilds from spec.podCIDRs and allocates
	// nothing twice.
	if err := procs[next].cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := procs[next].cmd.Wait(); err != nil {
		t.Errorf("SIGTERM: %v, want exit 0", err)
	}
	start := time.Now()
	startProcess(t, "coord-3", kc, cfg)
	waitFor("coord-3 leads", 20*time.Second, func() bool { return holder(t, admin) == "coord-3" })
	t.Logf("restart: coord-3 leads %v after start (the lease was released on SIGTERM)", time.Since(start).Round(time.Millisecond))
	joinMany(t, "after", 200, 10)
	waitAll(t, admin, "after-", 10, 30*time.Second)
	waitAll(t, admin, "burst-", 100, time.Second)
}

// coordinator/deploy applies as shipped, lists every file in its
// kustomization, and its admission policy stops a node from grabbing pod
// CIDRs while the coordinator's ServiceAccount may still set them.
func TestDeployManifests(t *testing.T) {
	data, err := os.ReadFile("deploy/kustomization.yaml")
	if err != nil {
		t.Fatal(err)
	}
	objs, err := kubeapply.Objects(data)
	if err != nil {
		t.Fatal(err)
	}
	resources, _, _ := unstructuredStrings(objs[0].Object, "resources")
	files, _ := filepath.Glob("deploy/*.yaml")
	for _, f := range files {
		if filepath.Base(f) != "kustomization.yaml" {
			if !slices.Contains(resources, filepath.Base(f)) {
				t.Errorf("%s is not listed in deploy/kustomization.yaml", f)
			}
		}
	}
	// Exactly what `kubectl apply -k` would send: kubectl kustomize's output.
	kubectl, err := exec.LookPath("kubectl")
	if err != nil {
		t.Fatal("this test renders coordinator/deploy with `kubectl kustomize`: install kubectl (https://kubernetes.io/docs/tasks/tools/)")
	}
	rendered, err := exec.Command(kubectl, "kustomize", "deploy").Output()
	if err != nil {
		t.Fatalf("kubectl kustomize deploy: %v", err)
	}
	objs, err = kubeapply.Objects(rendered)
	if err != nil {
		t.Fatal(err)
	}
	if len(objs) < 10 {
		t.Fatalf("kustomize rendered %d objects", len(objs))
	}
	if err := kubeapply.Apply(t.Context(), cluster.Admin(), objs); err != nil {
		t.Fatal(err)
	}
	admin := kubernetes.NewForConfigOrDie(cluster.Admin())
	dep, err := admin.AppsV1().Deployments("kube-system").Get(t.Context(), "nodeinit-coordinator", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if *dep.Spec.Replicas != 2 || !dep.Spec.Template.Spec.HostNetwork || *dep.Spec.Template.Spec.SecurityContext.RunAsNonRoot != true {
		t.Errorf("deployment: replicas %d hostNetwork %v", *dep.Spec.Replicas, dep.Spec.Template.Spec.HostNetwork)
	}

	id, err := cluster.NodeIdentity("vap-node")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kubeletsim.Register(t.Context(), kubeletsim.Config{NodeName: "vap-node", NodeIPs: []netip.Addr{netip.MustParseAddr("10.8.0.1")}, Identity: id.Config()}); err != nil {
		t.Fatal(err)
	}
	grab := []byte(`{"spec":{"podCIDR":"10.244.250.0/24","podCIDRs":["10.244.250.0/24"]}}`)
	self := kubernetes.NewForConfigOrDie(id.Config())
	// The policy takes effect within a second or two of its creation; wait
	// for it with dry runs, which go through admission but change nothing.
	until(t, 20*time.Second, "the policy refusing a dry run", func() bool {
		_, err := self.CoreV1().Nodes().Patch(t.Context(), "vap-node", types.MergePatchType, grab, metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}})
		return err != nil
	})
	_, err = self.CoreV1().Nodes().Patch(t.Context(), "vap-node", types.MergePatchType, grab, metav1.PatchOptions{})
	if err == nil || !strings.Contains(err.Error(), "nodes may not set spec.podCIDR") {
		t.Fatalf("node setting its own podCIDRs: %v, want the policy's refusal", err)
	}
	sa, err := cluster.ServiceAccountIdentity(t.Context(), "kube-system", "nodeinit-coordinator")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kubernetes.NewForConfigOrDie(sa).CoreV1().Nodes().Patch(t.Context(), "vap-node", types.MergePatchType, grab, metav1.PatchOptions{}); err != nil {
		t.Errorf("the coordinator's ServiceAccount may set podCIDRs: %v", err)
	}
}

func unstructuredStrings(obj map[string]any, key string) ([]string, bool, error) {
	raw, ok := obj[key].([]any)
	var out []string
	for _, r := range raw {
		if s, ok := r.(string); ok {
			out = append(out, s)
		}
	}
	return out, ok, nil
}

// With --log-format json every line is JSON, client-go's own (klog) lines
// included: leader election logs through klog.
func TestJSONLogsIncludeClientGo(t *testing.T) {
	kc := coordinatorKubeconfig(t, "coordinator-json")
	cfg := filepath.Join(t.TempDir(), "coordinator.yaml")
	if err := os.WriteFile(cfg, []byte("ipam: {ipv4Pool: 10.244.0.0/16}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var logs syncbuf.Buffer
	cmd := exec.Command(coordinatorBinary(t), "run", "--kubeconfig", kc, "--config", cfg, "--id", "json-logs", "--log-format", "json",
		"--lease-name", "json-logs", "--metrics-addr", "")
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Signal(syscall.SIGTERM); _ = cmd.Wait() }()
	defer func() {
		if t.Failed() {
			t.Logf("logs:\n%s", logs.String())
		}
	}()
	until(t, 20*time.Second, "a leader-election line", func() bool {
		return strings.Contains(logs.String(), "acquire") || strings.Contains(logs.String(), "successfully acquired lease")
	})
	for _, line := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
		if !json.Valid([]byte(line)) {
			t.Errorf("not JSON: %s", line)
		}
	}
}

// coordinatorKubeconfig applies the shipped RBAC and NodeRecord resource
// and writes a kubeconfig for the coordinator's ServiceAccount under name.
func coordinatorKubeconfig(t *testing.T, name string) string {
	t.Helper()
	if err := kubeapply.Files(t.Context(), cluster.Admin(), "deploy/noderecords.yaml", "deploy/rbac.yaml"); err != nil {
		t.Fatal(err)
	}
	sa, err := cluster.ServiceAccountIdentity(t.Context(), "kube-system", "nodeinit-coordinator")
	if err != nil {
		t.Fatal(err)
	}
	kc, err := cluster.WriteKubeconfig(name, sa)
	if err != nil {
		t.Fatal(err)
	}
	return kc
}

// run, called in-process as the tests here call it, must not write
// process-wide state another goroutine reads: client-go goroutines other
// tests left behind (a certificate manager, a reflector) log through klog
// at any moment. go test -race fails this on a run that sets klog's logger
// unsynchronized.
func TestRunInProcessLeavesKlogToOthers(t *testing.T) {
	stop, done := make(chan struct{}), make(chan struct{})
	go func() { // what a leftover client-go goroutine does
		defer close(done)
		for {
			select {
			case <-stop:
				return
			default:
				klog.InfoS("certificate rotation: waiting")
				time.Sleep(time.Millisecond)
			}
		}
	}()
	defer func() { close(stop); <-done }()
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	_ = os.WriteFile(bad, []byte("ipam: {ipv4Pool: nonsense}\n"), 0o600)
	for range 3 {
		if code, _, errOut := runCmd("run", "--config", bad, "--metrics-addr", ""); code != 1 || !strings.Contains(errOut, "invalid configuration") {
			t.Fatalf("run with an invalid config: exit %d, %q", code, errOut)
		}
	}
}
