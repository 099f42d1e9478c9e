// Package approval is the coordinator's decision on one kubelet serving CSR,
// as a pure function: static checks against facts nodes cannot forge
// (pkg/csrcheck), the renewal rule and the flood guard, then the node
// agent's attestation, signed by the agent key the coordinator enrolled,
// with a timeout policy for nodes that never attest.
package approval

import (
	"crypto/ed25519"
	"fmt"
	"slices"
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
	// Wait requeues after Decision.After (the attestation may still come,
	// the node's own address may become stable). A CSR that waits keeps its
	// review (WantOf): every wait is for the attestation, now or once the
	// addresses settle.
	Wait Action = "Wait"
	// Hold leaves the CSR pending with an Event until something changes
	// (an admin re-enrols a key, the flood subsides, a claim is released);
	// After, when set, rechecks then.
	Hold Action = "Hold"
	// TimedOut leaves the CSR pending and says so with an Event.
	TimedOut Action = "TimedOut"
)

// Input is everything the decision depends on.
type Input struct {
	CSR     csrcheck.Request
	Created time.Time
	// ReviewRequested is when the coordinator asked the node's agent to
	// attest this CSR (zero: not yet). The attestation timeout counts from
	// it, so a CSR first seen late is still reviewed.
	ReviewRequested time.Time
	// Node is nil when the requesting Node is not in the cache.
	Node   *csrcheck.Node
	Facts  csrcheck.Facts
	Policy csrcheck.Policy

	AttestationRequired bool
	Timeout             time.Duration
	OnTimeout           config.TimeoutAction

	// Review is the Node's nodeinit.io/csr-review; ReviewBusy says it names
	// another CSR of this node that is still pending; ReviewAgain that it
	// asks for this very request by its digest: the ask again is written
	// (until it is, a timeout asks again, not out).
	Review      string
	ReviewBusy  bool
	ReviewAgain bool
	// Attestation is the Node's nodeinit.io/csr-attestation, nil if absent or unreadable.
	Attestation *contract.Attestation
	// EnrolledKey is the agent key in the Node's record (nil: none), and
	// PublishedKey the one its agent publishes now (for the re-enrol hint).
	EnrolledKey  ed25519.PublicKey
	PublishedKey string

	// Renewals is the renewal policy; PreviousSANs the SANs of the Node's
	// last approved certificate while it is valid (nil otherwise).
	Renewals     config.RenewalPolicy
	PreviousSANs []string

	// NotAdopted: the Node was initialized before the coordinator kept
	// records and adoptExisting is off; the coordinator leaves it alone.
	NotAdopted bool
	// RecordUnreadable is why the Node's NodeRecord cannot be read (nil:
	// it can, or there is none): nothing is decided from it.
	RecordUnreadable error
	// RecordOfAnotherObject: the Node's record describes an earlier Node
	// object of its name (its nodeUID), not yet released by this one's
	// first sync: nothing is decided from claims that are not this
	// object's.
	RecordOfAnotherObject bool

	// Pending counts pending serving CSRs (each Node at most twice);
	// MaxPending is the flood guard's limit.
	Pending, MaxPending int
	Now                 time.Time
}

// Decision is the action with its reason (for the condition and the Event)
// and why, as a Category (for the controller's hand-offs, its Events and
// metrics).
type Decision struct {
	Action   Action
	Reason   string
	Category Category
	After    time.Duration
	// SANs are the approved request's SANs (contract.RequestSANs), for the
	// record: the request is not parsed again to write it.
	SANs []string
	// AskAgain: the review request is an ask again, for this request,
	// after a timeout without a valid attestation (the category may say
	// why the attestation there was not valid).
	AskAgain bool
}

// Category says why a decision was taken: the controller matches these,
// never the reason's text. A denial by a failed check is CheckFailed(name).
type Category string

const (
	CategoryNotAdopted       Category = "not-adopted"
	CategoryRecordUnreadable Category = "record-unreadable"
	// CategoryRecordOfAnotherObject: the record describes an earlier
	// Node object of the name, not yet released.
	CategoryRecordOfAnotherObject Category = "record-of-another-object"
	CategoryCheck                 Category = "check"
	CategoryNodeUnknown           Category = "node-unknown"
	CategoryAddressNotSettled     Category = "address-not-settled"
	CategoryAddressClaimed        Category = "address-claimed"
	CategoryNameClaimed           Category = "name-claimed"
	CategoryRenewalNamesChanged   Category = "renewal-names-changed"
	CategoryFloodGuard            Category = "flood-guard"
	CategoryStatic                Category = "static"
	CategoryNoEnrolledKey         Category = "no-enrolled-key"
	CategoryAgentKeyChanged       Category = "agent-key-changed"
	CategoryAttestationStale      Category = "attestation-stale"
	CategoryAttestationInvalid    Category = "attestation-invalid"
	CategoryAttested              Category = "attested"
	CategoryAgentRejected         Category = "agent-rejected"
	CategoryReview                Category = "review"
	CategoryAskedAgain            Category = "asked-again"
	CategoryTimeoutApproved       Category = "timeout-approved"
	CategoryTimeoutPending        Category = "timeout-pending"
	CategoryWaiting               Category = "wait"
)

