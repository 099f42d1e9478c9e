package controller

import (
	"github.com/prometheus/client_golang/prometheus"
)

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
	// Trust-model series: reports ignored, addresses not recorded, the flood guard.
	MalformedReports *prometheus.CounterVec
	AddressesRefused prometheus.Counter
	FloodGuard       prometheus.Gauge
	PendingCSRs      prometheus.Gauge
	NotAdopted       prometheus.Gauge
	PodCIDRConflicts prometheus.Counter
	NodesWaiting     prometheus.Gauge
	Contested        *prometheus.CounterVec
	// RecordsReconciled counts the records a new leader released of Nodes deleted while none led.
	RecordsReconciled prometheus.Counter
	// PodCIDRsOutsidePool counts Nodes with IPv4 pod CIDRs outside ipam.ipv4Pool at rebuild.
	PodCIDRsOutsidePool prometheus.Gauge
	// RecordsUnreadable is how many NodeRecords the informer holds that this version cannot read.
	RecordsUnreadable prometheus.Gauge
	// Queues are the Node and CSR work queues' workqueue_* series.
	Queues *queueMetrics
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
			Name: "nodeinit_coordinator_writes_total", Help: "Writes by kind (finalize, review, approval, record) and result.",
		}, []string{"kind", "result"}),
		RebuildSeconds: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "nodeinit_coordinator_rebuild_seconds", Help: "Time the last leadership start took to rebuild the allocator from all Nodes.",
		}),
		MalformedReports: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "nodeinit_coordinator_malformed_reports_total", Help: "Agent reports (Node annotations) that could not be decoded; nothing was changed for them.",
		}, []string{"annotation"}),
		AddressesRefused: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "nodeinit_coordinator_addresses_refused_total", Help: "Node addresses not recorded as the Node's (outside nodeNetworks, reserved, another Node's, over the cap).",
		}),
		FloodGuard: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "nodeinit_coordinator_csr_flood_guard", Help: "1 while automatic serving-CSR approval is paused because too many CSRs are pending.",
		}),
		PendingCSRs: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "nodeinit_coordinator_pending_serving_csrs", Help: "Pending kubelet-serving CSRs as the flood guard counts them (each Node at most twice).",
		}),
		NotAdopted: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "nodeinit_coordinator_nodes_not_adopted", Help: "Initialized Nodes without a NodeRecord, left alone because adoptExisting is off.",
		}),
		PodCIDRConflicts: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "nodeinit_coordinator_pod_cidr_conflicts_total", Help: "Pod CIDRs seen on a Node that overlap another Node's (written by someone else).",
		}),
		NodesWaiting: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "nodeinit_coordinator_nodes_waiting", Help: "Uninitialized Nodes the coordinator has looked at and that still wait for their agent's report (or providerID, or up to csr.initWait for their kubelet's serving CSR): nothing is written to them yet.",
		}),
		Contested: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "nodeinit_coordinator_contested_claims_total",
			Help: "Times a Node was refused an address or node prefix because another Node holds it (kind: address, prefix); the victim's Node carries an Event naming the holder.",
		}, []string{"kind"}),
		RecordsReconciled: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "nodeinit_coordinator_records_reconciled_total",
			Help: "NodeRecords whose Node was deleted (or re-created) while no coordinator led, released (claims, prefix, grants) when a leader started.",
		}),
		PodCIDRsOutsidePool: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "nodeinit_coordinator_nodes_pod_cidr_outside_pool",
			Help: "Nodes whose IPv4 pod CIDRs lay outside ipam.ipv4Pool when this leader rebuilt its allocator: ipam.ipv4Pool is probably not the cluster's pod subnet (cluster.network.podSubnets), and Nodes that join get segments the CNI may not route.",
		}),
		RecordsUnreadable: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "nodeinit_coordinator_noderecords_unreadable",
			Help: "NodeRecords this replica cannot read (an edit the API server accepted, such as a date in lower case): each still holds the addresses and node prefix it names, and its Node's serving CSRs wait (NodeRecordUnreadable Events) until it is fixed.",
		}),
		Queues: newQueueMetrics(),
	}
	if reg != nil {
		reg.MustRegister(m.Leader, m.Allocations, m.PoolSegments, m.CSRDecisions, m.GrantsRefused, m.NodeInitTime, m.NodeWrites, m.RebuildSeconds,
			m.MalformedReports, m.AddressesRefused, m.FloodGuard, m.PendingCSRs, m.NotAdopted, m.PodCIDRConflicts, m.NodesWaiting, m.Contested, m.RecordsReconciled, m.RecordsUnreadable, m.PodCIDRsOutsidePool)
		reg.MustRegister(m.Queues.collectors()...)
	}
	return m
}
