package controller

import (
	"slices"

	certificatesv1 "k8s.io/api/certificates/v1"
	"k8s.io/client-go/util/workqueue"

	"github.com/talos-nodeinit/talos-nodeinit/pkg/contract"
)

// joinsFirst is the Node queue's order: the Nodes a join waits on first, then the rest in FIFO
// order, so a Node registering during a first install does not wait behind thousands of adoptions.
//
// client-go's workqueue still owns the dirty and processing sets: no key is synced twice at once or
// queued twice. urgent is asked on Push and again on Touch, so a Node that starts to need a join
// moves ahead. After restEvery urgent keys in a row one of the rest goes: uninitialized Nodes are
// node-made (a bootstrap token mints identities), and a few changing their reports for good must
// not stop every other Node's sync.
type joinsFirst struct {
	urgent      func(key string) bool
	first, rest []queued
	// where is each queued key's live entry; other entries (Touch leaves one in rest) are skipped.
	where  map[string]queued
	seq    uint64
	streak int // urgent keys handed out in a row
}

// queued is one entry: its key, its list, and when it was queued.
type queued struct {
	key   string
	first bool
	seq   uint64
}

// restEvery is how many urgent keys may go in a row while others wait.
const restEvery = 8

func newJoinsFirst(urgent func(string) bool) *joinsFirst {
	return &joinsFirst{urgent: urgent, where: map[string]queued{}}
}

// newNodeQueue is the rate-limited Node workqueue over joinsFirst.
func newNodeQueue(name string, urgent func(string) bool, m workqueue.MetricsProvider) workqueue.TypedRateLimitingInterface[string] {
	q := workqueue.NewTypedWithConfig(workqueue.TypedQueueConfig[string]{Name: name, Queue: newJoinsFirst(urgent), MetricsProvider: m})
	return workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
		workqueue.TypedRateLimitingQueueConfig[string]{Name: name, MetricsProvider: m,
			DelayingQueue: workqueue.NewTypedDelayingQueueWithConfig(workqueue.TypedDelayingQueueConfig[string]{Name: name, Queue: q, MetricsProvider: m})})
}

func (q *joinsFirst) add(key string, first bool) {
	q.seq++
	e := queued{key: key, first: first, seq: q.seq}
	q.where[key] = e
	if first {
		q.first = append(q.first, e)
	} else {
		q.rest = append(q.rest, e)
	}
}

func (q *joinsFirst) Push(key string) { q.add(key, q.urgent(key)) }

func (q *joinsFirst) Touch(key string) {
	if e, queued := q.where[key]; queued && !e.first && q.urgent(key) {
		q.add(key, true)
	}
}

func (q *joinsFirst) Len() int { return len(q.where) }

// Pop is called only when Len is above 0, so a live entry exists.
func (q *joinsFirst) Pop() string {
	for {
		var e queued
		if q.liveRest() && (len(q.first) == 0 || q.streak >= restEvery) {
			e, q.rest = q.rest[0], q.rest[1:]
			q.streak = 0
		} else {
			e, q.first = q.first[0], q.first[1:]
		}
		if q.where[e.key] != e {
			continue // stale: moved ahead, or handed out and queued again since
		}
		if e.first {
			q.streak++
		}
		delete(q.where, e.key)
		return e.key
	}
}

// liveRest drops the stale entries at the head of rest and says whether a live one is left.
func (q *joinsFirst) liveRest() bool {
	for len(q.rest) > 0 && q.where[q.rest[0].key] != q.rest[0] {
		q.rest = q.rest[1:]
	}
	return len(q.rest) > 0
}

// joining says whether a Node's sync is one a join waits on: the Node is uninitialized or gone (its
// delete frees addresses), or its kubelet has a pending serving CSR its csr-review does not name
// (only the Node's sync asks for its review). Steady state waits behind them.
//
// It runs under the workqueue's lock and takes the stores' locks: nothing may add to the Node queue
// while holding a store's lock (informer handlers run outside them).
func (c *Coordinator) joining(name string) bool {
	node, err := c.nodes.Get(name)
	if err != nil || contract.Uninitialized(node) {
		return true
	}
	current, _ := contract.ParseReview(node.Annotations[contract.AnnotationCSRReview])
	objs, _ := c.csrIndex.ByIndex(byNode, name)
	return slices.ContainsFunc(objs, func(o any) bool {
		csr, ok := o.(*certificatesv1.CertificateSigningRequest)
		return ok && pending(csr) && csr.Name != current.CSR && !csr.CreationTimestamp.Before(&node.CreationTimestamp)
	})
}
