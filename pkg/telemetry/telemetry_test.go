package telemetry

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"
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

// A listener others can reach says only that it is not ready, closes idle
// keep-alive connections, and refuses oversized headers.
func TestExposedListener(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s := &Server{Addr: "127.0.0.1:0", Registry: NewRegistry(), Terse: true, IdleTimeout: 200 * time.Millisecond,
		Ready: func() error { return errors.New("leader: rebuilding the allocator from node-7's 10.244.7.0/24") }}
	addr, err := s.Listen(ctx)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.Get("http://" + addr + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || strings.TrimSpace(string(body)) != "not ready" {
		t.Errorf("/readyz = %d %q, want 503 \"not ready\" and no reason", resp.StatusCode, body)
	}

	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := io.WriteString(conn, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(conn)
	if r, err := http.ReadResponse(br, nil); err != nil || r.StatusCode != http.StatusOK {
		t.Fatalf("healthz over a kept-alive connection: %v %v", r, err)
	} else {
		_, _ = io.Copy(io.Discard, r.Body)
	}
	_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := br.ReadByte(); err != io.EOF {
		t.Errorf("an idle connection was not closed after the idle timeout: %v", err)
	}

	big := strings.Repeat("x", 128<<10)
	req, _ := http.NewRequest(http.MethodGet, "http://"+addr+"/metrics", nil)
	req.Header.Set("Authorization", "Bearer "+big)
	if resp, err := http.DefaultClient.Do(req); err == nil {
		resp.Body.Close()
		if resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
			t.Errorf("a 128 KiB header: %d, want 431", resp.StatusCode)
		}
	}
}
