package realnode

import (
	"github.com/talos-nodeinit/talos-nodeinit/pkg/harness/daemon"
	"github.com/talos-nodeinit/talos-nodeinit/pkg/harness/spawn"

	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"time"

	talosruntime "github.com/siderolabs/talos/pkg/machinery/resources/runtime"

	"github.com/talos-nodeinit/talos-nodeinit/pkg/harness/machined"
)

// startAgent runs nodeinit-agent beside the kubelet as Talos runs the
// extension service: in a mount namespace of its own (its container), with
// the kubelet's credentials, reading the node's addresses from the node's
// network namespace and Talos's facts from a machined of its own (the
// real-authorizer stand-in), which admits it by the PID its service runner
// records.
func (n *Node) startAgent(ctx context.Context) error {
	log, err := os.OpenFile(filepath.Join(n.Dir, "machined.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	// Forked from the immortal thread: Pdeathsig fires when the forking
	// thread ends.
	spawn.Do(func() { n.machined, err = machined.Start(log) })
	if err != nil {
		log.Close()
		return fmt.Errorf("starting the machined stand-in: %w", err)
	}
	n.machinedLog = log
	md, err := n.machined.Node(ctx, n.Name)
	if err != nil {
		return err
	}
	n.Machined = md
	for _, err := range []error{
		md.SetPlatformMetadata(ctx, talosruntime.PlatformMetadataSpec{Platform: "metal", Hostname: n.Name}),
		md.SetNodename(ctx, n.Name),
		md.SetNodeIPs(ctx, netip.MustParseAddr(n.NodeIP)),
	} {
		if err != nil {
			return fmt.Errorf("publishing the node's facts in machined: %w", err)
		}
	}
	n.agent = &daemon.Process{Name: "nodeinit-agent", LogPath: filepath.Join(n.Dir, "agent.log"),
		Argv: []string{"unshare", "--mount", "--propagation", "unchanged", "--", n.AgentBin, "run",
			"--kubeconfig", n.Identity.Kubeconfig, "--machined-socket", md.Socket, "--netns", n.NodeNS.Path,
			"--key-file", filepath.Join(n.Dir, "agent", "agent.key")}}
	if err := n.agent.Start(); err != nil {
		return err
	}
	// unshare execs the agent in place (same PID) once its mount namespace
	// exists: register the PID only then, or the host's namespace would be
	// admitted with it.
	self, _ := os.Readlink("/proc/self/ns/mnt")
	pid := n.agent.Pid()
	deadline := time.Now().Add(10 * time.Second)
	for {
		ns, _ := os.Readlink(fmt.Sprintf("/proc/%d/ns/mnt", pid))
		if ns != "" && ns != self {
			break
		}
		if n.agent.Exited() || time.Now().After(deadline) {
			return fmt.Errorf("nodeinit-agent did not start in a mount namespace of its own:\n%s", n.agent.Report(20))
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := md.RegisterAgent(ctx, pid); err != nil {
		return fmt.Errorf("registering the agent's PID %d with machined: %w", pid, err)
	}
	return nil
}
