package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/resources/runtime"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"github.com/talos-nodeinit/talos-nodeinit/pkg/contract"
	"github.com/talos-nodeinit/talos-nodeinit/pkg/harness/syncbuf"
	"github.com/talos-nodeinit/talos-nodeinit/pkg/harness/testnode"
)

// extensionAgent starts the real agent binary as Talos runs an extension
// service: in a mount namespace of its own (its container), so machined's
// authorizer admits it only by the PID its runner records, never because it
// shares a namespace with a registered process. It does not register it.
func extensionAgent(t *testing.T, n *testnode.Node, extra ...string) (cmd *exec.Cmd, logs *syncbuf.Buffer, metrics string) {
	t.Helper()
	metrics = freeAddr(t)
	args := append(append([]string{"--mount", "--propagation", "unchanged", agentBinary(t), "run"}, n.AgentArgs()...),
		append([]string{"--metrics-addr", metrics, "--log-format", "json"}, extra...)...)
	cmd = exec.Command("unshare", args...)
	logs = &syncbuf.Buffer{}
	cmd.Stdout, cmd.Stderr = logs, logs
	if err := cmd.Start(); err != nil {
		t.Fatalf("unshare (util-linux) runs the agent in its own mount namespace: %v", err)
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
	// unshare execs the agent in place: same PID, a new mount namespace once
	// unshare(2) has run. Wait for that before anyone registers the PID.
	self, _ := os.Readlink("/proc/self/ns/mnt")
	waitUntil(t, 5*time.Second, "the agent's own mount namespace", func() bool {
		ns, _ := os.Readlink(fmt.Sprintf("/proc/%d/ns/mnt", cmd.Process.Pid))
		return ns != "" && ns != self
	})
	return cmd, logs, metrics
}

func waitUntil(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	if !eventually(t, d, cond) {
		t.Fatalf("no %s within %s", what, d)
	}
}

// eventually polls cond until it holds (true) or d has passed (false).
func eventually(t testing.TB, d time.Duration, cond func() bool) bool {
	return wait.PollUntilContextTimeout(t.Context(), 50*time.Millisecond, d, true, func(context.Context) (bool, error) {
		return cond(), nil
	}) == nil
}

func readyz(metrics string) (int, string) {
	resp, err := http.Get("http://" + metrics + "/readyz")
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

func zoneIs(t *testing.T, name, zone string) func() bool {
	cs := kubernetes.NewForConfigOrDie(cluster.Admin())
	return func() bool {
		node, err := cs.CoreV1().Nodes().Get(t.Context(), name, metav1.GetOptions{})
		return err == nil && node.Labels[corev1.LabelTopologyZone] == zone
	}
}

func unregisteredNode(t *testing.T, name, ip string) *testnode.Node {
	return testnode.New(t, cluster, testnode.Spec{
		Name: name, NodeIP: netip.MustParseAddr(ip), Unregistered: true,
		Metadata: runtime.PlatformMetadataSpec{Platform: "metal", Hostname: name, Region: "lab", Zone: "zone-1"},
	})
}

// TestAgentAsExtensionService: the real binary, registered as
// ext-nodeinit-agent the way machined's runner records it, reads and watches
// its facts through machined's own socket authorization — across machined
// restarting and the agent restarting with a new PID.
func TestAgentAsExtensionService(t *testing.T) {
	ctx := t.Context()
	n := unregisteredNode(t, "ext-svc", "10.1.0.30")
	setZone := func(z string) {
		t.Helper()
		md := runtime.PlatformMetadataSpec{Platform: "metal", Hostname: n.Name, Region: "lab", Zone: z}
		if err := n.Machined.SetPlatformMetadata(ctx, md); err != nil {
			t.Fatal(err)
		}
	}

	cmd, _, metrics := extensionAgent(t, n)
	n.RegisterAgent(cmd.Process.Pid)
	waitUntil(t, 30*time.Second, "Node labelled from machined's facts", zoneIs(t, n.Name, "zone-1"))
	waitUntil(t, 10*time.Second, "/readyz 200", func() bool { c, _ := readyz(metrics); return c == 200 })

	setZone("zone-2") // the watch
	waitUntil(t, 20*time.Second, "the watched change", zoneIs(t, n.Name, "zone-2"))

	if err := n.Machined.Restart(); err != nil { // machined goes away and comes back
		t.Fatal(err)
	}
	setZone("zone-3")
	waitUntil(t, 30*time.Second, "a change after machined restarted", zoneIs(t, n.Name, "zone-3"))

	// The agent restarts: a new PID (and container), registered anew by the runner.
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	cmd2, _, metrics2 := extensionAgent(t, n)
	if cmd2.Process.Pid == cmd.Process.Pid {
		t.Fatal("the restarted agent has the old PID")
	}
	n.RegisterAgent(cmd2.Process.Pid)
	setZone("zone-4")
	waitUntil(t, 30*time.Second, "a change read by the restarted agent", zoneIs(t, n.Name, "zone-4"))
	waitUntil(t, 10*time.Second, "/readyz 200 after the restart", func() bool { c, _ := readyz(metrics2); return c == 200 })
}

// TestAgentNotRegistered: an agent machined does not run (a static pod) is
// refused. It says so as an error and in /readyz, and does not retry
// silently; with --facts=auto it falls back to the kernel command line, as
// documented, and switches to machined once admitted.
func TestAgentNotRegistered(t *testing.T) {
	t.Run("machined", func(t *testing.T) {
		n := unregisteredNode(t, "static-pod", "10.1.0.31")
		_, logs, metrics := extensionAgent(t, n)
		waitUntil(t, 30*time.Second, "/readyz naming the refusal", func() bool {
			c, body := readyz(metrics)
			return c == http.StatusServiceUnavailable && strings.Contains(body, "machined refused this process")
		})
		if !strings.Contains(logs.String(), `"level":"ERROR","msg":"cannot read facts: run the agent as the Talos system extension, or with --facts=auto`) {
			t.Errorf("the refusal is not an error in the log:\n%s", logs)
		}
		if zoneIs(t, n.Name, "zone-1")() {
			t.Error("a refused agent labelled its Node from facts it cannot have")
		}
	})

	// Under workloadIsolation, Talos v1.14.0-v1.14.1 refuse the agent's
	// ContainerConfig and say nothing of the node's name, and the kernel
	// command line rarely does: the kubelet's client certificate does.
	t.Run("auto without a node name takes the certificate's", func(t *testing.T) {
		n := unregisteredNode(t, "isolated-auto", "10.1.0.33")
		cmdline := filepath.Join(t.TempDir(), "cmdline")
		if err := os.WriteFile(cmdline, []byte("console=ttyS0 talos.platform=metal\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		_, logs, _ := extensionAgent(t, n, "--facts", "auto", "--cmdline-file", cmdline)
		cs := kubernetes.NewForConfigOrDie(cluster.Admin())
		waitUntil(t, 30*time.Second, "the Node's metadata from the kernel command line", func() bool {
			node, err := cs.CoreV1().Nodes().Get(t.Context(), n.Name, metav1.GetOptions{})
			if err != nil {
				return false
			}
			md, err := contract.DecodeMetadata(node.Annotations[contract.AnnotationMetadata])
			return err == nil && md.Platform == "metal"
		})
		for _, want := range []string{"node name from the kubelet's client certificate", "workloadIsolation", "falling back to degraded facts"} {
			if !strings.Contains(logs.String(), want) {
				t.Errorf("the log does not say %q:\n%s", want, logs)
			}
		}
	})

	t.Run("auto falls back, then upgrades", func(t *testing.T) {
		n := unregisteredNode(t, "static-auto", "10.1.0.32")
		cmdline := filepath.Join(t.TempDir(), "cmdline")
		if err := os.WriteFile(cmdline, []byte("console=ttyS0 talos.platform=metal talos.hostname=static-auto\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		cmd, logs, metrics := extensionAgent(t, n, "--facts", "auto", "--cmdline-file", cmdline, "--node-name", n.Name)
		cs := kubernetes.NewForConfigOrDie(cluster.Admin())
		waitUntil(t, 30*time.Second, "the Node's metadata from the kernel command line", func() bool {
			node, err := cs.CoreV1().Nodes().Get(t.Context(), n.Name, metav1.GetOptions{})
			if err != nil {
				return false
			}
			md, err := contract.DecodeMetadata(node.Annotations[contract.AnnotationMetadata])
			return err == nil && md.Platform == "metal" && md.Zone == ""
		})
		if c, body := readyz(metrics); c != http.StatusServiceUnavailable || !strings.Contains(body, "machined refused this process") {
			t.Errorf("/readyz while on fallback facts: %d %q", c, body)
		}
		if zoneIs(t, n.Name, "zone-1")() {
			t.Error("the zone, which only machined knows, is set while machined refuses the agent")
		}
		n.RegisterAgent(cmd.Process.Pid) // now it is the extension
		waitUntil(t, 45*time.Second, "the zone from machined once admitted", zoneIs(t, n.Name, "zone-1"))
		waitUntil(t, 10*time.Second, "/readyz 200 once admitted", func() bool { c, _ := readyz(metrics); return c == 200 })
		if !strings.Contains(logs.String(), "machined accepts this process now") {
			t.Errorf("the switch to machined is not logged:\n%s", logs)
		}
	})
}
