package realnode_test

import (
	"os"
	"testing"

	"github.com/talos-nodeinit/talos-nodeinit/pkg/harness/testnode"
)

// TestMain stops the simulated nodes' shared machined stand-in, which would
// otherwise leave its socket directory in /tmp.
func TestMain(m *testing.M) {
	code := m.Run()
	testnode.Close()
	os.Exit(code)
}
