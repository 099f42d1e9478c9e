package controller_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/talos-nodeinit/talos-nodeinit/coordinator/controller"
	"github.com/talos-nodeinit/talos-nodeinit/pkg/contract"
	"github.com/talos-nodeinit/talos-nodeinit/pkg/harness/testcluster"
)

// A join is never queued behind a backlog of Nodes that are already
// initialized. On a first install over a running cluster, every initialized
// Node costs one notAdopted record create; a Node that registers meanwhile
// is synced before the rest of that backlog, not after it.
func TestJoinsAreSyncedBeforeTheBacklog(t *testing.T) {
	const backlog = 400
	createBacklog(t, "backlog-", 9, backlog)

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
	after := recordsAfter(t, "backlog-", backlog, initAt)
	// With a FIFO the join waits for every record queued before it: none
	// is created after its initialization.
	if after < backlog/2 {
		t.Errorf("the join was initialized after %d of the %d backlog records; want it before most of them", backlog-after, backlog)
	}
}

// createBacklog creates n initialized Nodes without records, named
// prefix%03d with addresses in 10.net.0.0/16, as an admin (deleted when the
// test ends): each costs the coordinator one notAdopted record create.
func createBacklog(t *testing.T, prefix string, net, n int) {
	t.Helper()
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("%s%03d", prefix, i)
	}
	t.Cleanup(func() {
		for _, name := range names {
			_ = admin().CoreV1().Nodes().Delete(context.Background(), name, metav1.DeleteOptions{})
		}
	})
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for w := range 8 {
		wg.Go(func() {
			for i := w; i < n; i += 8 {
				ip := fmt.Sprintf("10.%d.%d.%d", net, i/200, i%200+1)
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
}

// A serving CSR asked for after its Node was initialized (a kubelet's
// rotation) waits for the review request only its Node's sync writes; that
// sync is not queued behind a backlog of notAdopted records either.
func TestLateCSRReviewIsNotBehindTheBacklog(t *testing.T) {
	// One worker, and a client rate that makes each record create take
	// 20 ms: the backlog outlasts the test's own steps.
	cfg := coordinatorIdentity(t)
	cfg.QPS, cfg.Burst = 50, 1
	startCoordinatorAs(t, "latereview", ipamSettings, cfg, func(c *controller.Config) { c.NodeWorkers = 1 })
	n := register(t, "latereview", "10.0.32.1")
	n.publish(t, report{providerID: "talos://metal/10.0.32.1"})
	waitFor(t, 20*time.Second, "initialized", func() bool { return initialized(get(t, n.name)) })

	const backlog = 300
	createBacklog(t, "backlog2-", 10, backlog)
	waitFor(t, 15*time.Second, "the backlog's first record", func() bool { return len(recordCreates(t, "backlog2-")) > 0 })
	n.csr(t, "latereview-serving", []string{n.name}, []string{"10.0.32.1"})
	waitFor(t, 30*time.Second, "the review request", func() bool {
		return get(t, n.name).Annotations[contract.AnnotationCSRReview] == "latereview-serving"
	})
	var askedAt time.Time
	for _, e := range coordinatorWrites(t, "nodes", n.name) {
		if e.Verb == "patch" && e.ResponseStatus.Code < 300 {
			askedAt = e.StageTimestamp // the last one: the review request
		}
	}
	after := recordsAfter(t, "backlog2-", backlog, askedAt)
	if after < backlog/2 {
		t.Errorf("the review was asked for after %d of the %d backlog records; want before most of them", backlog-after, backlog)
	}
}

// recordsAfter waits for the n backlog records named with prefix and
// counts those created after at, the coordinator's write for the Node
// under test (zero: it is not in the audit log).
func recordsAfter(t *testing.T, prefix string, n int, at time.Time) int {
	t.Helper()
	if at.IsZero() {
		t.Fatal("the coordinator's write for the Node under test is not in the audit log")
	}
	waitFor(t, 60*time.Second, "the whole backlog's records", func() bool { return len(recordCreates(t, prefix)) == n })
	after := 0
	for _, e := range recordCreates(t, prefix) {
		if e.StageTimestamp.After(at) {
			after++
		}
	}
	return after
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
