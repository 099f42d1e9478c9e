package realnode

import (
	"github.com/talos-nodeinit/talos-nodeinit/pkg/harness/spawn"

	"bytes"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"
)

// process is one daemon of the node (containerd, the kubelet, the
// kube-scheduler). Its output goes to a log file a failing test prints.
type process struct {
	name    string
	argv    []string
	logPath string

	cmd  *exec.Cmd
	done chan struct{}
}

// start runs argv with its output appended to logPath. The process is killed
// when the test binary dies, even by SIGKILL.
func (p *process) start() error {
	log, err := os.OpenFile(p.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	cmd := exec.Command(p.argv[0], p.argv[1:]...)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	spawn.Do(func() { err = cmd.Start() })
	if err != nil {
		log.Close()
		return fmt.Errorf("starting %s: %w", p.name, err)
	}
	p.cmd, p.done = cmd, make(chan struct{})
	go func() {
		_ = cmd.Wait()
		log.Close()
		close(p.done)
	}()
	return nil
}

func (p *process) exited() bool {
	if p.done == nil {
		return false
	}
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// stop sends SIGTERM and, after grace, SIGKILL.
func (p *process) stop(grace time.Duration) {
	if p == nil || p.cmd == nil || p.exited() {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(grace):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// tail is the last n lines of the log.
func (p *process) tail(n int) string {
	data, _ := os.ReadFile(p.logPath)
	lines := bytes.Split(bytes.TrimRight(data, "\n"), []byte("\n"))
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return fmt.Sprintf("===== last %d lines of %s (%s)\n%s\n", n, p.name, p.logPath, bytes.Join(lines, []byte("\n")))
}

// run runs a short command and returns its combined output, failing with it.
func run(name string, args ...string) (string, error) {
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, out)
	}
	return string(out), nil
}
