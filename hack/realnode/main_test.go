package realnode_test

import (
	"fmt"
	"os"
	"testing"

	"github.com/talos-nodeinit/talos-nodeinit/pkg/harness/leakcheck"
	"github.com/talos-nodeinit/talos-nodeinit/pkg/harness/testnode"
)

// TestMain stops the simulated nodes' shared machined stand-in, which would
// otherwise leave its socket directory in /tmp, and fails the package when
// a test left goroutines running.
func TestMain(m *testing.M) {
	code := m.Run()
	testnode.Close()
	if err := leakcheck.Find(); err != nil {
		fmt.Fprintln(os.Stderr, "realnode:", err)
		code = max(code, 1)
	}
	os.Exit(code)
}
