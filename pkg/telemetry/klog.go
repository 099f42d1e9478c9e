package telemetry

import (
	"context"
	"flag"
	"log/slog"
	"slices"
	"sync"

	"k8s.io/klog/v2"
)

// klog is process-wide: its logger and its verbosity are globals that
// client-go's goroutines (reflectors, leader election, the certificate
// manager) read at any time, and a test process runs many commands in
// turn, some at once. So:
//   - klog is pointed at a router once, in this package's init, before any
//     goroutine that could read it exists (klog's own setters are
//     unsynchronized: doing it on a command's first run raced a goroutine
//     another test left logging);
//   - each RouteKlog pushes a route (a logger and its verbosity) on a stack,
//     and its restore removes that route wherever it is: klog follows the
//     newest route still there, so commands that return out of order never
//     leave klog writing to one that has returned;
//   - a klog line counts itself in flight on the route it took, and a
//     restore waits for its route's lines: when restore returns, no line is
//     on its way to the command's writer. The route lock is held only to
//     pick the route, never while a line is handled (a value that logs
//     while being formatted re-enters klog) nor while klog's verbosity is
//     set (klog's legacy calls hold klog's own lock while they call the
//     router).

// klogDebugVerbosity is the klog -v that --log-level debug turns on:
// client-go's requests, reflectors and leader-election attempts.
const klogDebugVerbosity = "4"

// klogRouteEntry is one RouteKlog's route.
type klogRouteEntry struct {
	log      *slog.Logger
	v        string
	inFlight sync.WaitGroup // lines being handled by log
}

var klogRoute struct {
	swap   sync.Mutex      // serializes RouteKlog and restores (the stack, klog's -v)
	mu     sync.RWMutex    // guards target and routes; held only to pick or swap
	target *klogRouteEntry // the newest route, nil: klog's lines are dropped
	routes []*klogRouteEntry
	flags  *flag.FlagSet // klog's own -v, registered once
	v      string        // the verbosity set now (under swap)
}

// RouteKlog sends client-go's own logs (klog: leader election, reflectors,
// the certificate manager) through log, so --log-format json holds for
// every line the process writes (with a logger set, klog writes nothing
// itself). klog's own verbosity follows log's level (its flags are never
// registered on the command line): V(4) and below with debug, none else.
// The returned func removes the route; a command defers it.
func RouteKlog(log *slog.Logger) (restore func()) {
	e := &klogRouteEntry{log: log, v: "0"}
	if log.Enabled(context.Background(), slog.LevelDebug) {
		e.v = klogDebugVerbosity
	}
	klogRoute.swap.Lock()
	defer klogRoute.swap.Unlock()
	setKlogVerbosity(e.v)
	klogRoute.mu.Lock()
	klogRoute.routes = append(klogRoute.routes, e)
	klogRoute.target = e
	klogRoute.mu.Unlock()
	return func() {
		klogRoute.swap.Lock()
		defer klogRoute.swap.Unlock()
		klogRoute.mu.Lock()
		klogRoute.routes = slices.DeleteFunc(klogRoute.routes, func(r *klogRouteEntry) bool { return r == e })
		klogRoute.target = nil
		if n := len(klogRoute.routes); n > 0 {
			klogRoute.target = klogRoute.routes[n-1]
		}
		v := "0"
		if klogRoute.target != nil {
			v = klogRoute.target.v
		}
		klogRoute.mu.Unlock()
		setKlogVerbosity(v)
		e.inFlight.Wait() // every line that took this route before it went
	}
}

// init points klog at the router with verbosity 0 and no route (klog's
// lines are dropped until a command routes them). Only the agent and the
// coordinator import this package, and both route klog.
func init() {
	klogRoute.flags = flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(klogRoute.flags)
	_ = klogRoute.flags.Set("v", "0")
	klogRoute.v = "0"
	klog.SetSlogLogger(slog.New(routedHandler{}))
}

// setKlogVerbosity sets klog's -v (klog locks and stores it); the caller
// holds klogRoute.swap, which guards the FlagSet, and not klogRoute.mu.
func setKlogVerbosity(v string) {
	if klogRoute.v != v {
		_ = klogRoute.flags.Set("v", v)
		klogRoute.v = v
	}
}

// take picks the current route and counts a line in flight on it; the
// caller calls done when the line is handled. nil: no route.
func take() *klogRouteEntry {
	klogRoute.mu.RLock()
	defer klogRoute.mu.RUnlock()
	e := klogRoute.target
	if e != nil {
		e.inFlight.Add(1)
	}
	return e
}

// routedHandler hands each record to the current target's handler, with
// the attributes and groups klog's logger added on the way.
type routedHandler struct {
	ops []func(slog.Handler) slog.Handler // WithAttrs/WithGroup, in order
}

// on is route e's handler with the attributes and groups klog's logger
// added on the way.
func (h routedHandler) on(e *klogRouteEntry) slog.Handler {
	out := e.log.Handler()
	for _, op := range h.ops {
		out = op(out)
	}
	return out
}

func (h routedHandler) Enabled(ctx context.Context, level slog.Level) bool {
	e := take()
	if e == nil {
		return false
	}
	defer e.inFlight.Done()
	return h.on(e).Enabled(ctx, level)
}

func (h routedHandler) Handle(ctx context.Context, r slog.Record) error {
	e := take()
	if e == nil {
		return nil
	}
	defer e.inFlight.Done()
	return h.on(e).Handle(ctx, r)
}

func (h routedHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return routedHandler{ops: append(h.ops[:len(h.ops):len(h.ops)], func(c slog.Handler) slog.Handler { return c.WithAttrs(attrs) })}
}

func (h routedHandler) WithGroup(name string) slog.Handler {
	return routedHandler{ops: append(h.ops[:len(h.ops):len(h.ops)], func(c slog.Handler) slog.Handler { return c.WithGroup(name) })}
}
