package controller

import (
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/util/workqueue"
)

// queueMetrics are the work queues' series under the names Kubernetes controllers use, labelled by
// queue, so existing dashboards read them; passed to each queue, never set process-wide.
type queueMetrics struct {
	depth, unfinished, longest *prometheus.GaugeVec
	adds, retries              *prometheus.CounterVec
	latency, work              *prometheus.HistogramVec
}

// queueBuckets run from 1 ms to 33 s: join-storm syncs wait and take milliseconds to seconds.
var queueBuckets = prometheus.ExponentialBuckets(0.001, 2, 16)

func newQueueMetrics() *queueMetrics {
	gauge := func(name, help string) *prometheus.GaugeVec {
		return prometheus.NewGaugeVec(prometheus.GaugeOpts{Subsystem: "workqueue", Name: name, Help: help}, []string{"name"})
	}
	counter := func(name, help string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Subsystem: "workqueue", Name: name, Help: help}, []string{"name"})
	}
	histogram := func(name, help string) *prometheus.HistogramVec {
		return prometheus.NewHistogramVec(prometheus.HistogramOpts{Subsystem: "workqueue", Name: name, Help: help, Buckets: queueBuckets}, []string{"name"})
	}
	return &queueMetrics{
		depth:      gauge("depth", "Current depth of the work queue (nodes: Node syncs; csrs: serving-CSR decisions)."),
		unfinished: gauge("unfinished_work_seconds", "Seconds of work in progress not yet observed by work_duration; large values mean stuck syncs."),
		longest:    gauge("longest_running_processor_seconds", "Seconds the longest-running sync of the queue has been running."),
		adds:       counter("adds_total", "Keys added to the work queue."),
		retries:    counter("retries_total", "Keys added back after a delay (a failed sync's backoff, or a recheck)."),
		latency:    histogram("queue_duration_seconds", "Seconds a key waits in the work queue before a worker takes it."),
		work:       histogram("work_duration_seconds", "Seconds a sync takes, API writes included."),
	}
}

func (q *queueMetrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{q.depth, q.unfinished, q.longest, q.adds, q.retries, q.latency, q.work}
}

func (q *queueMetrics) NewDepthMetric(name string) workqueue.GaugeMetric {
	return q.depth.WithLabelValues(name)
}

func (q *queueMetrics) NewAddsMetric(name string) workqueue.CounterMetric {
	return q.adds.WithLabelValues(name)
}

func (q *queueMetrics) NewLatencyMetric(name string) workqueue.HistogramMetric {
	return q.latency.WithLabelValues(name)
}

func (q *queueMetrics) NewWorkDurationMetric(name string) workqueue.HistogramMetric {
	return q.work.WithLabelValues(name)
}

func (q *queueMetrics) NewUnfinishedWorkSecondsMetric(name string) workqueue.SettableGaugeMetric {
	return q.unfinished.WithLabelValues(name)
}

func (q *queueMetrics) NewLongestRunningProcessorSecondsMetric(name string) workqueue.SettableGaugeMetric {
	return q.longest.WithLabelValues(name)
}

func (q *queueMetrics) NewRetriesMetric(name string) workqueue.CounterMetric {
	return q.retries.WithLabelValues(name)
}
