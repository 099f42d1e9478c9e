package approval

import (
	"crypto/ed25519"
	"errors"
	"fmt"

	"github.com/talos-nodeinit/talos-nodeinit/pkg/contract"
)

// EventApproves says whether an attestation an Event carries may stand for
// the node's agent's approval of the CSR csr (its exact request bytes and
// its SANs, contract.RequestSANs), requested by node whose agent key is
// enrolled. Anyone can create an Event, so it may only when it is an
// approval of exactly this request, signed by that key for that node; nil
// means it may, an error says why not. Nothing an Event carries can deny a
// CSR or stand for another.
func EventApproves(a contract.Attestation, csr string, request []byte, node string, enrolled ed25519.PublicKey, sans []string) error {
	switch {
	case a.Verdict != contract.VerdictApprove:
		return fmt.Errorf("verdict %q: an Event only carries approvals", a.Verdict)
	case !a.About(csr, request):
		return errors.New("not about this CSR's request")
	case enrolled == nil:
		return errors.New("no agent key is enrolled for the node")
	}
	return a.Verify(node, enrolled, sans)
}

// OwnVerdict says the Node's attestation is its agent's own verdict on
// exactly this request, signed with the enrolled key: it then stands over
// any Event, so an approval anyone copied into an Event never outweighs a
// rejection the agent wrote on its Node.
func OwnVerdict(onNode *contract.Attestation, csr string, request []byte, node string, enrolled ed25519.PublicKey, sans []string) bool {
	return onNode != nil && enrolled != nil && onNode.About(csr, request) && onNode.Verify(node, enrolled, sans) == nil
}
