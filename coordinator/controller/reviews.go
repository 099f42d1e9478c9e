package controller

import (
	"sync"

	"github.com/talos-nodeinit/talos-nodeinit/coordinator/approval"
)

// reviewWants holds the typed hand-off from the CSR reconciler to the Node
// sync: for each Node, what its pending serving CSRs' last decisions say
// about their review (approval.WantOf). The CSR sync writes it; the Node
// sync reads it (approval.Handoff) instead of deciding CSRs itself.
type reviewWants struct {
	mu     sync.Mutex
	byNode map[string]map[string]approval.Want
	nodeOf map[string]string // CSR name → its requester's Node
}

func newReviewWants() *reviewWants {
	return &reviewWants{byNode: map[string]map[string]approval.Want{}, nodeOf: map[string]string{}}
}

// set records w for node's CSR w.CSR and reports whether that changed what
// the Node's sync reads.
func (r *reviewWants) set(node string, w approval.Want) (changed bool) {
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
	return !had && w.Review || had && old != w
}

// drop forgets a CSR that is decided or gone, and returns its Node ("" when
// it held nothing).
func (r *reviewWants) drop(csr string) (node string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.dropLocked(csr)
}

func (r *reviewWants) dropLocked(csr string) string {
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

// wants lists node's pending CSRs' wants.
func (r *reviewWants) wants(node string) []approval.Want {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]approval.Want, 0, len(r.byNode[node]))
	for _, w := range r.byNode[node] {
		out = append(out, w)
	}
	return out
}
