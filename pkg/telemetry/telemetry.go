// Package telemetry holds what both binaries expose to operators: structured
// logs, and an optional HTTP listener with Prometheus metrics, /healthz and
// /readyz.
package telemetry

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// NewLogger returns a logger for --log-level (debug, info, warn, error) and
// --log-format (text, json).
func NewLogger(w io.Writer, level, format string) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("log level %q: want debug, info, warn or error", level)
	}
	opts := &slog.HandlerOptions{Level: l, ReplaceAttr: readableDurations}
	switch strings.ToLower(format) {
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, fmt.Errorf("log format %q: want text or json", format)
}

// readableDurations writes a time.Duration as "1.5s": the JSON handler
// would write nanoseconds.
func readableDurations(_ []string, a slog.Attr) slog.Attr {
	if a.Value.Kind() == slog.KindDuration {
		return slog.String(a.Key, a.Value.Duration().String())
	}
	return a
}

// NewRegistry returns a registry with the Go runtime and process collectors.
func NewRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return reg
}

// Server serves /metrics, /healthz (the process is alive) and /readyz
// (Ready returns nil).
type Server struct {
	Addr     string
	Registry *prometheus.Registry
	// Ready reports why the component is not ready yet; nil when it is.
	Ready func() error
	Log   *slog.Logger
	// TLS, when set, serves HTTPS.
	TLS *tls.Config
	// Protect, when set, guards /metrics (delegatedauth.Guard.Wrap);
	// /healthz and /readyz stay open, as kubelet probes carry no token.
	Protect func(http.Handler) http.Handler
	// Terse, for a listener others can reach: /readyz says only "not
	// ready", not why (the reason is in the log and on the loopback one).
	Terse bool
	// IdleTimeout closes a keep-alive connection idle this long (default 90s).
	IdleTimeout time.Duration
}

// CheckAddr refuses a listen address that cannot be bound, before
// anything starts: host:port with a numeric port (empty: off).
func CheckAddr(addr string) error {
	if addr == "" {
		return nil
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("%q: want host:port, e.g. 127.0.0.1:10290 or :10290", addr)
	}
	if _, err := strconv.ParseUint(port, 10, 16); err != nil {
		return fmt.Errorf("%q: port %q is not a number from 0 to 65535", addr, port)
	}
	if host != "" && host != "localhost" {
		if _, err := netip.ParseAddr(host); err != nil {
			return fmt.Errorf("%q: host %q is not an IP address", addr, host)
		}
	}
	return nil
}

// Listen binds the address now, so a bad --metrics-addr fails at start, and
// serves until ctx ends. It returns the bound address (useful with port 0).
func (s *Server) Listen(ctx context.Context) (string, error) {
	ln, err := net.Listen("tcp", s.Addr)
	if err != nil {
		return "", fmt.Errorf("metrics listener: %w", err)
	}
	if s.TLS != nil {
		ln = tls.NewListener(ln, s.TLS)
	}
	var metrics http.Handler = promhttp.HandlerFor(s.Registry, promhttp.HandlerOpts{})
	if s.Protect != nil {
		metrics = s.Protect(metrics)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", metrics)
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok\n") })
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		if s.Ready != nil {
			if err := s.Ready(); err != nil {
				msg := "not ready: " + err.Error()
				if s.Terse {
					msg = "not ready"
				}
				http.Error(w, msg, http.StatusServiceUnavailable)
				return
			}
		}
		io.WriteString(w, "ok\n")
	})
	// Every connection ends: a header within 5 s, a request within 10 s,
	// an answer within 30 s, an idle keep-alive after 90 s (as Kubernetes
	// components), and headers (a bearer token) of 64 KiB at most.
	idle := s.IdleTimeout
	if idle <= 0 {
		idle = 90 * time.Second
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 10 * time.Second,
		WriteTimeout: 30 * time.Second, IdleTimeout: idle, MaxHeaderBytes: 64 << 10}
	go func() {
		<-ctx.Done()
		shutdown, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(shutdown)
	}()
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) && s.Log != nil {
			s.Log.Error("metrics listener stopped", "err", err)
		}
	}()
	return ln.Addr().String(), nil
}
