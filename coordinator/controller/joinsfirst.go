package controller

import (
	"slices"

	certificatesv1 "k8s.io/api/certificates/v1"
	"k8s.io/client-go/util/workqueue"

	"github.com/talos-nodeinit/talos-nodeinit/pkg/contract"
)

// joinsFirst is the Node queue's order: the Nodes a join waits on first,
// then the rest in FIFO order. On a first install over a running cluster,
// every initialized Node costs one notAdopted record create; a Node that
// registers meanwhile must not wait behind thousands of them.
//
// It is the FIFO under client-go's workqueue (workqueue.Queue), which still
// owns the dirty and processing sets: a key is never synced twice at once,
// and one added while queued is queued once. urgent is asked when a key is
// pushed and again when it is added while still queued (Touch), so a Node
// that starts to need a join is moved ahead.
//
// Urgent keys never starve the rest: after restEvery urgent keys in a row,
// one of the rest goes, whatever waits. Uninitialized Nodes are node-made
// (a bootstrap token mints identities), so without this a few of them
// changing their reports for good would stop every other Node's sync.
type joinsFirst struct {
	urgent      func(key string) bool
	first, rest []queued
	// where is each queued key's live entry; an entry in a list that is
	// not (a key moved ahead by Touch leaves one in rest) is skipped.
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

// liveRest drops the stale entries at the head of rest and says whether a
// live one is left.
func (q *joinsFirst) liveRest() bool {
	for len(q.rest) > 0 && q.where[q.rest[0].key] != q.rest[0] {
		q.rest = q.rest[1:]
	}
	return len(q.rest) > 0
}

// joining says whether a Node's sync is one a join waits on: the Node is
// still uninitialized, or gone (its delete releases addresses another join
// may wait for), or its kubelet has a pending serving CSR its csr-review
// does not name (a certificate asked for after the initialization, a
// kubelet's rotation: only the Node's sync asks for its review). The rest
// (adoption, steady state, a review already asked for) waits behind them.
//
// It runs under the workqueue's lock and takes the informer stores' locks:
// nothing may add to the Node queue while holding either (informer
// handlers run outside the stores' locks).
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
