package approval

import (
	"crypto/ed25519"
	"crypto/rand"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/talos-nodeinit/talos-nodeinit/coordinator/config"
	"github.com/talos-nodeinit/talos-nodeinit/pkg/contract"
	"github.com/talos-nodeinit/talos-nodeinit/pkg/csrcheck"
	"github.com/talos-nodeinit/talos-nodeinit/pkg/csrcheck/csrtest"
)

func request(t *testing.T, name string, dns []string, ips ...string) csrcheck.Request {
	t.Helper()
	return csrcheck.Request{
		Name: name, Username: "system:node:node-a", Groups: []string{"system:nodes", "system:authenticated"},
		SignerName: certificatesv1.KubeletServingSignerName,
		Usages:     []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageServerAuth},
		PEM:        csrtest.PEM(t, nil, "node-a", dns, ips...),
	}
}

func TestDecide(t *testing.T) {
	now := time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)
	nodeA := &csrcheck.Node{Name: "node-a", Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "10.0.0.1"}, {Type: corev1.NodeHostName, Address: "node-a"}}}
	facts := csrcheck.Facts{
		Claims: map[netip.Addr]string{netip.MustParseAddr("10.0.0.1"): "node-a", netip.MustParseAddr("10.0.0.2"): "node-b"},
		Seen:   map[netip.Addr]time.Duration{netip.MustParseAddr("10.0.0.1"): time.Minute},
		Names:  map[string]string{"node-a": "node-a", "node-b": "node-b"},
	}
	policy := csrcheck.Policy{NodeNetworks: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}, ClusterDomain: "cluster.local", MinStable: 3 * time.Second}
	pub, key, _ := ed25519.GenerateKey(rand.Reader)
	otherPub, otherKey, _ := ed25519.GenerateKey(rand.Reader)
	good := request(t, "csr-good", []string{"node-a"}, "10.0.0.1")
	other := request(t, "csr-good", []string{"node-a"}, "10.0.0.1") // same name, another request
	sign := func(r csrcheck.Request, a contract.Attestation, k ed25519.PrivateKey) *contract.Attestation {
		parsed, err := csrcheck.Parse(r.PEM)
		if err != nil {
			t.Fatal(err)
		}
		a.SANs = contract.RequestSANs(parsed)
		a = a.Sign("node-a", k)
		return &a
	}
	attest := func(r csrcheck.Request, v contract.Verdict, reason string) *contract.Attestation {
		return sign(r, contract.Attestation{CSR: r.Name, RequestSHA256: contract.RequestDigest(r.PEM), Verdict: v, Reason: reason}, key)
	}
	base := func(r csrcheck.Request) Input {
		return Input{CSR: r, Created: now.Add(-10 * time.Second), ReviewRequested: now.Add(-10 * time.Second), Node: nodeA, Facts: facts, Policy: policy, AttestationRequired: true,
			Timeout: time.Minute, OnTimeout: config.StayPending, Now: now, EnrolledKey: pub, PublishedKey: contract.EncodeAgentKey(pub),
			Renewals: config.RenewSameNames}
	}
	for _, tc := range []struct {
		name     string
		in       func() Input
		action   Action
		inReason string
	}{
		{"good CSR, no review yet: ask the agent", func() Input { return base(good) }, RequestReview, ""},
		{"review asked, no attestation: wait", func() Input { in := base(good); in.Review = good.Name; return in }, Wait, ""},
		{"another CSR of the node under review: wait", func() Input { in := base(good); in.Review, in.ReviewBusy = "csr-older", true; return in }, Wait, ""},
		{"matching attestation approves", func() Input {
			in := base(good)
			in.Attestation = attest(good, contract.VerdictApprove, "ok")
			return in
		}, Approve, "attested"},
		{"the Node's record cannot be read: held, whatever the attestation", func() Input {
			in := base(good)
			in.Attestation = attest(good, contract.VerdictApprove, "ok")
			in.RecordUnreadable = fmt.Errorf("NodeRecord node-a: parsing time \"2026-11-27t08:00:00z\"")
			return in
		}, Hold, "NodeRecord node-a"},
		{"the Node's record cannot be read, no key: held for the record, not for enrolment", func() Input {
			in := base(good)
			in.EnrolledKey = nil
			in.RecordUnreadable = fmt.Errorf("NodeRecord node-a: unreadable")
			return in
		}, Hold, "kubectl edit noderecord node-a"},
		{"the Node's record cannot be read, attestation not required: held", func() Input {
			in := base(good)
			in.AttestationRequired = false
			in.RecordUnreadable = fmt.Errorf("NodeRecord node-a: unreadable")
			return in
		}, Hold, "cannot be read"},
		{"the Node's record describes an earlier object of its name: held (no review), whatever the attestation", func() Input {
			in := base(good)
			in.Attestation = attest(good, contract.VerdictApprove, "ok")
			in.RecordOfAnotherObject = true
			return in
		}, Hold, "earlier Node object"},
		{"the Node's record describes an earlier object, attestation not required: held", func() Input {
			in := base(good)
			in.AttestationRequired = false
			in.RecordOfAnotherObject = true
			return in
		}, Hold, "earlier Node object"},
		{"agent rejection denies with its reason", func() Input {
			in := base(good)
			in.Attestation = attest(good, contract.VerdictReject, "IP SAN 10.9.9.9 is not an address this node publishes")
			return in
		}, Deny, "10.9.9.9"},

		{"attestation of another CSR is ignored", func() Input {
			in := base(good)
			in.Review = good.Name
			a := attest(good, contract.VerdictApprove, "ok")
			a.CSR = "csr-else"
			in.Attestation = a
			return in
		}, Wait, ""},
		{"no attestation by the timeout: asked once more, for this request", func() Input {
			in := base(good)
			in.Review, in.ReviewRequested = good.Name, now.Add(-2*time.Minute)
			return in
		}, RequestReview, "once more"},
		{"no attestation by the timeout, the review on another CSR now: stays pending, not asked again", func() Input {
			in := base(good)
			in.Review, in.ReviewRequested = "csr-newer", now.Add(-2*time.Minute)
			return in
		}, TimedOut, "no valid attestation"},
		{"an ignored attestation by the timeout: asked once more too", func() Input {
			in := base(good)
			in.Review, in.ReviewRequested = good.Name, now.Add(-2*time.Minute)
			a := *attest(good, contract.VerdictApprove, "forged")
			a.Signature = ""
			in.Attestation = &a
			return in
		}, RequestReview, "once more"},
		{"no attestation by the timeout of the ask again: stays pending", func() Input {
			in := base(good)
			in.Review, in.ReviewAgain, in.ReviewRequested = good.Name, true, now.Add(-2*time.Minute)
			return in
		}, TimedOut, "no valid attestation"},
		{"no attestation by the timeout, approve policy", func() Input {
			in := base(good)
			in.ReviewRequested, in.OnTimeout = now.Add(-2*time.Minute), config.ApproveOnChecks
			return in
		}, Approve, "static checks alone"},
		{"attestation not required", func() Input { in := base(good); in.AttestationRequired = false; return in }, Approve, ""},
		{"unknown node: retry", func() Input { in := base(good); in.Node = nil; return in }, Retry, ""},
		{"another node's IP: denied before any attestation", func() Input {
			in := base(request(t, "csr-b", []string{"node-a"}, "10.0.0.2"))
			in.Attestation = attest(in.CSR, contract.VerdictApprove, "forged")
			return in
		}, Deny, "10.0.0.2"},
		{"attestation written with the kubelet credential (unsigned) changes nothing", func() Input {
			in := base(good)
			in.Review = good.Name
			a := *attest(good, contract.VerdictApprove, "forged")
			a.Signature = ""
			in.Attestation = &a
			return in
		}, Wait, "not signed"},
		{"forged rejection of an honest CSR changes nothing", func() Input {
			in := base(good)
			in.Review = good.Name
			in.Attestation = sign(good, contract.Attestation{CSR: good.Name, RequestSHA256: contract.RequestDigest(good.PEM), Verdict: contract.VerdictReject}, otherKey)
			return in
		}, Wait, "enrolled agent key"},
		{"attestation signed by another key, no timeout approval either", func() Input {
			in := base(good)
			in.ReviewRequested, in.OnTimeout, in.ReviewAgain = now.Add(-2*time.Minute), config.StayPending, true
			in.Attestation = attest(good, contract.VerdictApprove, "ok")
			in.EnrolledKey = otherPub
			in.PublishedKey = contract.EncodeAgentKey(otherPub)
			return in
		}, TimedOut, "not signed by the enrolled agent key"},
		{"signature over other SANs", func() Input {
			in := base(good)
			in.Review = good.Name
			a := *attest(good, contract.VerdictApprove, "ok")
			a.SANs = []string{"dns:node-a", "ip:10.0.0.1", "ip:10.96.0.1"}
			in.Attestation = &a
			return in
		}, Wait, "SANs"},
		{"agent key changed after a reinstall: held with the re-enrol command", func() Input {
			in := base(good)
			in.Attestation = sign(good, contract.Attestation{CSR: good.Name, RequestSHA256: contract.RequestDigest(good.PEM), Verdict: contract.VerdictApprove}, otherKey)
			in.PublishedKey = contract.EncodeAgentKey(otherPub)
			return in
		}, Hold, "kubectl patch noderecord node-a"},
		{"no enrolled key: held", func() Input { in := base(good); in.EnrolledKey = nil; return in }, Hold, "no agent key"},
		{"renewal with the same names approves", func() Input {
			in := base(good)
			in.PreviousSANs = []string{"dns:node-a", "ip:10.0.0.1"}
			in.Attestation = attest(good, contract.VerdictApprove, "ok")
			return in
		}, Approve, "attested"},
		{"renewal with other names is held", func() Input {
			in := base(good)
			in.PreviousSANs = []string{"dns:node-a", "ip:10.0.0.7"}
			in.Attestation = attest(good, contract.VerdictApprove, "ok")
			return in
		}, Hold, "still valid"},
		{"renewal with other names, checks policy", func() Input {
			in := base(good)
			in.PreviousSANs, in.Renewals = []string{"dns:node-a", "ip:10.0.0.7"}, config.RenewOnChecks
			in.Attestation = attest(good, contract.VerdictApprove, "ok")
			return in
		}, Approve, "attested"},
		{"a Node left alone (not adopted): held, saying what to do", func() Input {
			in := base(good)
			in.NotAdopted = true
			in.Attestation = attest(good, contract.VerdictApprove, "ok")
			return in
		}, Hold, "adoptExisting"},
		{"a Node left alone: what the checks refuse is still denied", func() Input {
			in := base(request(t, "csr-n2", []string{"node-a", "node-b"}))
			in.NotAdopted = true
			return in
		}, Deny, "node-b"},
		{"flood guard holds", func() Input {
			in := base(good)
			in.Pending, in.MaxPending = 101, 100
			in.Attestation = attest(good, contract.VerdictApprove, "ok")
			return in
		}, Hold, "paused"},
		{"a flood never delays the renewal of the recorded certificate", func() Input {
			in := base(good)
			in.Pending, in.MaxPending = 101, 100
			in.PreviousSANs = []string{"dns:node-a", "ip:10.0.0.1"}
			in.Attestation = attest(good, contract.VerdictApprove, "ok")
			return in
		}, Approve, "attested"},
		{"a flood still pauses a renewal with other names (checks policy)", func() Input {
			in := base(good)
			in.Pending, in.MaxPending, in.Renewals = 101, 100, config.RenewOnChecks
			in.PreviousSANs = []string{"dns:node-a", "ip:10.0.0.7"}
			in.Attestation = attest(good, contract.VerdictApprove, "ok")
			return in
		}, Hold, "paused"},
		{"first seen after the timeout (coordinator was down), approve policy: reviewed, not approved blind", func() Input {
			in := base(good)
			in.Created, in.ReviewRequested, in.OnTimeout = now.Add(-time.Hour), time.Time{}, config.ApproveOnChecks
			return in
		}, RequestReview, ""},
		{"the timeout counts from the review request", func() Input {
			in := base(good)
			in.Created, in.ReviewRequested, in.Review = now.Add(-time.Hour), now.Add(-10*time.Second), good.Name
			return in
		}, Wait, "waiting"},
		{"a stale same-name attestation (the CSR was re-created) is re-reviewed, not denied", func() Input {
			in := base(good)
			in.Attestation = attest(other, contract.VerdictApprove, "ok") // same name, the old request
			return in
		}, RequestReview, "another request"},
		{"address not stable yet: wait", func() Input {
			in := base(good)
			in.Facts.Seen = map[netip.Addr]time.Duration{netip.MustParseAddr("10.0.0.1"): time.Second}
			return in
		}, Wait, "less than 3s"},
		{"address claimed by another node first: held and rechecked, never deny the honest node", func() Input {
			in := base(good)
			in.Facts.Claims = map[netip.Addr]string{netip.MustParseAddr("10.0.0.1"): "node-b"}
			return in
		}, Hold, "held by Node node-b"},
		{"another node's name", func() Input { return base(request(t, "csr-n", []string{"node-a", "node-b"})) }, Deny, "node-b"},
		{"wildcard", func() Input { return base(request(t, "csr-w", []string{"*.node-a"})) }, Deny, "wildcard"},
		{"upper-case KUBERNETES", func() Input { return base(request(t, "csr-k", []string{"node-a", "KUBERNETES"})) }, Deny, "KUBERNETES"},
		{"IP-only with a foreign IP", func() Input { return base(request(t, "csr-ip", nil, "10.0.0.2")) }, Deny, "10.0.0.2"},
		{"client-auth usage", func() Input {
			r := request(t, "csr-c", []string{"node-a"})
			r.Usages = append(r.Usages, certificatesv1.UsageClientAuth)
			return base(r)
		}, Deny, "client auth"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := Decide(tc.in())
			if d.Action != tc.action || !strings.Contains(d.Reason, tc.inReason) || d.Category == "" {
				t.Fatalf("Decide = %+v, want %s with %q in the reason", d, tc.action, tc.inReason)
			}
			if d.Action == Wait && d.After <= 0 {
				t.Fatalf("wait without a delay: %+v", d)
			}
			if d.AskAgain != strings.Contains(d.Reason, "once more") {
				t.Fatalf("an ask again not marked so (or marked without one): %+v", d)
			}
		})
	}
}

