// Package approval decides one kubelet serving CSR as a pure function: static checks against
// facts nodes cannot forge (pkg/csrcheck), the renewal rule, the flood guard, then the
// attestation signed by the enrolled agent key, with a timeout policy for nodes that never attest.
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
	// Wait requeues after Decision.After, for the attestation or for the node's addresses to
	// settle; either way the CSR keeps its review (WantOf).
	Wait Action = "Wait"
	// Hold leaves the CSR pending with an Event until something changes (a key is re-enrolled,
	// the flood subsides, a claim is released); After, when set, rechecks then.
	Hold Action = "Hold"
	// TimedOut leaves the CSR pending and says so with an Event.
	TimedOut Action = "TimedOut"
)

// Input is everything the decision depends on.
type Input struct {
	CSR     csrcheck.Request
	Created time.Time
	// ReviewRequested is when the agent was asked to attest this CSR (zero: not yet); the
	// timeout counts from it, so a CSR first seen late is still reviewed.
	ReviewRequested time.Time
	// Node is nil when the requesting Node is not in the cache.
	Node   *csrcheck.Node
	Facts  csrcheck.Facts
	Policy csrcheck.Policy

	AttestationRequired bool
	Timeout             time.Duration
	OnTimeout           config.TimeoutAction

	// Review is the Node's nodeinit.io/csr-review; ReviewBusy: it names another pending CSR of
	// this node; ReviewAgain: it asks again for this very request by its digest (until it does,
	// a timeout asks again rather than timing out).
	Review      string
	ReviewBusy  bool
	ReviewAgain bool
	// Attestation is the Node's nodeinit.io/csr-attestation, nil if absent or unreadable.
	Attestation *contract.Attestation
	// EnrolledKey is the agent key in the Node's record (nil: none); PublishedKey the one its
	// agent publishes now, for the re-enrol hint.
	EnrolledKey  ed25519.PublicKey
	PublishedKey string

	// Renewals is the renewal policy; PreviousSANs the SANs of the Node's last approved
	// certificate while it is valid (nil otherwise).
	Renewals     config.RenewalPolicy
	PreviousSANs []string

	// NotAdopted: the Node predates the coordinator's records and adoptExisting is off.
	NotAdopted bool
	// RecordUnreadable is why the Node's NodeRecord cannot be read (nil:
	// it can, or there is none): nothing is decided from it.
	RecordUnreadable error
	// RecordOfAnotherObject: the record still describes an earlier Node object of this name
	// (its nodeUID) until this one's first sync; nothing is decided from another object's claims.
	RecordOfAnotherObject bool

	// Pending is FloodCount's count of pending serving CSRs; MaxPending the flood guard's limit.
	Pending, MaxPending int
	Now                 time.Time
}

// Decision is the action, its Reason (for the condition and Event) and its Category.
type Decision struct {
	Action   Action
	Reason   string
	Category Category
	After    time.Duration
	// SANs are the approved request's SANs, for the record, so the request is not parsed again.
	SANs []string
	// AskAgain: asked again for this request, after a timeout with no valid attestation.
	AskAgain bool
}

// Category says why a decision was taken: the controller matches these,
// never the reason's text. A denial by a failed check is CheckFailed(name).
type Category string

