package telemetry

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2"
)

// Durations in JSON logs read as durations, not nanosecond integers, at
// any depth; text logs already print them so.
func TestJSONDurations(t *testing.T) {
	var buf bytes.Buffer
	log, err := NewLogger(&buf, "info", "json")
	if err != nil {
		t.Fatal(err)
	}
	log.Info("lease", "renew-deadline", 1500*time.Millisecond, slog.Group("retry", "period", 2*time.Second), "count", 3)
	var line struct {
		Renew string         `json:"renew-deadline"`
		Retry map[string]any `json:"retry"`
		Count int            `json:"count"`
	}
	if err := json.Unmarshal(buf.Bytes(), &line); err != nil {
		t.Fatalf("%v: %s", err, buf.String())
	}
	if line.Renew != "1.5s" || line.Retry["period"] != "2s" || line.Count != 3 {
		t.Errorf("got %s, want renew-deadline \"1.5s\", retry.period \"2s\", count 3", buf.String())
	}
}

// client-go logs through klog; after RouteKlog every klog line is one of
// the logger's own (JSON here), at the matching level, and klog's
// verbosity follows --log-level: V(4) lines only with debug.
func TestKlogGoesThroughSlog(t *testing.T) {
	for _, level := range []string{"info", "debug"} {
		var buf bytes.Buffer
		log, err := NewLogger(&buf, level, "json")
		if err != nil {
			t.Fatal(err)
		}
		restore := RouteKlog(log)
		klog.InfoS("successfully acquired lease", "lease", "kube-system/nodeinit-coordinator", "after", 3*time.Second)
		klog.ErrorS(errors.New("boom"), "error retrieving resource lock")
		klog.V(4).InfoS("a verbose reflector line")
		klog.Flush()
		restore()
		var lines []map[string]any
		for _, l := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
			var m map[string]any
			if err := json.Unmarshal([]byte(l), &m); err != nil {
				t.Fatalf("%s: klog wrote a line that is not JSON: %q", level, l)
			}
			lines = append(lines, m)
		}
		want := 2
		if level == "debug" {
			want = 3
		}
		if len(lines) != want {
			t.Fatalf("%s: %d lines, want %d:\n%s", level, len(lines), want, buf.String())
		}
		if lines[0]["msg"] != "successfully acquired lease" || lines[0]["level"] != "INFO" || lines[0]["lease"] != "kube-system/nodeinit-coordinator" || lines[0]["after"] != "3s" {
			t.Errorf("%s: info line %v", level, lines[0])
		}
		if lines[1]["level"] != "ERROR" || lines[1]["err"] != "boom" && lines[1]["error"] != "boom" {
			t.Errorf("%s: error line %v", level, lines[1])
		}
	}
}

// A command run in-process (a test calling run) routes klog only while it
// runs: klog's globals are written once, client-go goroutines left over
// from other tests may log at any moment (go test -race checks this), and
// after restore the command's logger receives nothing more.
func TestKlogRouteIsScopedAndRaceFree(t *testing.T) {
	stop := logInBackground(func() { // a leftover client-go goroutine
		klog.InfoS("reflector line")
		klog.V(4).InfoS("verbose line")
	})
	var bufs [4]syncbuf
	finished := make(chan struct{})
	for i := range bufs {
		go func() {
			defer func() { finished <- struct{}{} }()
			for range 50 {
				log, _ := NewLogger(&bufs[i], []string{"info", "debug"}[i%2], "json")
				restore := RouteKlog(log)
				klog.InfoS("mine", "i", i)
				restore()
			}
		}()
	}
	for range bufs {
		<-finished
	}
	stop()
	var after syncbuf
	log, _ := NewLogger(&after, "info", "json")
	RouteKlog(log)() // routed and restored at once
	n := after.Len()
	klog.InfoS("after every command returned")
	klog.Flush()
	if after.Len() != n {
		t.Errorf("a restored route still received: %s", after.String())
	}
}

type syncbuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncbuf) Write(p []byte) (int, error) { s.mu.Lock(); defer s.mu.Unlock(); return s.b.Write(p) }
func (s *syncbuf) Len() int                    { s.mu.Lock(); defer s.mu.Unlock(); return s.b.Len() }
func (s *syncbuf) String() string              { s.mu.Lock(); defer s.mu.Unlock(); return s.b.String() }

// A command's writer is its own once RouteKlog's restore has returned: a
// leftover goroutine's klog line that was already on its way through the
// route must have finished before restore returns, never land after it
// (a test reads its buffer right then; a command may close its file).
func TestKlogRestoreWaitsForLinesInFlight(t *testing.T) {
	w := &heldWriter{entered: make(chan struct{}), release: make(chan struct{})}
	release := sync.OnceFunc(func() { close(w.release) })
	defer release()
	log, _ := NewLogger(w, "info", "text")
	restore := RouteKlog(log)
	logged := make(chan struct{})
	// A leftover client-go goroutine's line, held in the writer.
	go func() { defer close(logged); klog.InfoS("certificate rotation: waiting") }()
	<-w.entered
	restored := make(chan struct{})
	go func() { defer close(restored); restore() }()
	waitUntil(t, "restore to return or to wait", func() bool {
		select {
		case <-restored:
			return true
		default:
			return blockedIn("telemetry.RouteKlog.func1(")
		}
	})
	select {
	case <-restored:
		t.Fatal("restore returned while a klog line was being written to the command's writer")
	default:
	}
	release()
	<-restored
	if !w.written.Load() {
		t.Error("restore returned before the klog line in flight was written")
	}
	<-logged
}

