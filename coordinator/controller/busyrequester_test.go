package controller_test

import (
	"fmt"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"

	"github.com/talos-nodeinit/talos-nodeinit/coordinator/controller"
)

// A node whose requests are being decided holds up no other node's: while
// one decision of a node's is under way (held here, as a slow one would
// be), that node's other CSRs wait in the queue, not in the CSR workers.
// Root on a node can file requests in a loop; had each waited in a worker
// for the node's lock, 16 of them would have held every worker, and no
// other node's CSR would have been decided until that decision ended.
func TestABusyRequesterHoldsUpNoOtherNode(t *testing.T) {
	c := startCoordinator(t, "busy-requester", ipamSettings)
	busy := register(t, "busy-requester-a", "10.0.65.1")
	other := register(t, "busy-requester-b", "10.0.65.2")
	for _, n := range []*simNode{busy, other} {
		n.publish(t, report{providerID: "talos://metal/" + n.ip.String()})
	}
	waitFor(t, 15*time.Second, "both nodes initialized", func() bool {
		return initialized(get(t, busy.name)) && initialized(get(t, other.name))
	})
	time.Sleep(time.Second) // csr.minAddressAge

	unlock := controller.HoldRequester(c.Coordinator, busy.name)
	released := false
	defer func() {
		if !released {
			unlock()
		}
	}()
	const requests = 40 // more than the 16 CSR workers
	for i := range requests {
		busy.csr(t, fmt.Sprintf("%s-%02d", busy.name, i), []string{busy.name}, []string{busy.ip.String()})
	}
	time.Sleep(500 * time.Millisecond) // the coordinator has them queued
	other.csr(t, other.name+"-serving", []string{other.name}, []string{other.ip.String()})
	other.approveOnNode(t, other.name+"-serving")
	waitFor(t, 15*time.Second, "the other node's CSR approved while the busy node's decision is under way", func() bool {
		c, _ := condition(t, other.name+"-serving")
		return c.Type == certificatesv1.CertificateApproved
	})
	for i := range requests {
		if c, _ := condition(t, fmt.Sprintf("%s-%02d", busy.name, i)); c.Type != "" {
			t.Fatalf("%s-%02d decided (%s) while its node's lock was held", busy.name, i, c.Type)
		}
	}

	// Once the decision ends, the busy node's requests are decided again.
	unlock()
	released = true
	first := busy.name + "-00"
	busy.approveOnNode(t, first)
	waitFor(t, 15*time.Second, "the busy node's attested request approved once its lock is free", func() bool {
		c, _ := condition(t, first)
		return c.Type == certificatesv1.CertificateApproved
	})
}