// nodeAFixture is node-a with its one address recorded and settled, and the
// policy the tests below decide under.
func nodeAFixture() (*csrcheck.Node, csrcheck.Facts, csrcheck.Policy) {
	node := &csrcheck.Node{Name: "node-a", Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "10.0.0.1"}, {Type: corev1.NodeHostName, Address: "node-a"}}}
	facts := csrcheck.Facts{
		Claims: map[netip.Addr]string{netip.MustParseAddr("10.0.0.1"): "node-a"},
		Seen:   map[netip.Addr]time.Duration{netip.MustParseAddr("10.0.0.1"): time.Minute},
		Names:  map[string]string{"node-a": "node-a"},
	}
	policy := csrcheck.Policy{NodeNetworks: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}, ClusterDomain: "cluster.local", MinStable: 3 * time.Second}
	return node, facts, policy
}

// TestIgnoredAttestationChangesNoDecision: an attestation that is not
// signed by the enrolled key, whoever wrote it, decides nothing. Whatever
// the review's state, the CSR's decision with it is the decision without
// it (action, requeue, ask again, and whether the CSR keeps its review);
// only the reason and category say that it was ignored.
func TestIgnoredAttestationChangesNoDecision(t *testing.T) {
	now := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	nodeA, facts, policy := nodeAFixture()
	pub, _, _ := ed25519.GenerateKey(rand.Reader)
	_, otherKey, _ := ed25519.GenerateKey(rand.Reader)
	good := request(t, "csr-good", []string{"node-a"}, "10.0.0.1")
	parsed, err := csrcheck.Parse(good.PEM)
	if err != nil {
		t.Fatal(err)
	}
	approve := contract.Attestation{CSR: good.Name, RequestSHA256: contract.RequestDigest(good.PEM), Verdict: contract.VerdictApprove, Reason: "ok", SANs: contract.RequestSANs(parsed)}
	forgeries := map[string]struct {
		att       contract.Attestation
		published string
	}{
		"unsigned":                {approve, contract.EncodeAgentKey(pub)},
		"signed with another key": {approve.Sign("node-a", otherKey), contract.EncodeAgentKey(pub)},
		"a rejection, unsigned":   {contract.Attestation{CSR: good.Name, RequestSHA256: approve.RequestSHA256, Verdict: contract.VerdictReject, Reason: "no"}, contract.EncodeAgentKey(pub)},
		"the node publishes a key that does not parse": {approve.Sign("node-a", otherKey), "ed25519:not-a-key"},
		"signed with the key the node now publishes":   {approve.Sign("node-a", otherKey), contract.EncodeAgentKey(otherKey.Public().(ed25519.PublicKey))},
	}
	asked := map[string]time.Time{"never": {}, "within the timeout": now.Add(-10 * time.Second), "past the timeout": now.Add(-2 * time.Minute)}
	reviews := map[string]string{"none": "", "this CSR": good.Name, "another CSR": "csr-other"}
	n := 0
	for fname, f := range forgeries {
		for aname, at := range asked {
			for rname, review := range reviews {
				for _, busy := range []bool{false, true} {
					for _, again := range []bool{false, true} {
						for _, onTimeout := range []config.TimeoutAction{config.StayPending, config.ApproveOnChecks} {
							in := Input{CSR: good, Created: now.Add(-3 * time.Minute), ReviewRequested: at, Node: nodeA, Facts: facts, Policy: policy,
								AttestationRequired: true, Timeout: time.Minute, OnTimeout: onTimeout, Now: now, EnrolledKey: pub, PublishedKey: f.published,
								Review: review, ReviewBusy: busy && review == "csr-other", ReviewAgain: again && review == good.Name, Renewals: config.RenewSameNames}
							without := Decide(in)
							att := f.att
							in.Attestation = &att
							with := Decide(in)
							n++
							wantW, gotW := WantOf(good.Name, in.Created, without), WantOf(good.Name, in.Created, with)
							if with.Action != without.Action || with.After != without.After || with.AskAgain != without.AskAgain || gotW.Review != wantW.Review {
								t.Errorf("%s attestation, asked %s, review on %s (busy %v, again %v, %s): decided %s after %v (ask again %v, keeps the review %v, %s), without it %s after %v (ask again %v, keeps the review %v, %s)",
									fname, aname, rname, in.ReviewBusy, in.ReviewAgain, onTimeout,
									with.Action, with.After, with.AskAgain, gotW.Review, with.Category, without.Action, without.After, without.AskAgain, wantW.Review, without.Category)
							}
							if want := CategoryAttestationInvalid; with.Category != want && with.Category != without.Category {
								t.Errorf("%s attestation, asked %s, review on %s: category %q, want %q or %q (the Event says it was ignored, or what the decision without it says)", fname, aname, rname, with.Category, want, without.Category)
							}
						}
					}
				}
			}
		}
	}
	if n != len(forgeries)*3*3*2*2*2 {
		t.Fatalf("%d cases", n)
	}
}

