// Package gobuild builds this repository's commands for tests and the
// benchmark: static and stripped, as `make build` ships them.
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

// Binary builds the command in dir (relative to the test's directory) once
// per test process and returns its path; it fails the test with the
// compiler's output.
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
	if err := Build(abs, path); err != nil {
		t.Fatal(err)
	}
	built[abs] = path
	return path
}

// Build builds the command in dir to the file out; the error carries the
// compiler's output.
func Build(dir, out string) error {
	cmd := exec.Command("go", "build", "-trimpath", "-ldflags=-s -w", "-o", out, ".")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if msg, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build %s: %v\n%s", dir, err, msg)
	}
	return nil
}
