package controller_test

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/tools/clientcmd"

	"github.com/talos-nodeinit/talos-nodeinit/agent/controller"
)

// An API server the agent cannot reach (or that refuses its credentials)
// is said as that, in /readyz and once in the log: not as "waiting for the
// kubelet to register the Node", which sends an operator to the wrong
// component.
func TestUnreachableAPIServerIsSaid(t *testing.T) {
	n := newNode(t, "unreachable-node", "10.0.0.33", metal("unreachable-node"))
	kc, err := clientcmd.LoadFromFile(n.id.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range kc.Clusters {
		c.Server = "https://127.0.0.1:1" // nothing listens there
	}
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		t.Fatal(err)
	}
	a := n.startAgent(t, "", func(c *controller.Config) { c.Kubeconfig = path })
	if !eventually(t, 20*time.Second, func() bool {
		err := a.Ready()
		return err != nil && strings.Contains(err.Error(), "API server") && strings.Contains(err.Error(), "127.0.0.1:1")
	}) {
		t.Fatalf("20 s with the API server unreachable, readyz says %v; want it to name the API server and its address", a.Ready())
	}
	t.Logf("readyz: %v", a.Ready())
}
