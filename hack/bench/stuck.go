package main

import (
	"fmt"
	"slices"
	"strings"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
)

// refusedTimes is how many of a node's serving CSRs must be denied before
// the bench stops waiting for it: a kubelet stand-in that asked before its
// agent published its addresses may be refused once, then certified.
const refusedTimes = 3

// refusedForGood names the first of waiting (node names, in order) whose
// kubelet had at least refusedTimes serving CSRs denied, with the latest
// denial's message: such a run never converges, and waiting out its
// timeout only hides why.
func refusedForGood(csrs []certificatesv1.CertificateSigningRequest, waiting []string) (node, reason string, ok bool) {
	type denials struct {
		n    int
		at   time.Time
		last string
	}
	by := map[string]*denials{}
	for i := range csrs {
		csr := &csrs[i]
		name, isNode := strings.CutPrefix(csr.Spec.Username, "system:node:")
		if !isNode || csr.Spec.SignerName != certificatesv1.KubeletServingSignerName {
			continue
		}
		for _, c := range csr.Status.Conditions {
			if c.Type != certificatesv1.CertificateDenied {
				continue
			}
			d := by[name]
			if d == nil {
				d = &denials{}
				by[name] = d
			}
			d.n++
			if t := c.LastUpdateTime.Time; d.last == "" || !t.Before(d.at) {
				d.at, d.last = t, c.Message
			}
		}
	}
	for _, n := range slices.Sorted(slices.Values(waiting)) {
		if d := by[n]; d != nil && d.n >= refusedTimes {
			return n, fmt.Sprintf("%d serving CSRs denied, the latest: %s", d.n, d.last), true
		}
	}
	return "", "", false
}
