package controller

import (
	"context"
	"crypto/ed25519"
	"slices"
	"testing"
	"time"

	"github.com/talos-nodeinit/talos-nodeinit/pkg/facts"
	"github.com/talos-nodeinit/talos-nodeinit/pkg/rules"
)

// The delays between retries of a failing sync double from MinBackoff, stop
// at MaxBackoff, and start again from MinBackoff after a successful sync.
func TestRetryDelays(t *testing.T) {
	const ms = time.Millisecond
	for _, tc := range []struct {
		name     string
		min, max time.Duration
		want     []time.Duration
	}{
		{"defaults", 0, 0, []time.Duration{200 * ms, 400 * ms, 800 * ms, 1600 * ms, 3200 * ms, 6400 * ms, 12800 * ms, 25600 * ms, 30 * time.Second, 30 * time.Second}},
		{"configured", 20 * ms, 200 * ms, []time.Duration{20 * ms, 40 * ms, 80 * ms, 160 * ms, 200 * ms, 200 * ms}},
		{"a minimum above the maximum", time.Second, 500 * ms, []time.Duration{time.Second, 500 * ms, 500 * ms}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, key, err := ed25519.GenerateKey(nil)
			if err != nil {
				t.Fatal(err)
			}
			a, err := New(Config{
				Kubeconfig: "kubeconfig", Rules: &rules.Rules{}, Key: key,
				Facts:      func(context.Context, func(facts.Talos)) error { return nil },
				MinBackoff: tc.min, MaxBackoff: tc.max,
			})
			if err != nil {
				t.Fatal(err)
			}
			b := retryBackoff(a.cfg)
			var got []time.Duration
			for range tc.want {
				got = append(got, b.Step())
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("delays %v, want %v", got, tc.want)
			}
			last := tc.want[len(tc.want)-1]
			for i := range 1000 {
				if d := b.Step(); d != last {
					t.Fatalf("delay %d past the cap is %v, want %v", len(tc.want)+i, d, last)
				}
			}
			b = retryBackoff(a.cfg) // a sync succeeded
			if d := b.Step(); d != tc.want[0] {
				t.Errorf("first delay after a success %v, want %v", d, tc.want[0])
			}
		})
	}
}
