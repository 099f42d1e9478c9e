package telemetry

import (
	"strings"
	"testing"
)

func TestCheckAddr(t *testing.T) {
	for _, tc := range []struct {
		addr, err string
	}{
		{"", ""}, {":10290", ""}, {"127.0.0.1:10290", ""}, {"[::1]:0", ""}, {"localhost:10290", ""},
		{"10290", "want host:port"}, {"127.0.0.1", "want host:port"}, {":http", "not a number"},
		{":70000", "not a number"}, {"node-a:10290", "not an IP address"}, {"1.2.3.4.5:1", "not an IP address"},
	} {
		err := CheckAddr(tc.addr)
		if (err == nil) != (tc.err == "") || (err != nil && !strings.Contains(err.Error(), tc.err)) {
			t.Errorf("CheckAddr(%q) = %v, want %q", tc.addr, err, tc.err)
		}
	}
}

func TestServingTLS(t *testing.T) {
	cfg, err := ServingTLS("", "")
	if err != nil || len(cfg.Certificates) != 1 {
		t.Fatalf("self-signed: %v", err)
	}
	if _, err := ServingTLS("/some/cert.pem", ""); err == nil || !strings.Contains(err.Error(), "both") {
		t.Errorf("a certificate without its key: %v", err)
	}
	if _, err := ServingTLS("/nonexistent/cert.pem", "/nonexistent/key.pem"); err == nil {
		t.Error("missing files accepted")
	}
}
