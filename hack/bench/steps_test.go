package main

import (
	"strings"
	"testing"
	"time"
)

// The certificate's steps are per node, each from the step before on the
// same node; a node missing either step is left out of that one.
func TestCertificateSteps(t *testing.T) {
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	first := map[string]map[string]time.Duration{
		compCoordinator + " patch nodes":                                {"a": ms(1000), "b": ms(2000), "c": ms(3000)},
		compAgent + " patch nodes":                                      {"a": ms(1100), "b": ms(2300)},
		compCoordinator + " update certificatesigningrequests/approval": {"a": ms(1600), "b": ms(2400), "c": ms(9000)},
		compOther + " update certificatesigningrequests/status":         {"a": ms(2000), "b": ms(3400), "c": ms(9100)},
	}
	got := certificateSteps(first)
	for _, want := range []string{
		"→ agent patch nodes", "p50    100ms  p95    300ms  (2 nodes)",
		"→ coordinator update certificatesigningrequests/approval", "p50    100ms  p95    500ms  (2 nodes)",
		"→ other update certificatesigningrequests/status", "p50    400ms  p95       1s  (3 nodes)",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("missing %q in:\n%s", want, got)
		}
	}
	if certificateSteps(map[string]map[string]time.Duration{}) != "" {
		t.Error("steps printed for a run without certificates")
	}
}
