package main

import (
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/talos-nodeinit/talos-nodeinit"

// agentRuns are the module's packages the agent binary may link: what it
// runs on a node. A package is added here only when the agent runs it;
// nothing of the coordinator's decisions, configuration or allocator is.
var agentRuns = []string{
	"agent",
	"agent/controller",
	"agent/nodeclient",
	"pkg/agentkey",
	"pkg/apiclient",
	"pkg/contract",
	"pkg/csrcheck",
	"pkg/desired",
	"pkg/envflag",
	"pkg/facts",
	"pkg/grants",
	"pkg/kubecreds",
	"pkg/netaddr",
	"pkg/netaddr/netlinksource",
	"pkg/rules",
	"pkg/rulesource",
	"pkg/suggest",
	"pkg/talos",
	"pkg/talosccm",
	"pkg/telemetry",
	"pkg/version",
	"pkg/yamlstrict",
}

// neverAgent are the coordinator's: its command and decisions, its
// configuration, its allocator. The agent links none of them, whatever
// agentRuns says.
var neverAgent = []string{"coordinator", "pkg/ipam"}

// TestAgentLinksOnlyWhatItRuns: every package of this module the agent
// binary links is one it runs on a node (agentRuns), none is the
// coordinator's (neverAgent), and agentRuns lists nothing it no longer
// links. Listed as the release builds it (CGO_ENABLED=0, linux).
func TestAgentLinksOnlyWhatItRuns(t *testing.T) {
	goCmd, err := exec.LookPath("go") // go test puts GOROOT/bin first in PATH
	if err != nil {
		t.Fatal("no go command on PATH to list dependencies with (go test puts it there; install Go 1.26):", err)
	}
	cmd := exec.Command(goCmd, "list", "-deps", ".")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	var linked, coordinators, unlisted []string
	for dep := range strings.FieldsSeq(string(out)) {
		rel, ok := strings.CutPrefix(dep, module+"/")
		if !ok {
			continue
		}
		linked = append(linked, rel)
		switch {
		case slices.ContainsFunc(neverAgent, func(p string) bool { return rel == p || strings.HasPrefix(rel, p+"/") }):
			coordinators = append(coordinators, rel)
		case !slices.Contains(agentRuns, rel):
			unlisted = append(unlisted, rel)
		}
	}
	if len(coordinators) > 0 {
		t.Errorf("the agent links the coordinator's packages; the agent runs none of them (move what both need into a package of pkg/ that is neither's):\n  %s", strings.Join(coordinators, "\n  "))
	}
	if len(unlisted) > 0 {
		t.Errorf("the agent links packages it is not known to run; if it runs them on a node, add them to agentRuns:\n  %s", strings.Join(unlisted, "\n  "))
	}
	var stale []string
	for _, p := range agentRuns {
		if !slices.Contains(linked, p) {
			stale = append(stale, p)
		}
	}
	if len(stale) > 0 {
		t.Errorf("agentRuns lists packages the agent no longer links; remove them:\n  %s", strings.Join(stale, "\n  "))
	}
}
