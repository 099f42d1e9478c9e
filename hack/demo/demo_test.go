package main

import (
	"os"
	"testing"
	"time"
)

// `make demo` is the project's main job: it must converge on a fresh machine.
func TestDemoConverges(t *testing.T) {
	if err := os.Chdir("../.."); err != nil {
		t.Fatal(err)
	}
	if err := run(4, "", false, 2*time.Minute); err != nil {
		t.Fatal(err)
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
