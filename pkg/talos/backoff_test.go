package talos

import (
	"slices"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

// The delays between reconnections double from MinBackoff and stop at
// MaxBackoff; after a refusal they are MaxBackoff at once; after a snapshot
// they start again from MinBackoff.
func TestReconnectDelays(t *testing.T) {
	const ms = time.Millisecond
	steps := func(b *wait.Backoff, n int) []time.Duration {
		var out []time.Duration
		for range n {
			out = append(out, b.Step())
		}
		return out
	}
	for _, tc := range []struct {
		name     string
		min, max time.Duration
		want     []time.Duration
	}{
		{"defaults", 0, 0, []time.Duration{100 * ms, 200 * ms, 400 * ms, 800 * ms, 1600 * ms, 3200 * ms, 6400 * ms, 10 * time.Second, 10 * time.Second}},
		{"configured", 20 * ms, 200 * ms, []time.Duration{20 * ms, 40 * ms, 80 * ms, 160 * ms, 200 * ms, 200 * ms}},
		{"a minimum above the maximum", time.Second, 500 * ms, []time.Duration{time.Second, 500 * ms, 500 * ms}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &Reader{MinBackoff: tc.min, MaxBackoff: tc.max}
			initial := r.reconnectBackoff()
			b := initial
			if got := steps(&b, len(tc.want)); !slices.Equal(got, tc.want) {
				t.Errorf("delays %v, want %v", got, tc.want)
			}
			last := tc.want[len(tc.want)-1]
			for i, d := range steps(&b, 1000) {
				if d != last {
					t.Fatalf("delay %d past the cap is %v, want %v", len(tc.want)+i, d, last)
				}
			}

			b = initial // a snapshot was read
			if d := b.Step(); d != tc.want[0] {
				t.Errorf("first delay after a snapshot %v, want %v", d, tc.want[0])
			}
			b = refusedBackoff(initial) // machined refused
			if got, want := steps(&b, 3), []time.Duration{last, last, last}; !slices.Equal(got, want) {
				t.Errorf("delays after a refusal %v, want %v", got, want)
			}
			b = initial
			if d := b.Step(); d != tc.want[0] {
				t.Errorf("first delay after a refusal and a snapshot %v, want %v", d, tc.want[0])
			}
		})
	}
}
