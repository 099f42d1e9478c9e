package telemetry

import (
	"context"
	"flag"
	"log/slog"
	"sync"
	"sync/atomic"

	"k8s.io/klog/v2"
)

// klog is process-wide: its logger and its verbosity are globals that
// client-go's goroutines (reflectors, leader election, the certificate
// manager) read at any time, and a test process runs many commands in
// turn. So klog is pointed once, for the life of the process, at a router
// whose target each RouteKlog call swaps atomically and whose restore puts
// back what was there before: a command run in-process changes klog only
// while it runs, and never writes a global another goroutine is reading.

// klogDebugVerbosity is the klog -v that --log-level debug turns on:
// client-go's requests, reflectors and leader-election attempts.
const klogDebugVerbosity = "4"

var klogRoute struct {
	once   sync.Once
	target atomic.Pointer[slog.Logger] // nil: klog's lines are dropped
	mu     sync.Mutex                  // serializes RouteKlog and restores (flags, verbosity)
	flags  *flag.FlagSet               // klog's own -v, registered once
	v      string                      // the verbosity set now
}

// RouteKlog sends client-go's own logs (klog: leader election, reflectors,
// the certificate manager) through log, so --log-format json holds for
// every line the process writes (with a logger set, klog writes nothing
// itself). klog's own verbosity follows log's level (its flags are never
// registered on the command line): V(4) and below with debug, none else.
// The returned func puts back the previous route; a command defers it.
func RouteKlog(log *slog.Logger) (restore func()) {
	klogRoute.once.Do(func() {
		klogRoute.flags = flag.NewFlagSet("klog", flag.ContinueOnError)
		klog.InitFlags(klogRoute.flags)
		klogRoute.v = "0"
		klog.SetSlogLogger(slog.New(routedHandler{}))
	})
	v := "0"
	if log.Enabled(context.Background(), slog.LevelDebug) {
		v = klogDebugVerbosity
	}
	klogRoute.mu.Lock()
	defer klogRoute.mu.Unlock()
	prev, prevV := klogRoute.target.Swap(log), klogRoute.v
	setKlogVerbosity(v)
	return func() {
		klogRoute.mu.Lock()
		defer klogRoute.mu.Unlock()
		klogRoute.target.Store(prev)
		setKlogVerbosity(prevV)
	}
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

func (h routedHandler) current() slog.Handler {
	l := klogRoute.target.Load()
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
	c := h.current()
	return c != nil && c.Enabled(ctx, level)
}

func (h routedHandler) Handle(ctx context.Context, r slog.Record) error {
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
