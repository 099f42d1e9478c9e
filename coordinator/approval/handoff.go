package approval

import (
	"slices"
	"strings"
	"time"
)

// Want is what a pending CSR's last decision says about its review: the hand-off from the
// CSR reconciler to the Node's sync, the one writer of nodeinit.io/csr-review.
type Want struct {
	CSR     string
	Created time.Time
	// Review: the decision asks for the attestation or waits, always with the review asked or
	// about to be. Decided from the action, never the category: an attestation the enrolled key
	// did not sign changes no hand-off. First ask or ask again is decided when written.
	Review bool
}

// WantOf is the hand-off a decision makes for its CSR.
func WantOf(csr string, created time.Time, d Decision) Want {
	return Want{CSR: csr, Created: created,
		Review: d.Action == RequestReview || d.Action == Wait}
}

// Handoff names the CSR the Node's csr-review should name now ("" when none), from the wants
// of its pending CSRs and the one it names now (current). The CSR under review keeps it while
// it wants it; only then does the newest other one (by creation, then name, so every sync
// agrees) get its turn, if it wants it and, while current is pending, is newer than it.
func Handoff(current string, wants []Want) string {
	wants = slices.Clone(wants)
	slices.SortFunc(wants, func(a, b Want) int {
		switch {
		case a.CSR == current:
			return -1
		case b.CSR == current:
			return 1
		case !a.Created.Equal(b.Created):
			return b.Created.Compare(a.Created)
		}
		return strings.Compare(b.CSR, a.CSR)
	})
	for i, w := range wants {
		if i > 0 && wants[0].CSR == current && !newer(w, wants[0]) {
			break // the kubelet moved on from it: not back to an older one
		}
		if w.Review {
			return w.CSR
		}
		if w.CSR != current {
			break // only the one under review may hand over to the next
		}
	}
	return ""
}

// newer orders wants as Handoff does: by creation, then by name.
func newer(a, b Want) bool {
	if !a.Created.Equal(b.Created) {
		return a.Created.After(b.Created)
	}
	return a.CSR > b.CSR
}
