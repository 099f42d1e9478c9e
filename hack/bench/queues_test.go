package main

import (
	"testing"
	"time"
)

// Quantiles from cumulative buckets: interpolated inside the bucket that
// holds them, the last finite bound past it, zero with no samples; a
// reading less an earlier one counts only what came between.
func TestQueueQuantiles(t *testing.T) {
	body := []byte(`# HELP workqueue_adds_total Keys added.
workqueue_adds_total{name="csrs"} 10
workqueue_queue_duration_seconds_bucket{name="csrs",le="0.001"} 0
workqueue_queue_duration_seconds_bucket{name="csrs",le="0.002"} 4
workqueue_queue_duration_seconds_bucket{name="csrs",le="0.004"} 8
workqueue_queue_duration_seconds_bucket{name="csrs",le="+Inf"} 10
workqueue_work_duration_seconds_bucket{name="csrs",le="0.001"} 10
workqueue_work_duration_seconds_bucket{name="csrs",le="+Inf"} 10
workqueue_adds_total{name="nodes"} 0
workqueue_queue_duration_seconds_bucket{name="nodes",le="+Inf"} 0
apiserver_request_total{verb="GET"} 3
`)
	q := parseQueues(body)
	csrs := q["csrs"]
	if csrs == nil || csrs.adds != 10 || len(q) != 2 {
		t.Fatalf("parsed %+v", q)
	}
	for _, tc := range []struct {
		name string
		got  time.Duration
		want time.Duration
	}{
		{"p50 inside (0.002, 0.004]: 5th of 10, 1 of 4 into it", quantile(csrs.wait, 0.5), 2500 * time.Microsecond},
		{"p40 at a bound", quantile(csrs.wait, 0.4), 2 * time.Millisecond},
		{"p90 past the last finite bound", quantile(csrs.wait, 0.9), 4 * time.Millisecond},
		{"p50 of the first bucket", quantile(csrs.work, 0.5), 500 * time.Microsecond},
		{"no samples", quantile(q["nodes"].wait, 0.5), 0},
	} {
		if tc.got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, tc.got, tc.want)
		}
	}
	before := parseQueues([]byte(`workqueue_adds_total{name="csrs"} 4
workqueue_queue_duration_seconds_bucket{name="csrs",le="0.001"} 0
workqueue_queue_duration_seconds_bucket{name="csrs",le="0.002"} 4
workqueue_queue_duration_seconds_bucket{name="csrs",le="0.004"} 4
workqueue_queue_duration_seconds_bucket{name="csrs",le="+Inf"} 4
`))
	d := csrs.since(before["csrs"])
	if d.adds != 6 || quantile(d.wait, 0.5) != 3500*time.Microsecond {
		t.Errorf("since: %v keys, p50 %v; want 6 keys, p50 3.5ms (the 3rd of 6, in (0.002, 0.004] holding 4)", d.adds, quantile(d.wait, 0.5))
	}
}
