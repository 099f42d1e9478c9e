package main

import (
	"fmt"
	"io"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
)

// queueStats is one of the coordinator's work queues as its /metrics
// says (workqueue_*): keys added, and the cumulative buckets of the time
// keys waited and the time syncs took.
type queueStats struct {
	adds       float64
	wait, work map[float64]float64 // upper bound (le) → cumulative count
}

// queues reads the coordinator's work queues from its /metrics.
func (c *coordinator) queues() (map[string]*queueStats, error) {
	resp, err := (&http.Client{Timeout: 5 * time.Second}).Get("http://" + c.metrics + "/metrics")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET /metrics: %s", resp.Status)
	}
	q := parseQueues(body)
	if len(q) == 0 {
		return nil, fmt.Errorf("no workqueue_* series in the coordinator's /metrics")
	}
	return q, nil
}

func parseQueues(body []byte) map[string]*queueStats {
	out := map[string]*queueStats{}
	for _, m := range samples(body, func(name string) bool { return strings.HasPrefix(name, "workqueue_") }) {
		q := out[m.labels["name"]]
		if q == nil {
			q = &queueStats{wait: map[float64]float64{}, work: map[float64]float64{}}
			out[m.labels["name"]] = q
		}
		le, err := strconv.ParseFloat(m.labels["le"], 64) // "+Inf" parses as +Inf
		switch {
		case m.name == "workqueue_adds_total":
			q.adds = m.value
		case m.name == "workqueue_queue_duration_seconds_bucket" && err == nil:
			q.wait[le] = m.value
		case m.name == "workqueue_work_duration_seconds_bucket" && err == nil:
			q.work[le] = m.value
		}
	}
	return out
}

// since is q less what before counted (nil: nothing before).
func (q *queueStats) since(before *queueStats) *queueStats {
	if before == nil {
		return q
	}
	sub := func(a, b map[float64]float64) map[float64]float64 {
		out := map[float64]float64{}
		for le, v := range a {
			out[le] = v - b[le]
		}
		return out
	}
	return &queueStats{adds: q.adds - before.adds, wait: sub(q.wait, before.wait), work: sub(q.work, before.work)}
}

// quantile estimates the q-quantile of cumulative buckets by linear
// interpolation inside the bucket that holds it, as Prometheus's
// histogram_quantile does; past the last finite bound (33 s), that bound.
func quantile(buckets map[float64]float64, q float64) time.Duration {
	les := make([]float64, 0, len(buckets))
	for le := range buckets {
		les = append(les, le)
	}
	slices.Sort(les)
	if len(les) == 0 || buckets[les[len(les)-1]] == 0 {
		return 0
	}
	target := q * buckets[les[len(les)-1]]
	lower, below := 0.0, 0.0
	for _, le := range les {
		n := buckets[le]
		if n >= target {
			if math.IsInf(le, 1) {
				return time.Duration(lower * float64(time.Second))
			}
			frac := 0.0
			if n > below {
				frac = (target - below) / (n - below)
			}
			return time.Duration((lower + frac*(le-lower)) * float64(time.Second))
		}
		lower, below = le, n
	}
	return time.Duration(lower * float64(time.Second))
}

// printQueues writes each queue's keys, wait and sync times between two
// readings of the coordinator's /metrics.
func printQueues(w *strings.Builder, before, after map[string]*queueStats) {
	names := make([]string, 0, len(after))
	for name := range after {
		names = append(names, name)
	}
	slices.Sort(names)
	fmt.Fprintf(w, "coordinator work queues during the storm (its workqueue_* series; bucket estimates):\n")
	for _, name := range names {
		q := after[name].since(before[name])
		fmt.Fprintf(w, "  %-6s %6.0f adds; waited p50 %8s  p90 %8s; synced p50 %8s  p90 %8s\n", name, q.adds,
			quantile(q.wait, 0.5).Round(time.Millisecond), quantile(q.wait, 0.9).Round(time.Millisecond),
			quantile(q.work, 0.5).Round(time.Millisecond), quantile(q.work, 0.9).Round(time.Millisecond))
	}
}
