package telemetry

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
)

func TestNewLogger(t *testing.T) {
	for _, tc := range []struct {
		level, format string
		ok            bool
	}{
		{"info", "text", true}, {"debug", "json", true}, {"WARN", "JSON", true},
		{"loud", "text", false}, {"info", "xml", false},
	} {
		_, err := NewLogger(io.Discard, tc.level, tc.format)
		if (err == nil) != tc.ok {
			t.Errorf("NewLogger(%q, %q) err = %v, want ok=%v", tc.level, tc.format, err, tc.ok)
		}
	}
}

func TestServer(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var ready atomic.Bool
	s := &Server{Addr: "127.0.0.1:0", Registry: NewRegistry(), Ready: func() error {
		if !ready.Load() {
			return errors.New("no facts yet")
		}
		return nil
	}}
	addr, err := s.Listen(ctx)
	if err != nil {
		t.Fatal(err)
	}
	get := func(path string) (int, string) {
		resp, err := http.Get("http://" + addr + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := get("/readyz"); code != 503 || !strings.Contains(body, "no facts yet") {
		t.Fatalf("/readyz before ready: %d %q", code, body)
	}
	ready.Store(true)
	if code, _ := get("/readyz"); code != 200 {
		t.Fatalf("/readyz when ready: %d", code)
	}
	if code, _ := get("/healthz"); code != 200 {
		t.Fatalf("/healthz: %d", code)
	}
	if code, body := get("/metrics"); code != 200 || !strings.Contains(body, "go_goroutines") {
		t.Fatalf("/metrics: %d", code)
	}
	if _, err := (&Server{Addr: addr, Registry: NewRegistry()}).Listen(ctx); err == nil {
		t.Fatal("a second listener on a bound address must fail at start")
	}
}
