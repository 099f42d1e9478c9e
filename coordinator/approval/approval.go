// Package approval is the coordinator's decision on one kubelet serving CSR,
// as a pure function: static checks (pkg/csrcheck), then the node agent's
// attestation bound to this exact request, with a timeout policy for nodes
// that never attest.
package approval

import (
	"fmt"
	"time"

	"github.com/talos-nodeinit/talos-nodeinit/coordinator/config"
	"github.com/talos-nodeinit/talos-nodeinit/pkg/contract"
	"github.com/talos-nodeinit/talos-nodeinit/pkg/csrcheck"
)

// Action is what the controller does next.
type Action string

const (
	Approve Action = "Approve"
	Deny    Action = "Deny"
	// Retry requeues with backoff: facts are missing (Node not cached yet).
	Retry Action = "Retry"
	// RequestReview writes nodeinit.io/csr-review: <csr> on the Node.
	RequestReview Action = "RequestReview"
	// Wait requeues after Decision.After (the attestation may still come).
	Wait Action = "Wait"
	// TimedOut leaves the CSR pending and says so with an Event.
	TimedOut Action = "TimedOut"
)

// Input is everything the decision depends on.
type Input struct {
	CSR     csrcheck.Request
	Created time.Time
	// Node is nil when the requesting Node is not in the cache.
	Node   *csrcheck.Node
	Owners csrcheck.AddressOwners
	Policy csrcheck.Policy

	AttestationRequired bool
	Timeout             time.Duration
	OnTimeout           config.TimeoutAction

	// Review is the Node's nodeinit.io/csr-review; ReviewBusy says it names
	// another CSR of this node that is still pending.
	Review     string
	ReviewBusy bool
	// Attestation is the Node's nodeinit.io/csr-attestation, nil if absent or unreadable.
	Attestation *contract.Attestation
	Now         time.Time
}

// Decision is the action with its reason (for the condition and the Event)
// and a short machine-readable category (for metrics).
type Decision struct {
	Action   Action
	Reason   string
	Category string
	After    time.Duration
}

// Decide returns what to do with the CSR now.
func Decide(in Input) Decision {
	v := csrcheck.Check(in.CSR, in.Node, in.Owners, in.Policy)
	switch v.Decision {
	case csrcheck.Deny:
		cat := "check"
		if len(v.Failures) > 0 {
			cat = "check:" + v.Failures[0].Check
		}
		return Decision{Action: Deny, Reason: v.Reason(), Category: cat}
	case csrcheck.Retry:
		return Decision{Action: Retry, Reason: v.Reason(), Category: "node-unknown"}
	}
	if !in.AttestationRequired {
		return Decision{Action: Approve, Reason: "static checks passed; attestation not required by policy", Category: "static"}
	}
	if a := in.Attestation; a != nil && a.CSR == in.CSR.Name {
		switch {
		case !a.About(in.CSR.Name, in.CSR.PEM):
			return Decision{Action: Deny, Category: "attestation-mismatch",
				Reason: fmt.Sprintf("the node's attestation of %s is for another request (sha256 %s, this request is %s)", a.CSR, a.RequestSHA256, contract.RequestDigest(in.CSR.PEM))}
		case a.Approves(in.CSR.Name, in.CSR.PEM):
			return Decision{Action: Approve, Reason: "static checks passed and the node attested every SAN: " + a.Reason, Category: "attested"}
		default:
			return Decision{Action: Deny, Reason: "the node's agent rejected it: " + a.Reason, Category: "agent-rejected"}
		}
	}
	elapsed := in.Now.Sub(in.Created)
	if elapsed >= in.Timeout {
		if in.OnTimeout == config.ApproveOnChecks {
			return Decision{Action: Approve, Category: "timeout-approved",
				Reason: fmt.Sprintf("no attestation within %v; approved on the static checks alone, as the policy says", in.Timeout)}
		}
		return Decision{Action: TimedOut, Category: "timeout-pending",
			Reason: fmt.Sprintf("no attestation from the node's agent within %v; left pending (is nodeinit-agent running on %s?)", in.Timeout, in.Node.Name)}
	}
	if in.Review != in.CSR.Name && !in.ReviewBusy {
		return Decision{Action: RequestReview, Reason: "static checks passed; asking the node's agent to attest", Category: "review"}
	}
	return Decision{Action: Wait, After: in.Timeout - elapsed, Reason: "waiting for the node's attestation", Category: "wait"}
}
