package telemetry

import (
	"context"
	"flag"
	"log/slog"
	"sync"

	"k8s.io/klog/v2"
)

// klog is process-wide: its logger and its verbosity are globals that
// client-go's goroutines (reflectors, leader election, the certificate
// manager) read at any time, and a test process runs many commands in
// turn. So klog is pointed at a router once, in this package's init,
// before any goroutine that could read it exists (klog's own writes are
// unsynchronized: doing it on a command's first run raced a goroutine
// another test left logging). Each RouteKlog call then swaps the router's
// target atomically and its restore puts back what was there before: a
// command run in-process changes klog only while it runs, and never
// writes a global another goroutine is reading. A klog line holds the
// route's read lock while it is handled, and a swap takes the write lock:
// when restore returns, no line is still on its way to the command's
// writer.

// klogDebugVerbosity is the klog -v that --log-level debug turns on:
// client-go's requests, reflectors and leader-election attempts.
const klogDebugVerbosity = "4"

var klogRoute struct {
	mu     sync.RWMutex  // read: a line being handled; write: a swap (target, flags, verbosity)
	target *slog.Logger  // nil: klog's lines are dropped
	flags  *flag.FlagSet // klog's own -v, registered once
	v      string        // the verbosity set now
}

// RouteKlog sends client-go's own logs (klog: leader election, reflectors,
// the certificate manager) through log, so --log-format json holds for
// every line the process writes (with a logger set, klog writes nothing
// itself). klog's own verbosity follows log's level (its flags are never
// registered on the command line): V(4) and below with debug, none else.
// The returned func puts back the previous route; a command defers it.
func RouteKlog(log *slog.Logger) (restore func()) {
	v := "0"
	if log.Enabled(context.Background(), slog.LevelDebug) {
		v = klogDebugVerbosity
	}
	klogRoute.mu.Lock()
	defer klogRoute.mu.Unlock()
	prev, prevV := klogRoute.target, klogRoute.v
	klogRoute.target = log
	setKlogVerbosity(v)
	return func() {
		klogRoute.mu.Lock()
		defer klogRoute.mu.Unlock()
		klogRoute.target = prev
		setKlogVerbosity(prevV)
	}
}

// init points klog at the router with verbosity 0 and no target (klog's
// lines are dropped until a command routes them). Only the agent and the
// coordinator import this package, and both route klog.
func init() {
	klogRoute.flags = flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(klogRoute.flags)
	_ = klogRoute.flags.Set("v", "0")
	klogRoute.v = "0"
	klog.SetSlogLogger(slog.New(routedHandler{}))
}

// setKlogVerbosity sets klog's -v (klog locks and stores it atomically);
// the caller holds klogRoute.mu, which guards the FlagSet.
func setKlogVerbosity(v string) {
	if klogRoute.v != v {
		_ = klogRoute.flags.Set("v", v)
		klogRoute.v = v
	}
}

// routedHandler hands each record to the current target's handler, with
// the attributes and groups klog's logger added on the way.
type routedHandler struct {
	ops []func(slog.Handler) slog.Handler // WithAttrs/WithGroup, in order
}

// current is the target's handler; the caller holds klogRoute.mu for
// reading.
func (h routedHandler) current() slog.Handler {
	l := klogRoute.target
	if l == nil {
		return nil
	}
	out := l.Handler()
	for _, op := range h.ops {
		out = op(out)
	}
	return out
}

func (h routedHandler) Enabled(ctx context.Context, level slog.Level) bool {
	klogRoute.mu.RLock()
	defer klogRoute.mu.RUnlock()
	c := h.current()
	return c != nil && c.Enabled(ctx, level)
}

func (h routedHandler) Handle(ctx context.Context, r slog.Record) error {
	klogRoute.mu.RLock()
	defer klogRoute.mu.RUnlock()
	if c := h.current(); c != nil {
		return c.Handle(ctx, r)
	}
	return nil
}

func (h routedHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return routedHandler{ops: append(h.ops[:len(h.ops):len(h.ops)], func(c slog.Handler) slog.Handler { return c.WithAttrs(attrs) })}
}

func (h routedHandler) WithGroup(name string) slog.Handler {
	return routedHandler{ops: append(h.ops[:len(h.ops):len(h.ops)], func(c slog.Handler) slog.Handler { return c.WithGroup(name) })}
}
