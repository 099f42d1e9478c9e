package main

import (
	"os"
	"regexp"
	"strings"
	"testing"
	"time"
)

// `make demo` is the project's main job: it must converge on a fresh
// machine, show the 4 nodes the README promises, and say what happened from
// the cluster's own Events and CSRs.
func TestDemoConverges(t *testing.T) {
	if err := os.Chdir("../.."); err != nil {
		t.Fatal(err)
	}
	out, err := os.CreateTemp(t.TempDir(), "demo-stdout")
	if err != nil {
		t.Fatal(err)
	}
	stdout := os.Stdout
	os.Stdout = out
	err = run(4, "", false, 2*time.Minute)
	os.Stdout = stdout
	printed, _ := os.ReadFile(out.Name())
	t.Logf("the demo printed:\n%s", printed)
	if err != nil {
		t.Fatal(err)
	}
	text := string(printed)
	nodeRows := regexp.MustCompile(`(?m)^(web-1|web-2|pve-1|evil-1) `).FindAllString(text, -1)
	if len(nodeRows) != 4 {
		t.Errorf("the node table has %d rows, want 4: %q", len(nodeRows), nodeRows)
	}
	for _, want := range []string{
		"What just happened",
		"approved 3 serving CSRs and denied ", // evil-1's kubelet may retry
		"(evil-1 asked for another\n    node's address)",
		"nodeinit-coordinator Initialized ×4",
		"nodeinit-coordinator NodeinitDenied ×",
		"==> converged ",
		"make demo KEEP=1",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("the demo did not print %q", want)
		}
	}
}

func TestKeepCommands(t *testing.T) {
	sc, err := loadScenario("", 4)
	if err != nil {
		t.Fatal(err)
	}
	got := keepCommands("/tmp/x/admin.kubeconfig", sc)
	for _, want := range []string{"export KUBECONFIG=/tmp/x/admin.kubeconfig\n", "kubectl describe node web-1 ", "kubectl get noderecords", "kubectl get csr"} {
		if !strings.Contains(got, want) {
			t.Errorf("KEEP=1 commands lack %q:\n%s", want, got)
		}
	}
}

func TestScenarioLoads(t *testing.T) {
	sc, err := loadScenario("", 6)
	if err != nil {
		t.Fatal(err)
	}
	if len(sc.Nodes) != 6 || sc.Nodes[5].Name != "metal-6" {
		t.Fatalf("nodes: %+v", sc.Nodes)
	}
	hostile := 0
	for _, n := range sc.Nodes {
		if n.Hostile {
			hostile++
		}
	}
	if hostile != 1 {
		t.Fatalf("the default scenario has %d hostile nodes, want 1", hostile)
	}
}