const (
	CategoryNotAdopted       Category = "not-adopted"
	CategoryRecordUnreadable Category = "record-unreadable"
	// CategoryRecordOfAnotherObject: the record describes an earlier, unreleased Node object.
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

// recordRecheck is when a CSR held for an unreadable record is rechecked, besides on change.
const recordRecheck = 30 * time.Second

// notAdoptedRecheck is how often a CSR of a Node left alone is rechecked: it may be adopted.
const notAdoptedRecheck = time.Minute

// floodRecheck is how often a CSR held by the flood guard is rechecked.
const floodRecheck = 30 * time.Second

// Decide returns what to do with the CSR now.
func Decide(in Input) Decision {
	v := csrcheck.Check(in.CSR, in.Node, in.Facts, in.Policy)
	if v.Decision != csrcheck.Deny && in.NotAdopted && in.Node != nil {
		// The checks' denials stand; anything else would wait silently on addresses never recorded.
		return Decision{Action: Hold, Category: CategoryNotAdopted, After: notAdoptedRecheck,
			Reason: fmt.Sprintf("Node %s was initialized before nodeinit-coordinator kept records of it, and adoptExisting is off: the coordinator leaves it alone, its serving CSRs too. "+
				"Set adoptExisting: true in the coordinator's configuration to adopt such Nodes (their next CSR is checked and approved as usual), or approve this one by hand: kubectl certificate approve %s", in.Node.Name, in.CSR.Name)}
	}
	if v.Decision != csrcheck.Deny && in.RecordUnreadable != nil && in.Node != nil {
		// Its claims, enrolled key and last certificate are in it: only the checks' denials stand.
		return Decision{Action: Hold, Category: CategoryRecordUnreadable, After: recordRecheck,
			Reason: fmt.Sprintf("Node %s's NodeRecord cannot be read (%s), so nothing is approved for it: its claims, enrolled agent key and last certificate are there. "+
				"Fix the record (kubectl edit noderecord %s); until then it still holds the addresses and prefix it names", in.Node.Name, contract.NodeText(in.RecordUnreadable.Error()), in.Node.Name)}
	}
	if v.Decision != csrcheck.Deny && in.RecordOfAnotherObject && in.Node != nil {
		// The claims are the earlier object's until this one's first sync releases them. Held,
		// not a wait: a wait asks for the review, which the initializing write records, before
		// the checks that may hold the CSR have run.
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

// decideChecked decides a CSR that passed the static checks; sans are its request's SANs.
func decideChecked(in Input, sans []string) Decision {
	if in.Renewals == config.RenewSameNames && in.PreviousSANs != nil && !slices.Equal(in.PreviousSANs, sans) {
		return Decision{Action: Hold, Category: CategoryRenewalNamesChanged,
			Reason: fmt.Sprintf("the node's current serving certificate names %v and is still valid; this request names %v. "+
				"Left pending: approve it by hand (kubectl certificate approve %s) if the change is expected", in.PreviousSANs, sans, in.CSR.Name)}
	}
	// The flood guard pauses new names and new Nodes only: renewing the recorded certificate
	// (same SANs, attested below by the same enrolled key) goes on, whoever floods.
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
		// Decided from the published key alone: an attestation the enrolled key did not sign
		// changes nothing. The command copies the key from the record, which only the coordinator
		// writes, never from an Event (any node can forge one); the key shown is for the admin to
		// compare with the agent's log.
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
			// The kubelet re-created a CSR under the same name: the attestation is of the old one.
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

// decideWithout asks for a valid attestation, waits for it or times out; note, if any, leads.
func decideWithout(in Input, category Category, note string) Decision {
	with := func(d Decision) Decision {
		if note != "" {
			d.Reason = note + "; " + d.Reason
			d.Category = category
		}
		return d
	}
	if in.ReviewRequested.IsZero() {
		// Never asked (or new to this replica): the timeout has not begun, whatever the CSR's age.
		return with(Decision{Action: RequestReview, Reason: "static checks passed; asking the node's agent to attest", Category: CategoryReview})
	}
	elapsed := in.Now.Sub(in.ReviewRequested)
	if elapsed >= in.Timeout {
		if in.OnTimeout == config.ApproveOnChecks {
			return with(Decision{Action: Approve, Category: CategoryTimeoutApproved,
				Reason: fmt.Sprintf("no attestation within %v; approved on the static checks alone, as the policy says", in.Timeout)})
		}
		if !in.ReviewAgain && in.Review == in.CSR.Name {
			// The agent may have been down or slow: ask once more, for this request, while the
			// review is this CSR's. The ask is on the Node, so no other replica asks a third time.
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

// EnrolCommand is the one command that enrols key, pending in the node's record: a JSON patch
// that tests spec.pendingAgentKey is still key, then copies it (only the coordinator writes
// it) to spec.agentKey. The test fails the command if another key, published by whoever holds
// the node's credential, became pending after the admin checked key against the agent's log.
// Without a readable key, the command asks for the one the agent logs.
func EnrolCommand(node, key string) string {
	value := "<public-key the agent logs>"
	if pub, err := contract.DecodeAgentKey(key); err == nil {
		value = contract.EncodeAgentKey(pub)
	}
	return fmt.Sprintf(`kubectl patch noderecord %s --type=json -p '[{"op":"test","path":"/spec/pendingAgentKey","value":"%s"},{"op":"copy","from":"/spec/pendingAgentKey","path":"/spec/agentKey"}]'`, node, value)
}

// FloodLimit is the flood guard's limit for csr.maxPending; 0, the default, means no guard.
// FloodCount counts each Node up to twice, so a limit that grows with the Nodes (as
// OpenShift's machines + 100) is crossed by Nodes alone: registering Nodes (the bootstrap
// token every Talos worker carries mints them), or kubelets keeping an older request beside a
// new one, would pause approval for everyone. Each CSR is still checked on its own.
func FloodLimit(maxPending int) int { return max(maxPending, 0) }

// FloodCount is what csr.maxPending limits: the pending serving CSRs of requesters with a
// Node, each counted at most twice, so one node filing in a loop cannot pause approval for
// everyone. Identities without a Node (minted with the bootstrap token) cost an attacker
// nothing and are never approved anyway (Decide retries them until the Node exists).
func FloodCount(pending map[string]int, hasNode func(name string) bool) int {
	n := 0
	for name, c := range pending {
		if c > 0 && hasNode(name) {
			n += min(c, 2)
		}
	}
	return n
}
