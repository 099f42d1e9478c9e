package controller

import (
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
type joinsFirst struct {
	urgent func(key string) bool
	first  []string
	rest   []string
	// where says which list holds a key's live entry; a key moved from
	// rest to first leaves a stale entry in rest, skipped when popped.
	where map[string]bool // true: first, false: rest
}

func newJoinsFirst(urgent func(string) bool) *joinsFirst {
	return &joinsFirst{urgent: urgent, where: map[string]bool{}}
}

// newNodeQueue is the rate-limited Node workqueue over joinsFirst.
func newNodeQueue(name string, urgent func(string) bool) workqueue.TypedRateLimitingInterface[string] {
	q := workqueue.NewTypedWithConfig(workqueue.TypedQueueConfig[string]{Name: name, Queue: newJoinsFirst(urgent)})
	return workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
		workqueue.TypedRateLimitingQueueConfig[string]{Name: name,
			DelayingQueue: workqueue.NewTypedDelayingQueueWithConfig(workqueue.TypedDelayingQueueConfig[string]{Name: name, Queue: q})})
}

func (q *joinsFirst) Push(key string) {
	if q.urgent(key) {
		q.first = append(q.first, key)
		q.where[key] = true
		return
	}
	q.rest = append(q.rest, key)
	q.where[key] = false
}

func (q *joinsFirst) Touch(key string) {
	if first, queued := q.where[key]; queued && !first && q.urgent(key) {
		q.first = append(q.first, key)
		q.where[key] = true
	}
}

func (q *joinsFirst) Len() int { return len(q.where) }

// Pop is called only when Len is above 0, so a live entry exists.
func (q *joinsFirst) Pop() string {
	for {
		var key string
		var fromFirst bool
		if len(q.first) > 0 {
			key, q.first, fromFirst = q.first[0], q.first[1:], true
		} else {
			key, q.rest = q.rest[0], q.rest[1:]
		}
		if first, live := q.where[key]; live && first == fromFirst {
			delete(q.where, key)
			return key
		}
	}
}

// joining says whether a Node's sync is one a join waits on: the Node is
// still uninitialized, or gone (its delete releases addresses another join
// may wait for). The rest (Nodes already initialized: adoption, steady
// state) waits behind them.
func (c *Coordinator) joining(name string) bool {
	node, err := c.nodes.Get(name)
	return err != nil || contract.Uninitialized(node)
}
