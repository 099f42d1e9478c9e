package main

import (
	"os/exec"
	"strings"
	"testing"
)

// The agent binary links none of the coordinator's packages: what both
// need (the coordinator's configuration schema, for explain and migrate,
// and its pure finalize decisions, for explain) lives in pkg/.
func TestAgentLinksNoCoordinatorPackage(t *testing.T) {
	goCmd, err := exec.LookPath("go") // go test puts GOROOT/bin first in PATH
	if err != nil {
		t.Fatal("no go command on PATH to list dependencies with (go test puts it there; install Go 1.26):", err)
	}
	out, err := exec.Command(goCmd, "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	const coordinator = "github.com/talos-nodeinit/talos-nodeinit/coordinator"
	var bad []string
	for dep := range strings.FieldsSeq(string(out)) {
		if dep == coordinator || strings.HasPrefix(dep, coordinator+"/") {
			bad = append(bad, dep)
		}
	}
	if len(bad) > 0 {
		t.Errorf("the agent links coordinator packages; move what both need into pkg/:\n  %s", strings.Join(bad, "\n  "))
	}
}
