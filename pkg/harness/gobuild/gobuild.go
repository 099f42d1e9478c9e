// Package gobuild builds one of this repository's commands for a test, once
// per test process: static and stripped, as `make build` ships it.
package gobuild

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
)

var (
	mu    sync.Mutex
	built = map[string]string{}
)

// Binary builds the command in dir (relative to the test's directory) and
// returns its path; it fails the test with the compiler's output.
func Binary(t testing.TB, dir string) string {
	t.Helper()
	abs, err := filepath.Abs(dir)
	if err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if path, ok := built[abs]; ok {
		return path
	}
	out, err := os.MkdirTemp("", "gobuild-")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(out, filepath.Base(abs))
	cmd := exec.Command("go", "build", "-trimpath", "-ldflags=-s -w", "-o", path, ".")
	cmd.Dir = abs
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if msg, err := cmd.CombinedOutput(); err != nil {
		t.Fatal(fmt.Errorf("go build %s: %v\n%s", abs, err, msg))
	}
	built[abs] = path
	return path
}