// CheckFailed is the category of a denial by the named check.
func CheckFailed(check string) Category { return Category("check:" + check) }

// claimRecheck is how often a CSR waiting on an address claim is rechecked.
const claimRecheck = 5 * time.Second

// recordRecheck is when a CSR held for its Node's unreadable record is
// looked at again (besides when the record changes).
const recordRecheck = 30 * time.Second

// notAdoptedRecheck is how often a CSR of a Node left alone is looked at
// again (the admin may adopt it).
const notAdoptedRecheck = time.Minute

// floodRecheck is how often a CSR held by the flood guard is rechecked.
const floodRecheck = 30 * time.Second

// Decide returns what to do with the CSR now.
func Decide(in Input) Decision {
	v := csrcheck.Check(in.CSR, in.Node, in.Facts, in.Policy)
	if v.Decision != csrcheck.Deny && in.NotAdopted && in.Node != nil {
		// What the checks refuse is still denied; anything else would wait
		// on addresses never recorded for a Node left alone, in silence.
		return Decision{Action: Hold, Category: CategoryNotAdopted, After: notAdoptedRecheck,
			Reason: fmt.Sprintf("Node %s was initialized before nodeinit-coordinator kept records of it, and adoptExisting is off: the coordinator leaves it alone, its serving CSRs too. "+
				"Set adoptExisting: true in the coordinator's configuration to adopt such Nodes (their next CSR is checked and approved as usual), or approve this one by hand: kubectl certificate approve %s", in.Node.Name, in.CSR.Name)}
	}
	if v.Decision != csrcheck.Deny && in.RecordUnreadable != nil && in.Node != nil {
		// Its claims, enrolled key and last certificate are in it: what
		// the checks refuse is still denied, nothing else is decided.
		return Decision{Action: Hold, Category: CategoryRecordUnreadable, After: recordRecheck,
			Reason: fmt.Sprintf("Node %s's NodeRecord cannot be read (%s), so nothing is approved for it: its claims, enrolled agent key and last certificate are there. "+
				"Fix the record (kubectl edit noderecord %s); until then it still holds the addresses and prefix it names", in.Node.Name, contract.NodeText(in.RecordUnreadable.Error()), in.Node.Name)}
	}
	if v.Decision != csrcheck.Deny && in.RecordOfAnotherObject && in.Node != nil {
		// The record's claims are the earlier object's: this one's first
		// sync releases them (nodestate.Decide), then it is decided. Held,
		// not a wait: a wait would want the agent's review before the
		// checks that may hold it have run, and the initializing write
		// records the request under review.
		return Decision{Action: Hold, Category: CategoryRecordOfAnotherObject, After: claimRecheck,
			Reason: fmt.Sprintf("Node %s's NodeRecord still describes an earlier Node object of this name: decided once the coordinator has synced this one", in.Node.Name)}
	}
	switch v.Decision {
	case csrcheck.Deny:
		cat := CategoryCheck
		for _, f := range v.Failures {
			if !f.Retry {
				cat = CheckFailed(f.Check)
				break
			}
		}
		return Decision{Action: Deny, Reason: v.Reason(), Category: cat}
	case csrcheck.Retry:
		if in.Node == nil {
			return Decision{Action: Retry, Reason: v.Reason(), Category: CategoryNodeUnknown}
		}
		after := v.After
		if after <= 0 {
			after = claimRecheck
		}
		if v.Conflict || v.NameConflict {
			// Another Node holds a SAN for as long as it chooses: held,
			// rechecked, and the review free for the node's newer CSR.
			cat := CategoryAddressClaimed
			if !v.Conflict {
				cat = CategoryNameClaimed
			}
			return Decision{Action: Hold, After: after, Reason: v.Reason(), Category: cat}
		}
		return Decision{Action: Wait, After: after, Reason: v.Reason(), Category: CategoryAddressNotSettled}
	}
	sans := contract.RequestSANs(v.Parsed)
	d := decideChecked(in, sans)
	if d.Action == Approve {
		d.SANs = sans
	}
	return d
}

