// Package testnode assembles one simulated Talos node for tests and
// benchmarks: a network namespace holding its addresses, a machined stand-in
// serving its platform metadata, a node client identity, and a kubelet
// stand-in that has registered its Node. An agent pointed at it (in-process
// or the real binary, with AgentArgs) sees exactly what it would on Talos.
package testnode

import (
	"net/netip"
	"path/filepath"
	"testing"

	"github.com/siderolabs/talos/pkg/machinery/resources/runtime"

	"github.com/talos-nodeinit/talos-nodeinit/pkg/harness/kubeletsim"
	"github.com/talos-nodeinit/talos-nodeinit/pkg/harness/testcluster"
	"github.com/talos-nodeinit/talos-nodeinit/pkg/netaddr/netnstest"
	"github.com/talos-nodeinit/talos-nodeinit/pkg/talos/talostest"
)

// Spec describes a node.
type Spec struct {
	Name string
	// NodeIP is the kubelet's --node-ip; it is put on eth0 as a /24.
	NodeIP netip.Addr
	// Addresses are further CIDRs on eth0 (IPv6 ones skip DAD).
	Addresses []string
	Metadata  runtime.PlatformMetadataSpec
}

// Node is a running simulated node; everything stops when the test ends.
type Node struct {
	Spec
	NS       *netnstest.NS
	Machined *talostest.Machined
	Identity *testcluster.NodeIdentity
	Kubelet  *kubeletsim.Kubelet
	// KeyFile is where the node's agent keeps its key (not yet created): the
	// same file for every agent started on the node, as on a real node.
	KeyFile string
}

// New builds the node and registers it with the cluster.
func New(t testing.TB, c *testcluster.Cluster, spec Spec) *Node {
	t.Helper()
	ctx := t.Context()
	n := &Node{Spec: spec, NS: netnstest.New(t), KeyFile: filepath.Join(t.TempDir(), "nodeinit", "agent.key")}
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
	var err error
	if n.Machined, err = talostest.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.Machined.Close)
	for _, err := range []error{
		n.Machined.SetPlatformMetadata(ctx, spec.Metadata),
		n.Machined.SetNodename(ctx, spec.Name),
		n.Machined.SetNodeIPs(ctx, spec.NodeIP),
	} {
		if err != nil {
			t.Fatal(err)
		}
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

// AgentArgs are the nodeinit-agent flags that point it at this node.
func (n *Node) AgentArgs() []string {
	return []string{"--kubeconfig", n.Identity.Kubeconfig, "--machined-socket", n.Machined.Socket, "--netns", n.NS.Path, "--key-file", n.KeyFile}
}