// TestAClaimOfAnotherNodeGivesTheReviewAway: a CSR whose SANs another Node
// holds (its claim came first) waits for as long as that Node chooses, so
// it does not keep the node's review from the kubelet's newer CSR; one
// whose own addresses are not settled yet keeps it (the attestation is then
// ready when they are).
func TestAClaimOfAnotherNodeGivesTheReviewAway(t *testing.T) {
	now := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	nodeA, _, policy := nodeAFixture()
	pub, _, _ := ed25519.GenerateKey(rand.Reader)
	older := request(t, "csr-older", []string{"node-a"}, "10.0.0.1")
	for _, tc := range []struct {
		name   string
		facts  csrcheck.Facts
		action Action
		keeps  bool
	}{
		{"claimed by another node", csrcheck.Facts{Claims: map[netip.Addr]string{netip.MustParseAddr("10.0.0.1"): "node-b"},
			Seen: map[netip.Addr]time.Duration{netip.MustParseAddr("10.0.0.1"): time.Minute}, Names: map[string]string{"node-a": "node-a"}}, Hold, false},
		{"its own address not settled yet", csrcheck.Facts{Claims: map[netip.Addr]string{netip.MustParseAddr("10.0.0.1"): "node-a"},
			Seen: map[netip.Addr]time.Duration{netip.MustParseAddr("10.0.0.1"): time.Second}, Names: map[string]string{"node-a": "node-a"}}, Wait, true},
	} {
		in := Input{CSR: older, Created: now.Add(-time.Minute), ReviewRequested: now.Add(-10 * time.Second), Node: nodeA, Facts: tc.facts, Policy: policy,
			AttestationRequired: true, Timeout: time.Minute, OnTimeout: config.StayPending, Now: now, EnrolledKey: pub, PublishedKey: contract.EncodeAgentKey(pub),
			Review: older.Name, Renewals: config.RenewSameNames}
		d := Decide(in)
		if d.Action != tc.action || d.After <= 0 {
			t.Errorf("%s: %s after %v (%s), want %s with a recheck", tc.name, d.Action, d.After, d.Reason, tc.action)
		}
		wants := []Want{WantOf(older.Name, in.Created, d), {CSR: "csr-newer", Created: now, Review: true}}
		want := "csr-newer"
		if tc.keeps {
			want = older.Name
		}
		if got := Handoff(older.Name, wants); got != want {
			t.Errorf("%s: the review goes to %q, want %q", tc.name, got, want)
		}
	}
}

