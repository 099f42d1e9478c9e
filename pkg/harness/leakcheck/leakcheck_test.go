package leakcheck

import (
	"strings"
	"testing"
)

// A goroutine started after the snapshot and still running is reported,
// with its stack; one that ended is not.
func TestLeftoverFindsARunningGoroutine(t *testing.T) {
	before := goroutines()
	stop := make(chan struct{})
	go func() { <-stop }()
	left := leftover(before)
	if len(left) != 1 || !strings.Contains(left[0], "TestLeftoverFindsARunningGoroutine") {
		t.Fatalf("leftover = %q, want the one goroutine this test started", left)
	}
	close(stop)
	if left := leftover(before); len(left) != 0 {
		t.Errorf("an ended goroutine is still reported: %q", left)
	}
}
