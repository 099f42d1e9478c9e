package netlinksource

import (
	"slices"
	"testing"
	"time"
)

// The delays between resubscriptions (and listings) double from 100ms, stop
// at 5s, and start again from 100ms after a successful subscription.
func TestResubscribeDelays(t *testing.T) {
	const ms = time.Millisecond
	want := []time.Duration{100 * ms, 200 * ms, 400 * ms, 800 * ms, 1600 * ms, 3200 * ms, 5 * time.Second, 5 * time.Second}
	b := resubscribeBackoff()
	var got []time.Duration
	for range want {
		got = append(got, b.Step())
	}
	if !slices.Equal(got, want) {
		t.Errorf("delays %v, want %v", got, want)
	}
	for i := range 1000 {
		if d := b.Step(); d != 5*time.Second {
			t.Fatalf("delay %d past the cap is %v, want 5s", len(want)+i, d)
		}
	}
	b = resubscribeBackoff() // subscribed
	if d := b.Step(); d != 100*ms {
		t.Errorf("first delay after a subscription %v, want 100ms", d)
	}
}
