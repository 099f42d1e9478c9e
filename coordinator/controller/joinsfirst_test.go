package controller_test

import (
	"fmt"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/talos-nodeinit/talos-nodeinit/coordinator/controller"
	"github.com/talos-nodeinit/talos-nodeinit/pkg/harness/testcluster"
)

// A join is never queued behind a backlog of Nodes that are already
// initialized. On a first install over a running cluster, every initialized
// Node costs one notAdopted record create; a Node that registers meanwhile
// is synced before the rest of that backlog, not after it.
func TestJoinsAreSyncedBeforeTheBacklog(t *testing.T) {
	const backlog = 400
	names := make([]string, backlog)
	for i := range names {
		names[i] = fmt.Sprintf("backlog-%03d", i)
	}
	t.Cleanup(func() {
		for _, name := range names {
			_ = admin().CoreV1().Nodes().Delete(t.Context(), name, metav1.DeleteOptions{})
		}
	})
	var wg sync.WaitGroup
	errs := make(chan error, backlog)
	for w := range 8 {
		wg.Go(func() {
			for i := w; i < backlog; i += 8 {
				ip := fmt.Sprintf("10.9.%d.%d", i/200, i%200+1)
				_, err := admin().CoreV1().Nodes().Create(t.Context(), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: names[i]},
					Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: ip}}}}, metav1.CreateOptions{})
				if err != nil {
					errs <- err
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}

	// One worker, so the order the queue hands out is the order of the writes.
	// At the coordinator's default client rate limit, not client-go's 5 QPS.
	cfg := coordinatorIdentity(t)
	cfg.QPS, cfg.Burst = 500, 1000
	startCoordinatorAs(t, "joinsfirst", ipamSettings, cfg, func(c *controller.Config) { c.NodeWorkers = 1 })
	waitFor(t, 15*time.Second, "the backlog's first record", func() bool { return len(recordCreates(t, "backlog-")) > 0 })

	join := register(t, "joiner", "10.0.31.1")
	join.publish(t, report{providerID: "talos://metal/10.0.31.1"})
	waitFor(t, 20*time.Second, "the join initialized", func() bool { return initialized(get(t, join.name)) })
	var initAt time.Time
	for _, e := range coordinatorWrites(t, "nodes", join.name) {
		if e.Verb == "patch" && e.ResponseStatus.Code < 300 {
			initAt = e.StageTimestamp
			break
		}
	}
	if initAt.IsZero() {
		t.Fatal("no initializing patch of the join in the audit log")
	}
	waitFor(t, 60*time.Second, "the whole backlog's records", func() bool { return len(recordCreates(t, "backlog-")) == backlog })
	after := 0
	for _, e := range recordCreates(t, "backlog-") {
		if e.StageTimestamp.After(initAt) {
			after++
		}
	}
	// With a FIFO the join waits for every record queued before it: none
	// is created after its initialization.
	if after < backlog/2 {
		t.Errorf("the join was initialized after %d of the %d backlog records; want it before most of them", backlog-after, backlog)
	}
}

// recordCreates are the coordinator's successful NodeRecord creates for
// Nodes named with prefix.
func recordCreates(t testing.TB, prefix string) []testcluster.AuditEvent {
	t.Helper()
	events, err := cluster.Audit()
	if err != nil {
		t.Fatal(err)
	}
	var out []testcluster.AuditEvent
	for _, e := range events {
		if e.User.Username == coordinatorUser && e.ObjectRef.Resource == "noderecords" && e.Verb == "create" && e.ResponseStatus.Code < 300 &&
			len(e.ObjectRef.Name) >= len(prefix) && e.ObjectRef.Name[:len(prefix)] == prefix {
			out = append(out, e)
		}
	}
	return out
}
