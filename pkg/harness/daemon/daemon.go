// Package daemon runs the long-lived programs tests start (etcd,
// kube-apiserver, containerd, the kubelet, …): each writes to a log file
// that survives restarts, dies with the test binary even on kill -9, and
// can be stopped with a signal and a grace period.
package daemon

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"

	"github.com/talos-nodeinit/talos-nodeinit/pkg/harness/spawn"
)

// Process is one daemon. Set Name, Argv and LogPath, then Start it.
type Process struct {
	Name    string
	Argv    []string
	LogPath string

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{} // closed when cmd exits
}

// Start runs Argv with its output appended to LogPath.
func (p *Process) Start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != nil {
		return fmt.Errorf("%s is already running", p.Name)
	}
	if len(p.Argv) == 0 {
		return fmt.Errorf("%s: no command", p.Name)
	}
	log, err := os.OpenFile(p.LogPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	fmt.Fprintf(log, "--- %s starting at %s\n", p.Name, time.Now().Format(time.RFC3339Nano))
	cmd := exec.Command(p.Argv[0], p.Argv[1:]...)
	cmd.Stdout, cmd.Stderr = log, log
	// It dies with the test binary, even on kill -9 of the test.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	spawn.Do(func() { err = cmd.Start() })
	if err != nil {
		log.Close()
		return fmt.Errorf("starting %s: %w", p.Name, err)
	}
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		log.Close()
		close(done)
	}()
	p.cmd, p.done = cmd, done
	return nil
}

// Exited reports whether the process is not running: never started,
// stopped, or exited on its own.
func (p *Process) Exited() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.done == nil {
		return true
	}
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// exited is what Done returns for a process that is not running.
var exited = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// Done is closed when the running process exits, on its own or stopped, for
// a supervisor that restarts it; for one not running it is closed already.
func (p *Process) Done() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.done == nil {
		return exited
	}
	return p.done
}

// Stop sends sig and waits for the process to exit, escalating to SIGKILL
// after grace. Stopping a process that is not running does nothing.
func (p *Process) Stop(sig syscall.Signal, grace time.Duration) {
	if p == nil {
		return
	}
	p.mu.Lock()
	cmd, done := p.cmd, p.done
	p.cmd, p.done = nil, nil
	p.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(sig)
	select {
	case <-done:
	case <-time.After(grace):
		_ = cmd.Process.Kill()
		<-done
	}
}

// Pid is the running process's pid, or 0.
func (p *Process) Pid() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return 0
	}
	return p.cmd.Process.Pid
}

// Tail returns the last n lines of the log.
func (p *Process) Tail(n int) string {
	data, err := os.ReadFile(p.LogPath)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return ""
		}
		return err.Error()
	}
	lines := bytes.Split(bytes.TrimRight(data, "\n"), []byte("\n"))
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return string(bytes.Join(lines, []byte("\n")))
}

// Report is Tail under a heading naming the process and its log, for a
// failing test to print.
func (p *Process) Report(n int) string {
	return fmt.Sprintf("===== last %d lines of %s (%s)\n%s\n", n, p.Name, p.LogPath, p.Tail(n))
}
