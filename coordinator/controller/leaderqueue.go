package controller

import (
	"sync/atomic"
	"time"

	"k8s.io/client-go/util/workqueue"
)

// leaderQueue takes keys only while this replica leads (lead queues every Node and pending CSR as
// it starts), so a standby's workqueue_* series do not hold the cluster's Nodes for days and a
// takeover's first syncs are not timed from the standby's first sight of them.
type leaderQueue struct {
	workqueue.TypedRateLimitingInterface[string]
	open *atomic.Bool
}

func (q leaderQueue) Add(key string) {
	if q.open.Load() {
		q.TypedRateLimitingInterface.Add(key)
	}
}

func (q leaderQueue) AddAfter(key string, d time.Duration) {
	if q.open.Load() {
		q.TypedRateLimitingInterface.AddAfter(key, d)
	}
}
