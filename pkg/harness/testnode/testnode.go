// Package testnode assembles one simulated Talos node for tests and
// benchmarks: a network namespace holding its addresses, its machined in the
// real-authorizer stand-in (hack/machined: Talos's own socket authorization)
// serving its platform metadata, a node client identity, and a kubelet
// stand-in that has registered its Node. An agent pointed at it (in-process
// or the real binary, with AgentArgs) sees exactly what it would on Talos.
package testnode

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"

	talosruntime "github.com/siderolabs/talos/pkg/machinery/resources/runtime"

	"github.com/talos-nodeinit/talos-nodeinit/pkg/harness/kubeletsim"
	"github.com/talos-nodeinit/talos-nodeinit/pkg/harness/machined"
	"github.com/talos-nodeinit/talos-nodeinit/pkg/harness/spawn"
	"github.com/talos-nodeinit/talos-nodeinit/pkg/harness/testcluster"
	"github.com/talos-nodeinit/talos-nodeinit/pkg/netaddr/netnstest"
)

// Spec describes a node.
type Spec struct {
	Name string
	// NodeIP is the kubelet's --node-ip; it is put on eth0 as a /24.
	NodeIP netip.Addr
	// Addresses are further CIDRs on eth0 (IPv6 ones skip DAD).
	Addresses []string
	Metadata  talosruntime.PlatformMetadataSpec
	// Unregistered leaves the agent's extension service unregistered. By
	// default New registers this test process (os.Getpid()) as
	// ext-nodeinit-agent, for agents run in-process; a test that starts the
	// real binary calls RegisterAgent with its PID once started.
	//
	// Talos lets ext-* services match by mount namespace too (processes
	// forked in the extension's container), and every process here shares
	// the host's: once any PID of this machine is registered, every other
	// process of it is admitted as well. A test of the refusal must leave the
	// node Unregistered.
	Unregistered bool
}

// Node is a running simulated node; everything stops when the test ends.
type Node struct {
	Spec
	NS       *netnstest.NS
	Machined *machined.Node
	Identity *testcluster.NodeIdentity
	Kubelet  *kubeletsim.Kubelet
	// KeyFile is where the node's agent keeps its key (not yet created): the
	// same file for every agent started on the node, as on a real node.
	KeyFile string

	t testing.TB
}

// The stand-in is one process per test binary, started by the first New and
// shared by every node of every test (each node has its own state and
// sockets). It is never stopped by a test: it dies with the test binary
// (Pdeathsig SIGKILL, including on kill -9 of the test), which leaves only
// its socket directory in /tmp; a TestMain may call Close after m.Run to
// remove that too.
//
// It is forked on pkg/harness/spawn's immortal thread, as testcluster's
// processes are, so that Pdeathsig stays tied to the test binary.
var (
	shared     *machined.Process
	sharedErr  error
	sharedOnce sync.Once
	seq        atomic.Int64
)

func process() (*machined.Process, error) {
	sharedOnce.Do(func() {
		spawn.Do(func() { shared, sharedErr = machined.Start(os.Stderr) })
	})
	return shared, sharedErr
}

// Close stops the shared stand-in, if one was started. For a TestMain, after
// m.Run; nodes created afterwards fail.
func Close() {
	sharedOnce.Do(func() { sharedErr = fmt.Errorf("testnode: closed") })
	if shared != nil {
		shared.Close()
	}
}

// New builds the node and registers it with the cluster.
func New(t testing.TB, c *testcluster.Cluster, spec Spec) *Node {
	t.Helper()
	ctx := t.Context()
	n := &Node{Spec: spec, NS: netnstest.New(t), KeyFile: filepath.Join(t.TempDir(), "nodeinit", "agent.key"), t: t}
	n.NS.AddIFB("eth0")
	n.NS.AddAddr("eth0", netip.PrefixFrom(spec.NodeIP, 24).String())
	for _, a := range spec.Addresses {
		p := netip.MustParsePrefix(a)
		if p.Addr().Is6() {
			n.NS.AddAddr("eth0", a, "nodad")
		} else {
			n.NS.AddAddr("eth0", a)
		}
	}
	p, err := process()
	if err != nil {
		t.Fatal(err)
	}
	// The stand-in's node name is a key: unique per New, so a node name used
	// again (-count, another test) gets a fresh machined state.
	key := fmt.Sprintf("%s-%d", spec.Name, seq.Add(1))
	md, err := p.Node(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	n.Machined = md
	for _, err := range []error{
		md.SetPlatformMetadata(ctx, spec.Metadata),
		md.SetNodename(ctx, spec.Name),
		md.SetNodeIPs(ctx, spec.NodeIP),
	} {
		if err != nil {
			t.Fatal(err)
		}
	}
	if !spec.Unregistered {
		n.RegisterAgent(os.Getpid())
	}
	if n.Identity, err = c.NodeIdentity(spec.Name); err != nil {
		t.Fatal(err)
	}
	n.Kubelet, err = kubeletsim.Register(ctx, kubeletsim.Config{
		NodeName: spec.Name, NodeIPs: []netip.Addr{spec.NodeIP}, Identity: n.Identity.Config(), CertDir: t.TempDir(),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.Kubelet.Stop)
	return n
}

// RegisterAgent records pid as the node's ext-nodeinit-agent service, as
// machined's runner does when it starts the extension: call it right after
// starting the real agent binary (cmd.Start), and again after restarting it.
// It fails the test on error, so call it from the test's goroutine.
func (n *Node) RegisterAgent(pid int) {
	n.t.Helper()
	if err := n.Machined.RegisterAgent(context.Background(), pid); err != nil {
		n.t.Fatalf("registering PID %d as %s: %v", pid, machined.AgentService, err)
	}
}

// AgentArgs are the nodeinit-agent flags that point it at this node.
func (n *Node) AgentArgs() []string {
	return []string{"--kubeconfig", n.Identity.Kubeconfig, "--machined-socket", n.Machined.Socket, "--netns", n.NS.Path, "--key-file", n.KeyFile}
}
