package controller_test

import (
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/talos-nodeinit/talos-nodeinit/coordinator/controller"
	"github.com/talos-nodeinit/talos-nodeinit/pkg/harness/syncbuf"
)

// A Node that keeps waiting (here its agent never runs, so nothing about
// it changes) is named in the coordinator's log with what it waits for,
// once: nodeinit_coordinator_nodes_waiting counts such Nodes, the log
// says which. A Node that joins in time is never named.
func TestALongWaitIsNamed(t *testing.T) {
	var log syncbuf.Buffer
	c := startCoordinatorAs(t, "waitlog", ipamSettings, coordinatorIdentity(t), func(c *controller.Config) {
		// Ages count from the Node's creation time, in whole seconds: 5 s
		// is 4 to 5, which a busy machine's join of the quick Node fits.
		c.WaitingLogAfter = 5 * time.Second
		c.Log = slog.New(slog.NewTextHandler(io.MultiWriter(&log, testWriter{t}), nil)).With("coordinator", "waitlog")
	})
	register(t, "waitlog-silent", "10.0.62.1") // no agent
	quick := register(t, "waitlog-quick", "10.0.62.2")
	quick.publish(t, report{providerID: "talos://metal/10.0.62.2"})
	waitFor(t, 10*time.Second, "waitlog-quick initialized", func() bool { return initialized(get(t, "waitlog-quick")) })
	waitFor(t, 15*time.Second, "the silent Node named in the log", func() bool {
		return strings.Contains(log.String(), `msg="Node still waits`) && strings.Contains(log.String(), "node=waitlog-silent")
	})
	c.skip(10 * time.Second) // the quick Node's time passed too
	c.lookedAgain(t, "waitlog-silent")
	c.lookedAgain(t, "waitlog-quick")
	// Other tests' Nodes in the same cluster may be named too: only this
	// test's are counted.
	lines := 0
	for _, l := range strings.Split(log.String(), "\n") {
		if strings.Contains(l, "Node still waits") && strings.Contains(l, "node=waitlog-") {
			lines++
			if !strings.Contains(l, "node=waitlog-silent") || !strings.Contains(l, "the agent's metadata annotation") {
				t.Errorf("want only the silent Node named, with what it waits for: %s", l)
			}
		}
	}
	if lines != 1 {
		t.Errorf("the wait was said %d times, want once", lines)
	}
}
