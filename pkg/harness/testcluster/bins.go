package testcluster

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
)

var binDir = sync.OnceValues(findBinDir)

// BinDir returns the directory holding kube-apiserver, kube-controller-manager
// and etcd. $KUBE_TOOLS_DIR wins; otherwise hack/kube-tools/build.sh is run,
// which reuses its cache or builds them (about 10 minutes the first time).
func BinDir() (string, error) { return binDir() }

func findBinDir() (string, error) {
	if dir := os.Getenv("KUBE_TOOLS_DIR"); dir != "" {
		return dir, checkBins(dir)
	}
	root, err := RepoRoot()
	if err != nil {
		return "", err
	}
	script := filepath.Join(root, "hack", "kube-tools", "build.sh")
	cmd := exec.Command("bash", script)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, os.Stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("building the control-plane binaries with %s failed: %w (run `make kube-tools` to see why)", script, err)
	}
	dir := strings.TrimSpace(out.String())
	return dir, checkBins(dir)
}

func checkBins(dir string) error {
	for _, name := range []string{"etcd", "kube-apiserver", "kube-controller-manager"} {
		if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
			return fmt.Errorf("%s is missing from %s: run `make kube-tools` and set KUBE_TOOLS_DIR to the directory it prints", name, dir)
		}
	}
	return nil
}

// RepoRoot walks up from the working directory to the checkout holding
// hack/kube-tools (tests run in their package directory).
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "hack", "kube-tools", "build.sh")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("cannot find hack/kube-tools/build.sh above the working directory: set KUBE_TOOLS_DIR to a directory holding etcd, kube-apiserver and kube-controller-manager")
		}
		dir = parent
	}
}
