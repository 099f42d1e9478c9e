package controller_test

import (
	"fmt"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
)

// A node filing requests in a loop holds up no other node's: its CSRs are
// decided in its own Node's sync, one worker at a time, however many
// there are (root on a node can file them), while the other workers
// decide the other nodes'.
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
	c.settled()

	const requests = 80 // more than the Node workers
	for i := range requests {
		busy.csr(t, fmt.Sprintf("%s-%02d", busy.name, i), []string{busy.name}, []string{busy.ip.String()})
	}
	other.csr(t, other.name+"-serving", []string{other.name}, []string{other.ip.String()})
	other.approveOnNode(t, other.name+"-serving")
	waitFor(t, 15*time.Second, "the other node's CSR approved while the busy node files requests", func() bool {
		c, _ := condition(t, other.name+"-serving")
		return c.Type == certificatesv1.CertificateApproved
	})

	// The busy node's own requests are decided as usual.
	first := busy.name + "-00"
	busy.approveOnNode(t, first)
	waitFor(t, 15*time.Second, "the busy node's attested request approved once its lock is free", func() bool {
		c, _ := condition(t, first)
		return c.Type == certificatesv1.CertificateApproved
	})
}