// TestNodeTextInReasons: whatever an agent (or a thief with its key) writes
// as the attestation's reason or SANs reaches the CSR's condition and Event
// bounded, on one line, and quoted: it cannot forge a line of the
// coordinator's own.
func TestNodeTextInReasons(t *testing.T) {
	now := time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)
	nodeA, facts, policy := nodeAFixture()
	pub, key, _ := ed25519.GenerateKey(rand.Reader)
	good := request(t, "csr-good", []string{"node-a"}, "10.0.0.1")
	parsed, err := csrcheck.Parse(good.PEM)
	if err != nil {
		t.Fatal(err)
	}
	hostile := []string{
		"ok\nI1121 12:00:00 CSR decided csr=csr-evil decision=Approve",
		"ok\r\x1b[2Kapproved by admin",
		"ok\u202eevorppa",
		"ok\x00\x07\x7f\u0085\u2028",
		strings.Repeat("A", 1024),
		strings.Repeat("\u00e9", 512),
		string([]byte{0xff, 0xfe, '\n', 0xc3}),
	}
	for i, reason := range hostile {
		for _, verdict := range []contract.Verdict{contract.VerdictApprove, contract.VerdictReject} {
			a := contract.Attestation{CSR: good.Name, RequestSHA256: contract.RequestDigest(good.PEM), Verdict: verdict, Reason: reason, SANs: contract.RequestSANs(parsed)}
			signed := a.Sign("node-a", key)
			forgedSANs := a
			forgedSANs.SANs = []string{"dns:node-a", reason}
			forgedSANs = forgedSANs.Sign("node-a", key)
			for _, att := range []contract.Attestation{signed, forgedSANs} {
				in := Input{CSR: good, Created: now, ReviewRequested: now, Node: nodeA, Facts: facts, Policy: policy, AttestationRequired: true,
					Timeout: time.Minute, OnTimeout: config.StayPending, Now: now, EnrolledKey: pub, PublishedKey: contract.EncodeAgentKey(pub), Attestation: &att}
				d := Decide(in)
				for _, r := range d.Reason {
					if !strconv.IsPrint(r) {
						t.Fatalf("hostile reason %d (%s): the decision's reason carries %U: %q", i, verdict, r, d.Reason)
					}
				}
				if len(d.Reason) > 400+2*contract.MaxNodeTextBytes {
					t.Fatalf("hostile reason %d (%s): the decision's reason is %d bytes: %q", i, verdict, len(d.Reason), d.Reason)
				}
			}
		}
	}
}

