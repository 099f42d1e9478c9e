package controller

import (
	"sync"
	"time"

	"github.com/talos-nodeinit/talos-nodeinit/coordinator/approval"
	"k8s.io/apimachinery/pkg/types"
)

// reviews is the CSR reconciler's own state about reviews: the typed
// hand-off to the Node sync (for each Node, what its pending serving CSRs'
// last decisions say about their review, approval.WantOf), which the CSR
// sync writes and the Node sync reads (approval.Handoff) instead of
// deciding CSRs itself; and when this replica asked (or first saw asked)
// for each CSR's review, from which the attestation timeout counts.
type reviews struct {
	mu       sync.Mutex
	byNode   map[string]map[string]approval.Want
	nodeOf   map[string]string // CSR name → its requester's Node
	askedFor map[string]asked  // CSR name → when its review was asked, and of which object
	// askAgainFor: the CSR objects whose review is asked again, for their
	// request, after a timeout without an answer.
	askAgainFor map[string]types.UID
}

// asked is when the review of one CSR object was asked: a CSR deleted and
// created again under its name is another object, asked afresh.
type asked struct {
	uid types.UID
	at  time.Time
}

func newReviews() *reviews {
	return &reviews{byNode: map[string]map[string]approval.Want{}, nodeOf: map[string]string{}, askedFor: map[string]asked{}, askAgainFor: map[string]types.UID{}}
}

// asked records that the review of CSR csr, object uid, was asked for at t
// (again, for a stale attestation: the timeout starts over).
func (r *reviews) asked(csr string, uid types.UID, t time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.askedFor[csr] = asked{uid: uid, at: t}
}

// askedAt is when the review of CSR csr, object uid, was asked for (zero:
// not yet, or only that of an earlier object under the name).
func (r *reviews) askedAt(csr string, uid types.UID) time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	if a := r.askedFor[csr]; a.uid == uid {
		return a.at
	}
	return time.Time{}
}

// askAgain records that CSR csr, object uid, is to be asked about again,
// and reports whether that is new. The timeout starts over now: a sync
// that reads the ask again on the Node before the write's own clock
// (patched) starts must not time it out at once.
func (r *reviews) askAgain(csr string, uid types.UID) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.askAgainFor[csr] == uid {
		return false
	}
	r.askAgainFor[csr] = uid
	r.askedFor[csr] = asked{uid: uid, at: time.Now()}
	return true
}

// again says CSR csr, object uid, is to be asked about again.
func (r *reviews) again(csr string, uid types.UID) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.askAgainFor[csr] == uid
}

// gone forgets a deleted CSR and returns its Node's name ("" when none).
func (r *reviews) gone(csr string) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.askedFor, csr)
	return r.dropLocked(csr)
}

// set records w for node's CSR w.CSR and reports whether that changed what
// the Node's sync reads: the CSR's first decision always does (a join
// waiting for its kubelet's CSR goes on, nodestate.Input.Asked).
func (r *reviews) set(node string, w approval.Want) (changed bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if prev, ok := r.nodeOf[w.CSR]; ok && prev != node {
		r.dropLocked(w.CSR)
	}
	m := r.byNode[node]
	if m == nil {
		m = map[string]approval.Want{}
		r.byNode[node] = m
	}
	old, had := m[w.CSR]
	m[w.CSR], r.nodeOf[w.CSR] = w, node
	return !had || old != w
}

// drop forgets a CSR that is decided or gone, and returns its Node ("" when
// it held nothing).
func (r *reviews) drop(csr string) (node string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.dropLocked(csr)
}

func (r *reviews) dropLocked(csr string) string {
	delete(r.askAgainFor, csr)
	node, ok := r.nodeOf[csr]
	if !ok {
		return ""
	}
	delete(r.nodeOf, csr)
	if m := r.byNode[node]; m != nil {
		delete(m, csr)
		if len(m) == 0 {
			delete(r.byNode, node)
		}
	}
	return node
}

// askedSince reports whether node has a pending CSR, created at or after
// since, decided at least once.
func (r *reviews) askedSince(node string, since time.Time) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, w := range r.byNode[node] {
		if !w.Created.Before(since) {
			return true
		}
	}
	return false
}

// wants lists node's pending CSRs' wants.
func (r *reviews) wants(node string) []approval.Want {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]approval.Want, 0, len(r.byNode[node]))
	for _, w := range r.byNode[node] {
		out = append(out, w)
	}
	return out
}
