package controller

import "github.com/prometheus/client_golang/prometheus"

// Metrics are the agent's Prometheus series.
type Metrics struct {
	Writes        *prometheus.CounterVec
	Syncs         *prometheus.CounterVec
	Attestations  *prometheus.CounterVec
	CredReloads   prometheus.Counter
	FactsDegraded prometheus.Gauge
	Ready         prometheus.Gauge
	WatchRestarts prometheus.Counter
}

// NewMetrics registers the agent's series with reg (nil: unregistered).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		Writes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "nodeinit_agent_writes_total", Help: "Writes for this node, by kind (status: the report and the addresses; spec: the providerID of a Node no coordinator initializes; attestation) and result.",
		}, []string{"kind", "result"}),
		Syncs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "nodeinit_agent_syncs_total", Help: "Reconciliations of the desired Node, by result (ok, waiting, error).",
		}, []string{"result"}),
		Attestations: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "nodeinit_agent_attestations_total", Help: "Serving-CSR attestations written, by verdict.",
		}, []string{"verdict"}),
		CredReloads: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "nodeinit_agent_credential_reloads_total", Help: "Times the kubelet credentials changed on disk and the client was rebuilt.",
		}),
		FactsDegraded: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "nodeinit_agent_facts_degraded", Help: "1 when facts come from the kernel command line instead of machined.",
		}),
		Ready: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "nodeinit_agent_ready", Help: "1 when the Node matches what the agent wants.",
		}),
		WatchRestarts: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "nodeinit_agent_node_watch_restarts_total", Help: "Times the Node was found by a direct read while its synced watch lacked it, and the watch was restarted.",
		}),
	}
	if reg != nil {
		reg.MustRegister(m.Writes, m.Syncs, m.Attestations, m.CredReloads, m.FactsDegraded, m.Ready, m.WatchRestarts)
	}
	return m
}
