package daemon

import (
	"context"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

func TestProcess(t *testing.T) {
	log := filepath.Join(t.TempDir(), "d.log")
	p := &Process{Name: "sleeper", LogPath: log, Argv: []string{"sh", "-c", "echo hello; trap 'echo bye; exit 0' TERM; while :; do sleep 0.05; done"}}
	if !p.Exited() || p.Pid() != 0 {
		t.Fatal("a process never started counts as running")
	}
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	if err := p.Start(); err == nil {
		t.Error("a second Start of a running process succeeded")
	}
	if err := wait.PollUntilContextTimeout(t.Context(), 20*time.Millisecond, 5*time.Second, true, func(context.Context) (bool, error) {
		return strings.Contains(p.Tail(5), "hello"), nil
	}); err != nil {
		t.Fatalf("no output in the log: %q", p.Tail(5))
	}
	if p.Exited() || p.Pid() == 0 {
		t.Fatal("a running process counts as exited")
	}
	p.Stop(syscall.SIGTERM, 5*time.Second)
	if !p.Exited() || !strings.Contains(p.Tail(5), "bye") {
		t.Errorf("after SIGTERM: exited %v, log %q", p.Exited(), p.Tail(5))
	}
	p.Stop(syscall.SIGTERM, time.Second) // nothing to stop
	// It restarts, and the log keeps both runs.
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	p.Stop(syscall.SIGKILL, time.Second)
	if n := strings.Count(p.Tail(100), "--- sleeper starting at"); n != 2 {
		t.Errorf("%d start lines in the log, want 2", n)
	}
	if r := p.Report(1); !strings.HasPrefix(r, "===== last 1 lines of sleeper ("+log+")\n") {
		t.Errorf("Report = %q", r)
	}
	// A process that ignores SIGTERM is killed after the grace period.
	stubborn := &Process{Name: "stubborn", LogPath: log, Argv: []string{"sh", "-c", "trap '' TERM; while :; do sleep 0.05; done"}}
	if err := stubborn.Start(); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	stubborn.Stop(syscall.SIGTERM, 300*time.Millisecond)
	if !stubborn.Exited() || time.Since(start) > 3*time.Second {
		t.Errorf("stubborn: exited %v after %v", stubborn.Exited(), time.Since(start))
	}
}

// Done is closed when the process exits on its own and when it is stopped,
// and is closed already for a process that is not running.
func TestDone(t *testing.T) {
	log := filepath.Join(t.TempDir(), "d.log")
	p := &Process{Name: "short", LogPath: log, Argv: []string{"sh", "-c", "sleep 0.2; exit 3"}}
	select {
	case <-p.Done():
	default:
		t.Fatal("Done of a process never started is open")
	}
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	done := p.Done()
	select {
	case <-done:
		t.Fatal("Done closed while the process runs")
	default:
	}
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Done still open 5s after the process exited on its own")
	}
	if !p.Exited() {
		t.Error("closed Done, yet not Exited")
	}
	p.Stop(syscall.SIGTERM, time.Second) // reaps nothing: it has exited

	long := &Process{Name: "long", LogPath: log, Argv: []string{"sleep", "60"}}
	if err := long.Start(); err != nil {
		t.Fatal(err)
	}
	done = long.Done()
	long.Stop(syscall.SIGKILL, time.Second)
	select {
	case <-done:
	default:
		t.Fatal("Done taken before Stop still open after it")
	}
}
