package controller

import (
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// csrNotes is what the Node reconciler remembers of serving CSRs between syncs, which the API does
// not keep: when it asked each review (the attestation timeout counts from it) and whether again,
// which CSRs it saw decided live (servingChanges), and which it saw deleted unapproved while the
// record names them (servingGone). Notes name objects by UID: a name can be reused.
type csrNotes struct {
	mu         sync.Mutex
	asks       map[string]ask      // CSR name → its review's ask
	live       map[types.UID]bool  // decided in an update this replica saw, not yet looked at
	unissuedBy map[string][]string // node → UIDs of its recorded CSRs deleted never approved
}

type ask struct {
	uid   types.UID
	at    time.Time
	again bool // asked again, for its request, after a timeout
}

func newCSRNotes() *csrNotes {
	return &csrNotes{asks: map[string]ask{}, live: map[types.UID]bool{}, unissuedBy: map[string][]string{}}
}

// asked records that the review of CSR csr, object uid, was asked at t.
func (n *csrNotes) asked(csr string, uid types.UID, t time.Time) {
	n.mu.Lock()
	defer n.mu.Unlock()
	a := n.asks[csr]
	if a.uid != uid {
		a = ask{uid: uid}
	}
	a.at = t
	n.asks[csr] = a
}

// askedAt is when CSR csr's review was asked for object uid (zero: not yet, or only for another).
func (n *csrNotes) askedAt(csr string, uid types.UID) time.Time {
	n.mu.Lock()
	defer n.mu.Unlock()
	if a := n.asks[csr]; a.uid == uid {
		return a.at
	}
	return time.Time{}
}

// askAgain records that CSR csr, object uid, is asked again. The timeout restarts at now the first
// time only: a sync reading the ask before the patch's own clock starts must not time it out.
func (n *csrNotes) askAgain(csr string, uid types.UID, now time.Time) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if a := n.asks[csr]; a.uid != uid || !a.again {
		n.asks[csr] = ask{uid: uid, at: now, again: true}
	}
}

// again says CSR csr, object uid, is asked about again.
func (n *csrNotes) again(csr string, uid types.UID) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	a := n.asks[csr]
	return a.uid == uid && a.again
}

// decided notes a CSR seen decided in an update (by anyone).
func (n *csrNotes) decided(uid types.UID) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.live[uid] = true
}

// decidedLive says the CSR was seen decided and not looked at since.
func (n *csrNotes) decidedLive(uid types.UID) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.live[uid]
}

// looked forgets the live decision: only the first look after it knows the CSR is the newest.
func (n *csrNotes) looked(uid types.UID) {
	n.mu.Lock()
	defer n.mu.Unlock()
	delete(n.live, uid)
}

// unissue notes that node's CSR object uid went without an approval.
func (n *csrNotes) unissue(node, uid string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.unissuedBy[node] = append(n.unissuedBy[node], uid)
}

// unissued lists node's CSRs gone without an approval, not yet cleared.
func (n *csrNotes) unissued(node string) []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return append([]string(nil), n.unissuedBy[node]...)
}

func (n *csrNotes) forgetUnissued(node, uid string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	left := n.unissuedBy[node][:0]
	for _, u := range n.unissuedBy[node] {
		if u != uid {
			left = append(left, u)
		}
	}
	if len(left) == 0 {
		delete(n.unissuedBy, node)
	} else {
		n.unissuedBy[node] = left
	}
}

// gone forgets a deleted CSR.
func (n *csrNotes) gone(csr string, uid types.UID) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.asks[csr].uid == uid {
		delete(n.asks, csr)
	}
	delete(n.live, uid)
}
