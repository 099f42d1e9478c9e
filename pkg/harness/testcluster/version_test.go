package testcluster_test

import (
	"os"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/talos-nodeinit/talos-nodeinit/pkg/harness/testcluster"
)

// TestControlPlaneVersion checks the tests run against the Kubernetes minor
// they claim: $KUBE_VERSION, else hack/kube-tools/build.sh's default (the
// version Talos 1.13 installs). A stale KUBE_TOOLS_DIR fails here, not as a
// puzzling difference elsewhere.
func TestControlPlaneVersion(t *testing.T) {
	want := os.Getenv("KUBE_VERSION")
	if want == "" {
		root, err := testcluster.RepoRoot()
		if err != nil {
			t.Fatal(err)
		}
		script, err := os.ReadFile(filepath.Join(root, "hack", "kube-tools", "build.sh"))
		if err != nil {
			t.Fatal(err)
		}
		m := regexp.MustCompile(`(?m)^default_version=(\S+)$`).FindSubmatch(script)
		if m == nil {
			t.Fatal("hack/kube-tools/build.sh has no default_version= line")
		}
		want = string(m[1])
	}
	info, err := adminClient(t).Discovery().ServerVersion()
	if err != nil {
		t.Fatal(err)
	}
	if got := info.Major + "." + info.Minor; got != want {
		t.Fatalf("the API server is Kubernetes %s (%s), want %s: KUBE_TOOLS_DIR points at another version's binaries", got, info.GitVersion, want)
	}
	t.Logf("API server %s", info.GitVersion)
}
