package desired

import (
	"os/exec"
	"strings"
	"testing"
)

// ioPackages are the I/O stacks the edges use: machined's gRPC/COSI API and
// Talos's resource definitions (pkg/talos), netlink (pkg/netaddr/netlinksource).
// The pure core reaches them only through the data types of pkg/facts.
var ioPackages = []string{
	"google.golang.org/grpc",
	"github.com/cosi-project/runtime",
	"github.com/siderolabs/talos/pkg/machinery/resources",
	"github.com/vishvananda/netlink",
	"github.com/vishvananda/netns",
}

// TestPureCoreImportsNoIO keeps pkg/desired pure: it computes the Node from
// facts and must not link the packages that fetch them.
func TestPureCoreImportsNoIO(t *testing.T) {
	goCmd, err := exec.LookPath("go") // go test puts GOROOT/bin first in PATH
	if err != nil {
		t.Fatal("no go command on PATH to list dependencies with (go test puts it there; install Go 1.26):", err)
	}
	out, err := exec.Command(goCmd, "list", "-deps", ".").Output()
	if err != nil {
		if ee, ok := err.(*exec.ExitError); ok {
			t.Fatalf("go list -deps: %v\n%s", err, ee.Stderr)
		}
		t.Fatalf("go list -deps: %v", err)
	}
	var bad []string
	for dep := range strings.FieldsSeq(string(out)) {
		for _, p := range ioPackages {
			if dep == p || strings.HasPrefix(dep, p+"/") {
				bad = append(bad, dep)
				break
			}
		}
	}
	if len(bad) > 0 {
		t.Errorf("pkg/desired links %d I/O packages; it must depend only on data types (pkg/facts, pkg/netaddr, pkg/rules):\n  %s",
			len(bad), strings.Join(bad, "\n  "))
	}
}