// decideChecked decides a CSR that passed the static checks; sans are its
// request's SANs.
func decideChecked(in Input, sans []string) Decision {
	if in.Renewals == config.RenewSameNames && in.PreviousSANs != nil && !slices.Equal(in.PreviousSANs, sans) {
		return Decision{Action: Hold, Category: CategoryRenewalNamesChanged,
			Reason: fmt.Sprintf("the node's current serving certificate names %v and is still valid; this request names %v. "+
				"Left pending: approve it by hand (kubectl certificate approve %s) if the change is expected", in.PreviousSANs, sans, in.CSR.Name)}
	}
	// The flood guard pauses new names and new Nodes only: the renewal of
	// the certificate the record names (the same SANs, attested below by
	// the same enrolled key) goes on, whoever floods.
	renewal := in.PreviousSANs != nil && slices.Equal(in.PreviousSANs, sans)
	if in.MaxPending > 0 && in.Pending > in.MaxPending && !renewal {
		return Decision{Action: Hold, After: floodRecheck, Category: CategoryFloodGuard,
			Reason: fmt.Sprintf("%d serving CSRs are pending, more than csr.maxPending (%d): automatic approval of new names and new Nodes is paused (renewals of recorded certificates go on)", in.Pending, in.MaxPending)}
	}
	if !in.AttestationRequired {
		return Decision{Action: Approve, Reason: "static checks passed; attestation not required by policy", Category: CategoryStatic}
	}
	if in.EnrolledKey == nil {
		return Decision{Action: Hold, Category: CategoryNoEnrolledKey,
			Reason: "no agent key is enrolled for this node (its agent does not publish one, the node is not initialized yet, or this Node object is not the first of its name: " +
				"then the key waits in its NodeRecord's spec.pendingAgentKey; check that the key in this command is the public-key the agent logs, then run it, which enrols that key only: " + EnrolCommand(in.Node.Name, in.PublishedKey) + ")"}
	}
	a := in.Attestation
	if a != nil && a.CSR != in.CSR.Name {
		a = nil
	}
	var err error
	if a != nil {
		err = a.Verify(csrcheck.NodeName(in.CSR.Username), in.EnrolledKey, sans)
	}
	if (a == nil || err != nil) && in.PublishedKey != "" && in.PublishedKey != contract.EncodeAgentKey(in.EnrolledKey) {
		// Decided from the published key alone: an attestation the
		// enrolled key did not sign changes no decision, this one included.
		// The command copies the key from the record, where only the
		// coordinator writes: nothing in an Event (which any node can
		// forge) is pasted into the enrolment. The key shown is for
		// comparing with the agent's log on the node.
		if published, perr := contract.DecodeAgentKey(in.PublishedKey); perr == nil {
			return Decision{Action: Hold, Category: CategoryAgentKeyChanged,
				Reason: fmt.Sprintf("the node's agent now publishes key %s, not the enrolled one. If the node was reinstalled, "+
					"check that the key in this command is the public-key the agent logs at start on the node, then run it, which enrols that key only: %s", contract.EncodeAgentKey(published), EnrolCommand(in.Node.Name, in.PublishedKey))}
		}
		if err != nil {
			return decideWithout(in, CategoryAttestationInvalid, fmt.Sprintf("ignored an attestation not signed by the enrolled agent key (%v); the node publishes an unreadable key", err))
		}
	}
	if a != nil {
		switch {
		case err != nil:
			// Whoever wrote it does not hold the agent key: it changes nothing.
			return decideWithout(in, CategoryAttestationInvalid, fmt.Sprintf("ignored an attestation not signed by the enrolled agent key (%v)", err))
		case !a.About(in.CSR.Name, in.CSR.PEM):
			// The kubelet re-created a CSR under the same name: the
			// attestation is of the old request. Ask again.
			d := Decision{Action: RequestReview, Category: CategoryAttestationStale,
				Reason: fmt.Sprintf("the node's attestation of %s is for another request (sha256 %s, this request is %s); asking the agent again", a.CSR, a.RequestSHA256, contract.RequestDigest(in.CSR.PEM))}
			if !in.ReviewRequested.IsZero() && in.Now.Sub(in.ReviewRequested) >= in.Timeout {
				return decideWithout(in, CategoryAttestationStale, d.Reason)
			}
			return d
		case a.Approves(in.CSR.Name, in.CSR.PEM):
			return Decision{Action: Approve, Reason: "static checks passed and the node's agent attested every SAN with its enrolled key: " + contract.NodeText(a.Reason), Category: CategoryAttested}
		default:
			return Decision{Action: Deny, Reason: "the node's agent rejected it: " + contract.NodeText(a.Reason), Category: CategoryAgentRejected}
		}
	}
	return decideWithout(in, "", "")
}

