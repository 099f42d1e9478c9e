package controller

import (
	"testing"
	"time"

	"github.com/talos-nodeinit/talos-nodeinit/coordinator/approval"
)

// Only a CSR made since the Node's creation is its kubelet's asking: a
// pending CSR of an earlier Node object under the name does not end the
// join's wait (csr.initWait), whatever its decision wants.
func TestAskedSinceTheNodesCreation(t *testing.T) {
	created := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	r := newReviews()
	r.set("n1", approval.Want{CSR: "old", Created: created.Add(-time.Minute), Review: true})
	r.set("n2", approval.Want{CSR: "other", Created: created.Add(time.Second)})
	if r.askedSince("n1", created) {
		t.Error("a CSR of an earlier Node object ended the wait")
	}
	r.set("n1", approval.Want{CSR: "same-second", Created: created})
	if !r.askedSince("n1", created) {
		t.Error("a CSR made in the Node's creation second (timestamps are whole seconds) did not end the wait")
	}
	if r.drop("same-second"); r.askedSince("n1", created) {
		t.Error("a dropped CSR still ends the wait")
	}
	if !r.askedSince("n2", created) {
		t.Error("n2's CSR, made after its creation, did not end its wait")
	}
}
