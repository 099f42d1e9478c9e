package realnode

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/talos-nodeinit/talos-nodeinit/pkg/harness/testcluster"
)

// StartScheduler runs the real kube-scheduler against cluster with the
// admin kubeconfig, serving nothing (it is only a client here).
func StartScheduler(t *testing.T, cluster *testcluster.Cluster, bin string) {
	t.Helper()
	p := &process{name: "kube-scheduler", logPath: filepath.Join(cluster.Dir(), "kube-scheduler.log"),
		argv: []string{bin, "--kubeconfig=" + cluster.AdminKubeconfig(), "--leader-elect=false",
			"--bind-address=127.0.0.1", "--secure-port=0"}}
	if err := p.start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Log(p.tail(30))
		}
		p.stop(5 * time.Second)
	})
}