// decideWithout decides a CSR that has no valid attestation yet: ask for
// one, wait for it, or time out. note, when set, is said along.
func decideWithout(in Input, category Category, note string) Decision {
	with := func(d Decision) Decision {
		if note != "" {
			d.Reason = note + "; " + d.Reason
			d.Category = category
		}
		return d
	}
	if in.ReviewRequested.IsZero() {
		// Never asked (or first seen by this replica): the timeout has not
		// started, whatever the CSR's age.
		return with(Decision{Action: RequestReview, Reason: "static checks passed; asking the node's agent to attest", Category: CategoryReview})
	}
	elapsed := in.Now.Sub(in.ReviewRequested)
	if elapsed >= in.Timeout {
		if in.OnTimeout == config.ApproveOnChecks {
			return with(Decision{Action: Approve, Category: CategoryTimeoutApproved,
				Reason: fmt.Sprintf("no attestation within %v; approved on the static checks alone, as the policy says", in.Timeout)})
		}
		if !in.ReviewAgain && in.Review == in.CSR.Name {
			// The agent may not have answered (down or slow at the ask):
			// ask once more, for this request, while its review is this
			// CSR's, before leaving it pending. The ask is on the Node, so
			// another replica does not ask a third time while it stays
			// there.
			return with(Decision{Action: RequestReview, Category: CategoryAskedAgain, AskAgain: true,
				Reason: fmt.Sprintf("no valid attestation within %v; asking the node's agent once more, for this request", in.Timeout)})
		}
		return with(Decision{Action: TimedOut, Category: CategoryTimeoutPending,
			Reason: fmt.Sprintf("no valid attestation from the node's agent within %v; left pending (is nodeinit-agent running on %s?)", in.Timeout, in.Node.Name)})
	}
	if in.Review != in.CSR.Name && !in.ReviewBusy {
		return with(Decision{Action: RequestReview, Reason: "static checks passed; asking the node's agent to attest", Category: CategoryReview})
	}
	return with(Decision{Action: Wait, After: in.Timeout - elapsed, Reason: "waiting for the node's attestation", Category: CategoryWaiting})
}

// EnrolCommand is the one command that enrols key, which a node's record
// holds pending: a JSON patch that tests spec.pendingAgentKey is still key,
// then copies it (only the coordinator writes it) to spec.agentKey.
// Whoever holds the node's credential can publish another key, which the
// coordinator then records as pending in its place between the admin's
// check of key against the agent's log and the command: the test makes
// the command fail then, instead of enrolling that key. Without a
// readable key, the command asks for the one the agent logs.
func EnrolCommand(node, key string) string {
	value := "<public-key the agent logs>"
	if pub, err := contract.DecodeAgentKey(key); err == nil {
		value = contract.EncodeAgentKey(pub)
	}
	return fmt.Sprintf(`kubectl patch noderecord %s --type=json -p '[{"op":"test","path":"/spec/pendingAgentKey","value":"%s"},{"op":"copy","from":"/spec/pendingAgentKey","path":"/spec/agentKey"}]'`, node, value)
}

// FloodLimit is the flood guard's limit for csr.maxPending; 0: no guard.
// The default (0) sets none. FloodCount counts only requesters with a
// Node, each at most twice, so a limit that grows with the Nodes (as
// OpenShift's machines + 100 does, and this guard's Nodes + 100 did) is
// crossed by Nodes alone: registering Nodes (the bootstrap token every
// Talos worker carries mints them), or kubelets that keep an older
// request pending beside a new one, would pause approval for everyone.
// Each CSR is still checked on its own; an admin who wants a pause above
// some number sets it.
func FloodLimit(maxPending int) int { return max(maxPending, 0) }

// FloodCount is what csr.maxPending limits, from the pending serving CSRs
// of each requester (by node name): only requesters with a Node count, each
// at most twice, so one node filing in a loop cannot pause approval for
// everyone. An identity without a Node (one minted with the bootstrap
// token) never counts: its CSRs are never approved anyway (Decide retries
// them until its Node exists), and many such names cost an attacker nothing.
func FloodCount(pending map[string]int, hasNode func(name string) bool) int {
	n := 0
	for name, c := range pending {
		if c > 0 && hasNode(name) {
			n += min(c, 2)
		}
	}
	return n
}