// TestFloodCount: what must never count toward csr.maxPending.
func TestFloodCount(t *testing.T) {
	nodes := map[string]bool{"node-a": true, "node-b": true, "node-c": true}
	for _, tc := range []struct {
		name    string
		pending map[string]int
		want    int
	}{
		{"none", nil, 0},
		{"one CSR per Node", map[string]int{"node-a": 1, "node-b": 1}, 2},
		{"a Node filing in a loop counts twice", map[string]int{"node-a": 500, "node-b": 1}, 3},
		{"identities without a Node never count", map[string]int{"ghost-1": 2, "ghost-2": 2, "ghost-3": 1}, 0},
		{"bootstrap-token identities beside Nodes", map[string]int{"ghost-1": 2, "node-a": 1, "node-c": 9}, 3},
		{"one Node among a thousand identities", func() map[string]int {
			m := map[string]int{"node-b": 1}
			for i := range 1000 {
				m[fmt.Sprintf("ghost-%d", i)] = 2
			}
			return m
		}(), 1},
		{"zero and negative counts are nothing", map[string]int{"node-a": 0, "node-b": -3}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := FloodCount(tc.pending, func(n string) bool { return nodes[n] }); got != tc.want {
				t.Errorf("FloodCount = %d, want %d", got, tc.want)
			}
		})
	}
}

