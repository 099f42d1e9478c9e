package controller_test

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	certificatesv1 "k8s.io/api/certificates/v1"

	"github.com/talos-nodeinit/talos-nodeinit/coordinator/controller"
)

// The Node and CSR queues publish the workqueue_* series Kubernetes
// controllers do, labelled by queue: after a join, each queue has taken
// keys, timed their wait and their syncs, and holds none.
func TestQueuesPublishWorkqueueMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	startCoordinatorAs(t, "queue-metrics", ipamSettings, coordinatorIdentity(t), func(c *controller.Config) { c.Metrics = controller.NewMetrics(reg) })
	n := register(t, "queue-metrics-a", "10.0.7.9")
	n.csr(t, "queue-metrics-a-serving", []string{"queue-metrics-a"}, []string{"10.0.7.9"})
	n.publish(t, report{providerID: "talos://metal/10.0.7.9"})
	n.attest(t, "queue-metrics-a-serving", "")
	waitFor(t, 15*time.Second, "approved", func() bool {
		c, _ := condition(t, "queue-metrics-a-serving")
		return c.Type == certificatesv1.CertificateApproved
	})
	// series is the value (or sample count) of family{name=queue}.
	series := func(family, queue string) float64 {
		families, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range families {
			if f.GetName() != family {
				continue
			}
			for _, m := range f.GetMetric() {
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
		}
		t.Fatalf("no %s{name=%q} among the coordinator's metrics", family, queue)
		return 0
	}
	for _, q := range []string{"nodes", "csrs"} {
		for _, f := range []string{"workqueue_adds_total", "workqueue_queue_duration_seconds", "workqueue_work_duration_seconds"} {
			if v := series(f, q); v < 1 {
				t.Errorf("%s{name=%q} = %v, want at least 1 after a join", f, q, v)
			}
		}
	}
	waitFor(t, 10*time.Second, "the queues drained", func() bool {
		return series("workqueue_depth", "nodes") == 0 && series("workqueue_depth", "csrs") == 0
	})
	series("workqueue_retries_total", "csrs") // rechecks are delayed adds: the series exists
}
