package controller_test

import (
	"fmt"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/talos-nodeinit/talos-nodeinit/coordinator/controller"
	"github.com/talos-nodeinit/talos-nodeinit/pkg/csrcheck/csrtest"
)

// The Node and CSR queues publish the workqueue_* series Kubernetes
// controllers do, labelled by queue: after a join (the Node queue) and a
// CSR of a requester that is no node (the CSR queue), each queue has taken
// keys, timed their wait and their syncs, and holds none.
func TestQueuesPublishWorkqueueMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	startCoordinatorAs(t, "queue-metrics", ipamSettings, coordinatorIdentity(t), func(c *controller.Config) { c.Metrics = controller.NewMetrics(reg) })
	certifiedJoin(t, "queue-metrics-a", "10.0.7.9", 15*time.Second)
	if _, err := admin().CertificatesV1().CertificateSigningRequests().Create(t.Context(), &certificatesv1.CertificateSigningRequest{
		ObjectMeta: metav1.ObjectMeta{Name: "queue-metrics-stranger"},
		Spec: certificatesv1.CertificateSigningRequestSpec{Request: csrtest.PEM(t, nil, "queue-metrics-stranger", []string{"queue-metrics-stranger"}),
			SignerName: certificatesv1.KubeletServingSignerName, Usages: []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageServerAuth}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "the stranger's CSR denied", func() bool {
		c, _ := condition(t, "queue-metrics-stranger")
		return c.Type == certificatesv1.CertificateDenied
	})
	series := func(family, queue string) float64 { return queueSeries(t, reg, family, queue) }
	for _, q := range []string{"nodes", "csrs"} {
		for _, f := range []string{"workqueue_adds_total", "workqueue_queue_duration_seconds", "workqueue_work_duration_seconds"} {
			// A sync's duration is observed once it returns, after its write.
			waitFor(t, 10*time.Second, fmt.Sprintf("%s{name=%q} at least 1", f, q), func() bool { return series(f, q) >= 1 })
		}
	}
	waitFor(t, 10*time.Second, "the queues drained", func() bool {
		return series("workqueue_depth", "nodes") == 0 && series("workqueue_depth", "csrs") == 0
	})
	// A CSR's attestation timeout is a delayed add of its Node.
	if v := series("workqueue_retries_total", "nodes"); v < 1 {
		t.Errorf("workqueue_retries_total{name=\"nodes\"} = %v, want at least 1 after a join", v)
	}
}

// A standby queues nothing: its informers follow every change, but its
// queues stay empty until it leads (lead queues every Node and pending CSR
// then), so its workqueue_* series do not pile up the cluster's Nodes and
// a takeover's first syncs are not timed from the standby's first sight.
func TestStandbyQueuesNothing(t *testing.T) {
	leaderReg, standbyReg := prometheus.NewRegistry(), prometheus.NewRegistry()
	leader := startCoordinatorAs(t, "queue-leader", ipamSettings, coordinatorIdentity(t), func(c *controller.Config) { c.Metrics = controller.NewMetrics(leaderReg) })
	waitFor(t, 15*time.Second, "leading", func() bool { return gauge(t, leaderReg, "nodeinit_coordinator_leader") == 1 })
	standby := startCoordinatorAs(t, "queue-standby", ipamSettings, coordinatorIdentity(t), func(c *controller.Config) { c.Metrics = controller.NewMetrics(standbyReg) })
	waitFor(t, 15*time.Second, "the standby synced", func() bool { return standby.Ready() == nil })
	n := register(t, "queue-standby-a", "10.0.7.10")
	n.publish(t, report{providerID: "talos://metal/10.0.7.10"})
	waitFor(t, 15*time.Second, "initialized", func() bool { return initialized(get(t, n.name)) })
	for _, q := range []string{"nodes", "csrs"} {
		if v := queueSeries(t, standbyReg, "workqueue_adds_total", q); v != 0 {
			t.Errorf("the standby queued %v keys on its %s queue", v, q)
		}
	}
	if v := queueSeries(t, leaderReg, "workqueue_adds_total", "nodes"); v < 1 {
		t.Errorf("the leader queued %v Nodes", v)
	}
	leader.stop()
	waitFor(t, 20*time.Second, "the standby leads and syncs the Nodes", func() bool {
		return gauge(t, standbyReg, "nodeinit_coordinator_leader") == 1 && queueSeries(t, standbyReg, "workqueue_work_duration_seconds", "nodes") >= 1
	})
}

// queueSeries is the value (or sample count) of family{name=queue} in reg.
func queueSeries(t *testing.T, reg *prometheus.Registry, family, queue string) float64 {
	t.Helper()
	for _, m := range metricsOf(t, reg, family) {
		for _, l := range m.GetLabel() {
			if l.GetName() == "name" && l.GetValue() == queue {
				switch {
				case m.Histogram != nil:
					return float64(m.Histogram.GetSampleCount())
				case m.Counter != nil:
					return m.Counter.GetValue()
				case m.Gauge != nil:
					return m.Gauge.GetValue()
				}
			}
		}
	}
	t.Fatalf("no %s{name=%q} among the coordinator's metrics", family, queue)
	return 0
}

// gauge is the value of the unlabelled gauge family in reg.
func gauge(t *testing.T, reg *prometheus.Registry, family string) float64 {
	t.Helper()
	for _, m := range metricsOf(t, reg, family) {
		return m.GetGauge().GetValue()
	}
	t.Fatalf("no %s among the coordinator's metrics", family)
	return 0
}

func metricsOf(t *testing.T, reg *prometheus.Registry, family string) []*dto.Metric {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() == family {
			return f.GetMetric()
		}
	}
	return nil
}