// TestNodesAloneNeverPauseTheDefaultGuard: at csr.maxPending's default, no
// number of Nodes pauses approval, each with as many pending CSRs as it
// likes. Nodes are what the bootstrap token every Talos worker carries
// mints, and kubelets keep an older request pending beside a new one, so
// a default that Nodes can cross is a switch anyone can flip for everyone.
func TestNodesAloneNeverPauseTheDefaultGuard(t *testing.T) {
	for _, n := range []int{0, 1, 50, 100, 101, 150, 1000, 5000} {
		pending := map[string]int{}
		for i := range n {
			pending[fmt.Sprintf("node-%d", i)] = 2 + i%3
		}
		count := FloodCount(pending, func(string) bool { return true })
		if limit := FloodLimit(0); limit > 0 && count > limit {
			t.Errorf("%d Nodes with pending CSRs count %d, over the default limit %d: approval paused for everyone", n, count, limit)
		}
		// An admin's limit still pauses.
		if limit := FloodLimit(10); n > 5 && (limit != 10 || count <= limit) {
			t.Errorf("%d Nodes: csr.maxPending 10 gives limit %d against count %d", n, limit, count)
		}
	}
}

// TestAConflictIsNamedForWhatIsShared: a CSR held because another Node holds
// one of its SANs says which kind: an address (AddressClaimedByOtherNode) or
// a DNS name (NameClaimedByOtherNode), so an operator reading the Event's
// reason knows where to look; both at once are named as the address.
func TestAConflictIsNamedForWhatIsShared(t *testing.T) {
	now := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	nodeA, _, policy := nodeAFixture()
	ip := netip.MustParseAddr("10.0.0.1")
	settled := map[netip.Addr]time.Duration{ip: time.Minute}
	for _, tc := range []struct {
		name  string
		facts csrcheck.Facts
		want  Category
	}{
		{"an address another Node holds", csrcheck.Facts{Claims: map[netip.Addr]string{ip: "node-b"}, Seen: settled,
			Names: map[string]string{"node-a": "node-a"}}, CategoryAddressClaimed},
		{"a name another Node's identity also gives", csrcheck.Facts{Claims: map[netip.Addr]string{ip: "node-a"}, Seen: settled,
			Names: map[string]string{"node-a": "node-a"}, SharedNames: map[string]string{"node-a": "node-b"}}, CategoryNameClaimed},
		{"a name another Node lists as its Hostname", csrcheck.Facts{Claims: map[netip.Addr]string{ip: "node-a"}, Seen: settled,
			Hostnames: map[string]string{"web.example.com": "node-b"}}, CategoryNameClaimed},
		{"both", csrcheck.Facts{Claims: map[netip.Addr]string{ip: "node-b"}, Seen: settled,
			Names: map[string]string{"node-a": "node-a"}, SharedNames: map[string]string{"node-a": "node-b"}}, CategoryAddressClaimed},
	} {
		dns := []string{"node-a"}
		if tc.facts.Hostnames != nil {
			dns = []string{"web.example.com"}
		}
		p := policy
		p.DNSPatterns = []string{"*.example.com"}
		in := Input{CSR: request(t, "csr-a", dns, ip.String()), Created: now, Node: nodeA, Facts: tc.facts, Policy: p, Now: now, Renewals: config.RenewSameNames}
		if d := Decide(in); d.Action != Hold || d.Category != tc.want {
			t.Errorf("%s: %s %s (%s), want held as %s", tc.name, d.Action, d.Category, d.Reason, tc.want)
		}
	}
}
