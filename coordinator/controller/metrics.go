package controller

import "github.com/prometheus/client_golang/prometheus"

// Metrics are the coordinator's Prometheus series.
type Metrics struct {
	Leader         prometheus.Gauge
	Allocations    *prometheus.CounterVec
	PoolSegments   *prometheus.GaugeVec
	CSRDecisions   *prometheus.CounterVec
	GrantsRefused  *prometheus.CounterVec
	NodeInitTime   prometheus.Histogram
	NodeWrites     *prometheus.CounterVec
	RebuildSeconds prometheus.Gauge
}

// NewMetrics registers the series with reg (nil: unregistered).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		Leader: prometheus.NewGauge(prometheus.GaugeOpts{Name: "nodeinit_coordinator_leader", Help: "1 while this replica holds the lease."}),
		Allocations: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "nodeinit_coordinator_pod_cidr_allocations_total", Help: "Pod CIDR allocations by pool (ipv4, ipv6, node-prefix) and result.",
		}, []string{"pool", "result"}),
		PoolSegments: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "nodeinit_coordinator_pool_segments", Help: "Pod CIDR segments per pool, by state (used, total); node-prefixes sums every node's own prefix set.",
		}, []string{"pool", "state"}),
		CSRDecisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "nodeinit_coordinator_csr_decisions_total", Help: "Serving-CSR decisions by decision (Approve, Deny, TimedOut) and reason category.",
		}, []string{"decision", "reason"}),
		GrantsRefused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "nodeinit_coordinator_grants_refused_total", Help: "Requested labels and taints the grant policy refused.",
		}, []string{"kind"}),
		NodeInitTime: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "nodeinit_coordinator_node_time_to_initialized_seconds", Help: "From Node creation to removal of the uninitialized taint.",
			Buckets: prometheus.ExponentialBuckets(0.05, 2, 14),
		}),
		NodeWrites: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "nodeinit_coordinator_writes_total", Help: "Writes by kind (finalize, review, approval) and result.",
		}, []string{"kind", "result"}),
		RebuildSeconds: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "nodeinit_coordinator_rebuild_seconds", Help: "Time the last leadership start took to rebuild the allocator from all Nodes.",
		}),
	}
	if reg != nil {
		reg.MustRegister(m.Leader, m.Allocations, m.PoolSegments, m.CSRDecisions, m.GrantsRefused, m.NodeInitTime, m.NodeWrites, m.RebuildSeconds)
	}
	return m
}
