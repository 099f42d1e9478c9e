package gobuild

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// Build writes a command that runs to the path asked for, and a command that
// does not compile is an error carrying the compiler's message.
func TestBuild(t *testing.T) {
	out := filepath.Join(t.TempDir(), "hello")
	if err := Build("testdata/hello", out); err != nil {
		t.Fatal(err)
	}
	got, err := exec.Command(out).Output()
	if err != nil || string(got) != "hello from a built command\n" {
		t.Errorf("the built command printed %q (%v)", got, err)
	}
	err = Build("testdata/broken", filepath.Join(t.TempDir(), "broken"))
	if err == nil || !strings.Contains(err.Error(), "undefined: undefinedFunction") {
		t.Errorf("building a command that does not compile: %v", err)
	}
}
