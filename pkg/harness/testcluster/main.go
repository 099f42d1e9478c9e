package testcluster

import (
	"context"
	"fmt"
	"os"
	"testing"

	"github.com/talos-nodeinit/talos-nodeinit/pkg/harness/leakcheck"
)

// Main runs a test package against one shared cluster:
//
//	var cluster *testcluster.Cluster
//	func TestMain(m *testing.M) { os.Exit(testcluster.Main(m, &cluster, testcluster.Options{})) }
//
// When any test fails it prints the tail of every component's log. The
// cluster is always stopped and its directory removed. Goroutines any test
// left running fail the package (leakcheck).
func Main(m *testing.M, cluster **Cluster, opts Options) int {
	c, err := Start(context.Background(), opts)
	if err != nil {
		fmt.Fprintf(os.Stderr, "testcluster: %v\n", err)
		return 1
	}
	*cluster = c
	code := m.Run()
	if code != 0 {
		fmt.Fprint(os.Stderr, c.LogTails(40))
	}
	c.Close()
	if opts.AfterTests != nil {
		opts.AfterTests()
	}
	if err := leakcheck.Find(); err != nil {
		// Every test stops and waits for what it started.
		fmt.Fprintf(os.Stderr, "testcluster: %v\n", err)
		code = max(code, 1)
	}
	return code
}