// heldWriter holds the first write until release is closed, as a slow
// file or pipe would: entered is closed when it starts, written set when
// it ends.
type heldWriter struct {
	once             sync.Once
	entered, release chan struct{}
	written          atomic.Bool
}

func (w *heldWriter) Write(p []byte) (int, error) {
	w.once.Do(func() { close(w.entered) })
	<-w.release
	w.written.Store(true)
	return len(p), nil
}

// blockedIn tells whether a goroutine whose stack holds fn is blocked on
// a lock or a wait group (its state, in the stack's header, is "sync....").
func blockedIn(fn string) bool {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	for g := range strings.SplitSeq(string(buf), "\n\n") {
		if _, state, ok := strings.Cut(g, " ["); ok && strings.HasPrefix(state, "sync.") && strings.Contains(g, fn) {
			return true
		}
	}
	return false
}

// waitUntil polls cond until it holds, failing the test after 5 s.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	err := wait.PollUntilContextTimeout(t.Context(), time.Millisecond, 5*time.Second, true, func(context.Context) (bool, error) {
		return cond(), nil
	})
	if err != nil {
		t.Fatalf("waiting for %s: %v", what, err)
	}
}

// A legacy klog call (klog.Info/Infof/Warningf/V(n).Infof: klog's output()
// holds klog's logging.mu while it calls the logger, so the route's read
// lock is taken under logging.mu) racing a RouteKlog or restore that
// changes the verbosity (the route's write lock held while klog's -v flag
// Set takes logging.mu) must not deadlock.
func TestKlogLegacyLineRacingVerbositySwapDoesNotDeadlock(t *testing.T) {
	stop := logInBackground(func() { klog.Info("legacy line") }) // klog's legacy API
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		for i := range 2000 {
			log, _ := NewLogger(io.Discard, []string{"info", "debug"}[i%2], "json")
			RouteKlog(log)() // debug: -v 0 -> 4 -> 0, each under the write lock
		}
	}()
	select {
	case <-finished:
		stop()
	case <-time.After(20 * time.Second):
		t.Fatal("deadlock: RouteKlog/restore holds the route's write lock waiting for klog's logging.mu, which a legacy klog line holds while waiting for the route's read lock")
	}
}

// Commands run in-process by concurrent tests restore out of order: A
// routes, B routes, A returns (restore), B returns (restore). klog must not
// be left pointing at A's writer after both returned.
func TestKlogRestoreOutOfOrderLeavesNoFinishedCommandsWriter(t *testing.T) {
	var a, b bytes.Buffer
	la, _ := NewLogger(&a, "info", "text")
	lb, _ := NewLogger(&b, "info", "text")
	restoreA := RouteKlog(la)
	restoreB := RouteKlog(lb)
	restoreA() // A returns first
	restoreB() // then B
	n := a.Len()
	klog.InfoS("a line after both commands returned")
	if a.Len() != n {
		t.Errorf("klog still routed to command A's writer after A returned: %q", a.String()[n:])
	}
}

// A line being handled holds the route's read lock while the target
// handler formats it; a value whose LogValue logs through klog re-enters
// RLock. With a swap (write lock) queued in between, that is a deadlock.
type reentrant struct{ hit, queued chan struct{} }

func (r reentrant) LogValue() slog.Value {
	close(r.hit) // a swap can now queue its write lock
	<-r.queued
	klog.InfoS("logged while formatting another line")
	return slog.StringValue("v")
}

func TestKlogReentrantLineWithSwapQueued(t *testing.T) {
	log, _ := NewLogger(io.Discard, "info", "json")
	restore := RouteKlog(log)
	hit, queued := make(chan struct{}), make(chan struct{})
	unblock := sync.OnceFunc(func() { close(queued) })
	defer unblock()
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		klog.InfoS("outer", "v", reentrant{hit, queued})
	}()
	<-hit
	swapped := make(chan struct{})
	go func() { restore(); close(swapped) }()
	waitUntil(t, "the swap to queue behind the line being formatted", func() bool { return blockedIn("telemetry.RouteKlog.func1(") })
	unblock()
	select {
	case <-finished:
		<-swapped
	case <-time.After(5 * time.Second):
		t.Fatal("deadlock: recursive RLock with a writer queued")
	}
}

// logInBackground calls line in a loop on its own goroutine, as a
// client-go goroutine another test left behind logs, until the returned
// stop is called; stop returns once the goroutine has.
func logInBackground(line func()) (stop func()) {
	quit, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-quit:
				return
			default:
				line()
			}
		}
	}()
	return func() { close(quit); <-done }
}
