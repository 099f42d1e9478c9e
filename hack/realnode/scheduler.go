package realnode

import (
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/talos-nodeinit/talos-nodeinit/pkg/harness/daemon"
	"github.com/talos-nodeinit/talos-nodeinit/pkg/harness/testcluster"
)

// StartScheduler runs the real kube-scheduler against cluster with the
// admin kubeconfig, serving nothing (it is only a client here).
func StartScheduler(t *testing.T, cluster *testcluster.Cluster, bin string) {
	t.Helper()
	p := &daemon.Process{Name: "kube-scheduler", LogPath: filepath.Join(cluster.Dir(), "kube-scheduler.log"),
		Argv: []string{bin, "--kubeconfig=" + cluster.AdminKubeconfig(), "--leader-elect=false",
			"--bind-address=127.0.0.1", "--secure-port=0"}}
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Log(p.Report(30))
		}
		p.Stop(syscall.SIGTERM, 5*time.Second)
	})
}
