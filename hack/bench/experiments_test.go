package main

import (
	"os/exec"
	"path/filepath"
	"testing"
)

// TestExperimentPatchesApply: the throwaway experiments BENCHMARKS.md cites
// still apply to this tree, so their figures can be measured again.
func TestExperimentPatchesApply(t *testing.T) {
	patches, err := filepath.Glob("experiments/*.patch")
	if err != nil || len(patches) < 2 {
		t.Fatalf("want the experiment patches in hack/bench/experiments, found %v (%v)", patches, err)
	}
	for _, p := range patches {
		abs, _ := filepath.Abs(p)
		cmd := exec.Command("git", "apply", "--check", abs)
		cmd.Dir = "../.."
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("%s no longer applies (git apply --check, from the repository's root; needs git): %v\n%s", p, err, out)
		}
	}
}
