package controller_test

import (
	"crypto/ed25519"
	"crypto/rand"
	"strings"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/talos-nodeinit/talos-nodeinit/pkg/contract"
	"github.com/talos-nodeinit/talos-nodeinit/pkg/csrcheck"
)

// An agent approves by Event when its coordinator says it reads them: the
// review carries nodeinit.io/attest-by, and an approval signed with the
// enrolled key, on an Event about the CSR, approves it with no Node patch.
// Anyone can create Events, so what another node creates about the CSR,
// forged, re-targeted or a rejection, decides nothing, and the Event's
// creator does not matter: the signature does.
func TestAttestationByEvent(t *testing.T) {
	startCoordinator(t, "by-event", ipamSettings)
	a := register(t, "by-event-a", "10.0.41.1")
	thief := register(t, "by-event-b", "10.0.41.2")
	for _, n := range []*simNode{a, thief} {
		n.publish(t, report{providerID: "talos://metal/" + n.ip.String()})
	}
	// underReview files a CSR as node a and waits for the coordinator to
	// ask a's agent about it, saying it reads Events.
	underReview := func(name string) *certificatesv1.CertificateSigningRequest {
		t.Helper()
		a.csr(t, name, []string{"by-event-a"}, []string{"10.0.41.1"})
		waitFor(t, 10*time.Second, "review of "+name, func() bool {
			return get(t, "by-event-a").Annotations[contract.AnnotationCSRReview] == name
		})
		if got, want := get(t, "by-event-a").Annotations[contract.AnnotationAttestBy], contract.AttestByEventFor(name); got != want {
			t.Fatalf("the review says attest-by %q, want %q", got, want)
		}
		csr, err := a.self.CertificatesV1().CertificateSigningRequests().Get(t.Context(), name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return csr
	}
	csr := underReview("by-event-good")
	parsed, err := csrcheck.Parse(csr.Spec.Request)
	if err != nil {
		t.Fatal(err)
	}
	genuine := contract.Attestation{CSR: csr.Name, RequestSHA256: contract.RequestDigest(csr.Spec.Request), Verdict: contract.VerdictApprove, SANs: contract.RequestSANs(parsed)}
	_, stranger, _ := ed25519.GenerateKey(rand.Reader)
	post := func(by *simNode, att contract.Attestation, mutate func(*corev1.Event)) *corev1.Event {
		t.Helper()
		ev, err := contract.AttestationEvent(a.name, att.CSR, csr.UID, att, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		if mutate != nil {
			mutate(ev)
		}
		created, err := by.self.CoreV1().Events(ev.Namespace).Create(t.Context(), ev, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("node %s creating an Event: %v", by.name, err)
		}
		return created
	}
	otherRequest := genuine
	otherRequest.RequestSHA256 = contract.RequestDigest([]byte("another request"))
	unsigned := genuine
	reject := genuine
	reject.Verdict = contract.VerdictReject
	rejectValue, err := contract.EncodeAttestation(reject.Sign(a.name, a.key))
	if err != nil {
		t.Fatal(err)
	}
	post(thief, unsigned, nil)
	post(thief, genuine.Sign(a.name, stranger), nil)
	post(thief, genuine.Sign(thief.name, thief.key), nil) // the thief's own enrolled key
	post(thief, genuine.Sign(thief.name, a.key), nil)     // a's key, for another node
	post(thief, otherRequest.Sign(a.name, a.key), nil)
	post(thief, genuine.Sign(a.name, a.key), func(ev *corev1.Event) { // a's genuine rejection, carried by hand
		ev.Annotations[contract.AnnotationCSRAttestation] = rejectValue
	})
	time.Sleep(2 * time.Second)
	if c, decided := condition(t, csr.Name); decided {
		t.Fatalf("Events no agent key signed for this request decided the CSR: %+v", c)
	}

	// The agent's approval, whoever carries it.
	carried := post(thief, genuine.Sign(a.name, a.key), nil)
	waitFor(t, 10*time.Second, "approved by the Event", func() bool {
		c, _ := condition(t, csr.Name)
		return c.Type == certificatesv1.CertificateApproved
	})
	if _, ok := get(t, "by-event-a").Annotations[contract.AnnotationCSRAttestation]; ok {
		t.Error("the Node carries an attestation: the approval came by Event alone")
	}

	// Any node may change an Event it can name. The one whose genuine
	// approval was checked, changed to carry an unsigned approval of the
	// node's next CSR, is never read again: the change is not even seen as
	// an attestation to ignore, and blocks nothing.
	next := underReview("by-event-next")
	nextAtt := contract.Attestation{CSR: next.Name, RequestSHA256: contract.RequestDigest(next.Spec.Request), Verdict: contract.VerdictApprove, SANs: genuine.SANs}
	poisonedValue, err := contract.EncodeAttestation(nextAtt)
	if err != nil {
		t.Fatal(err)
	}
	carried.InvolvedObject.Name = next.Name
	carried.Annotations[contract.AnnotationCSRAttestation] = poisonedValue
	if _, err := thief.self.CoreV1().Events(carried.Namespace).Update(t.Context(), carried, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("the thief updating its Event: %v", err)
	}
	time.Sleep(3 * time.Second)
	if c, decided := condition(t, next.Name); decided {
		t.Fatalf("a changed Event decided the next CSR: %+v", c)
	}
	if evs := events(t, next.Name, "AttestationIgnored"); len(evs) > 0 {
		t.Errorf("the changed Event was used as an attestation (then ignored): %s", evs[0].Message)
	}
	post(a, nextAtt.Sign(a.name, a.key), nil)
	waitFor(t, 10*time.Second, "the next CSR approved by its agent's Event", func() bool {
		c, _ := condition(t, next.Name)
		return c.Type == certificatesv1.CertificateApproved
	})

	// The agent's own rejection on its Node stands over an approval of the
	// same request that anyone copied into an Event (the agent approved it
	// once, then its address moved).
	third := underReview("by-event-rejected")
	thirdAtt := contract.Attestation{CSR: third.Name, RequestSHA256: contract.RequestDigest(third.Spec.Request), SANs: genuine.SANs}
	rejected := thirdAtt
	rejected.Verdict, rejected.Reason = contract.VerdictReject, "10.0.41.1 is no longer on this node"
	value, err := contract.EncodeAttestation(rejected.Sign(a.name, a.key))
	if err != nil {
		t.Fatal(err)
	}
	a.patch(t, map[string]any{"metadata": map[string]any{"annotations": map[string]string{contract.AnnotationCSRAttestation: value}}}, "")
	approvedOnce := thirdAtt
	approvedOnce.Verdict = contract.VerdictApprove
	post(thief, approvedOnce.Sign(a.name, a.key), nil)
	waitFor(t, 10*time.Second, "by-event-rejected decided", func() bool { _, ok := condition(t, third.Name); return ok })
	if c, _ := condition(t, third.Name); c.Type != certificatesv1.CertificateDenied {
		t.Errorf("the agent's signed rejection on its Node, and a copied approval on an Event: %s (%s), want Denied", c.Type, c.Message)
	}
}

// An Event leaves the coordinator's watch when anyone who can name it
// changes its reason, as if deleted. The agent's approval, once seen,
// stays while its CSR is pending: what a node does to an Event after it
// was first seen neither replaces nor removes what the agent said. Here
// the CSR is held (the node's key is not enrolled yet) while the approval
// arrives and its Event is taken out of the watch, then the node reports.
func TestAttestationOutlivesItsEvent(t *testing.T) {
	startCoordinator(t, "by-event-gone", ipamSettings)
	c := register(t, "by-event-gone-c", "10.0.42.1")
	thief := register(t, "by-event-gone-d", "10.0.42.2")
	thief.publish(t, report{providerID: "talos://metal/" + thief.ip.String()})
	c.csr(t, "by-event-gone-csr", []string{c.name}, []string{c.ip.String()})
	created := c.approveByEvent(t, "by-event-gone-csr")
	time.Sleep(2 * time.Second)
	if cond, decided := condition(t, "by-event-gone-csr"); decided {
		t.Fatalf("decided before the node's key was enrolled: %+v", cond)
	}
	created.Reason = "Renamed"
	if _, err := thief.self.CoreV1().Events(created.Namespace).Update(t.Context(), created, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("another node changing the Event's reason: %v", err)
	}
	time.Sleep(2 * time.Second) // the coordinator's watch sees it go
	c.publish(t, report{providerID: "talos://metal/" + c.ip.String()})
	waitApproved(t, "by-event-gone-csr", 10*time.Second) // by the Event that left the watch
}

// An answer lost to the coordinator (an Event removed, or taken out of the
// watch before this replica started, or an agent down at the ask) is not
// the end: after the attestation timeout the coordinator asks once more,
// for this request, and the agent's answer to that approves. Here nothing
// answers the first ask.
func TestAsksAgainAfterTheTimeout(t *testing.T) {
	startCoordinator(t, "ask-again", ipamSettings) // attestationTimeout: 3s
	n := register(t, "ask-again-n", "10.0.42.5")
	n.publish(t, report{providerID: "talos://metal/" + n.ip.String()})
	n.csr(t, "ask-again-csr", []string{n.name}, []string{n.ip.String()})
	waitFor(t, 10*time.Second, "the review", func() bool {
		return get(t, n.name).Annotations[contract.AnnotationCSRReview] == "ask-again-csr"
	})
	csr, err := n.self.CertificatesV1().CertificateSigningRequests().Get(t.Context(), "ask-again-csr", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	again := contract.Review{CSR: csr.Name, RequestSHA256: contract.RequestDigest(csr.Spec.Request)}.String()
	waitFor(t, 10*time.Second, "the review asked again, for this request", func() bool {
		node := get(t, n.name)
		return node.Annotations[contract.AnnotationCSRReview] == again && node.Annotations[contract.AnnotationAttestBy] == contract.AttestByEventFor(again)
	})
	if evs := events(t, csr.Name, "AttestationTimeout"); len(evs) > 0 {
		t.Fatalf("timed out at the first ask: %s", evs[0].Message)
	}
	n.approveByEvent(t, csr.Name)
	waitApproved(t, csr.Name, 10*time.Second) // by the answer to the ask again
}

// approveByEvent plays the node's agent: it approves the CSR name, as it
// is now, with an Event, and returns the Event created.
func (n *simNode) approveByEvent(t *testing.T, name string) *corev1.Event {
	t.Helper()
	csr, err := n.self.CertificatesV1().CertificateSigningRequests().Get(t.Context(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	parsed, err := csrcheck.Parse(csr.Spec.Request)
	if err != nil {
		t.Fatal(err)
	}
	att := contract.Attestation{CSR: csr.Name, RequestSHA256: contract.RequestDigest(csr.Spec.Request), Verdict: contract.VerdictApprove, SANs: contract.RequestSANs(parsed)}
	ev, err := contract.AttestationEvent(n.name, csr.Name, csr.UID, att.Sign(n.name, n.key), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	created, err := n.self.CoreV1().Events(ev.Namespace).Create(t.Context(), ev, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return created
}

// The ask again is the last ask: a timed-out CSR is never asked about a
// third time, even when its Node's review moved on to the kubelet's next
// CSR and that one timed out too (the two would take turns for good), and
// an attestation the coordinator ignores (unsigned, written with the
// kubelet's credential) neither keeps the CSR from asking again nor from
// timing out.
func TestAsksAgainOnlyOnce(t *testing.T) {
	startCoordinator(t, "ask-once", ipamSettings) // attestationTimeout: 3s
	n := register(t, "ask-once-n", "10.0.42.7")
	n.publish(t, report{providerID: "talos://metal/" + n.ip.String()})
	timedOut := func(csr string) {
		t.Helper()
		waitFor(t, 20*time.Second, csr+" timed out", func() bool { return len(events(t, csr, "AttestationTimeout")) > 0 })
		if len(events(t, csr, "AttestationAskedAgain")) == 0 {
			t.Errorf("%s timed out without asking again", csr)
		}
	}
	n.csr(t, "ask-once-a", []string{n.name}, []string{n.ip.String()})
	timedOut("ask-once-a")
	n.csr(t, "ask-once-b", []string{n.name}, []string{n.ip.String()})
	waitFor(t, 10*time.Second, "the review of the next CSR", func() bool {
		r, _ := contract.ParseReview(get(t, n.name).Annotations[contract.AnnotationCSRReview])
		return r.CSR == "ask-once-b"
	})
	// An unsigned attestation of b's request on the Node: ignored.
	b, err := n.self.CertificatesV1().CertificateSigningRequests().Get(t.Context(), "ask-once-b", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	unsigned, err := contract.EncodeAttestation(contract.Attestation{CSR: b.Name, RequestSHA256: contract.RequestDigest(b.Spec.Request), Verdict: contract.VerdictApprove})
	if err != nil {
		t.Fatal(err)
	}
	n.patch(t, map[string]any{"metadata": map[string]any{"annotations": map[string]string{contract.AnnotationCSRAttestation: unsigned}}}, "")
	timedOut("ask-once-b")
	deadline := time.Now().Add(8 * time.Second) // beyond two more timeouts
	for time.Now().Before(deadline) {
		if r, _ := contract.ParseReview(get(t, n.name).Annotations[contract.AnnotationCSRReview]); r.CSR != "ask-once-b" {
			t.Fatalf("after both timed out, the review went on to %q", r.CSR)
		}
		time.Sleep(200 * time.Millisecond)
	}
	for _, csr := range []string{"ask-once-a", "ask-once-b"} {
		if c, decided := condition(t, csr); decided {
			t.Errorf("%s decided: %+v", csr, c)
		}
	}
}

// TestUnsignedAttestationAsksNothing: an attestation on the Node that the
// enrolled key did not sign changes no ask. One of another request under
// the CSR's name, unsigned or signed with another key, leaves the review
// in its plain form (an ask by digest restarts the attestation clock and
// makes the next timeout final); the agent's own signed one of another
// request asks by digest.
func TestUnsignedAttestationAsksNothing(t *testing.T) {
	startCoordinator(t, "unsigned-ask", strings.Replace(ipamSettings, "attestationTimeout: 3s", "attestationTimeout: 60s", 1))
	n := register(t, "unsigned-ask-n", "10.0.42.9")
	n.publish(t, report{providerID: "talos://metal/" + n.ip.String()})
	n.csr(t, "unsigned-ask-a", []string{n.name}, []string{n.ip.String()})
	review := func() contract.Review {
		r, _ := contract.ParseReview(get(t, n.name).Annotations[contract.AnnotationCSRReview])
		return r
	}
	waitFor(t, 10*time.Second, "the review of the CSR", func() bool { return review().CSR == "unsigned-ask-a" })
	csr, err := n.self.CertificatesV1().CertificateSigningRequests().Get(t.Context(), "unsigned-ask-a", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	parsed, err := csrcheck.Parse(csr.Spec.Request)
	if err != nil {
		t.Fatal(err)
	}
	earlier := contract.Attestation{CSR: csr.Name, RequestSHA256: contract.RequestDigest([]byte("an earlier request")), Verdict: contract.VerdictApprove, SANs: contract.RequestSANs(parsed)}
	_, otherKey, _ := ed25519.GenerateKey(rand.Reader)
	for _, forged := range []struct {
		name string
		att  contract.Attestation
	}{
		{"unsigned", earlier},
		{"signed with another key", earlier.Sign(n.name, otherKey)},
	} {
		v, err := contract.EncodeAttestation(forged.att)
		if err != nil {
			t.Fatal(err)
		}
		n.patch(t, map[string]any{"metadata": map[string]any{"annotations": map[string]string{contract.AnnotationCSRAttestation: v}}}, "")
		deadline := time.Now().Add(2 * time.Second)
		for time.Now().Before(deadline) {
			if r := review(); r.CSR != csr.Name || r.RequestSHA256 != "" {
				t.Fatalf("%s attestation of another request: the review became %q", forged.name, r)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	// The agent's own, of the earlier request: asked again by digest.
	n.attest(t, csr.Name, earlier.RequestSHA256)
	waitFor(t, 10*time.Second, "the ask by digest", func() bool {
		r := review()
		return r.CSR == csr.Name && r.RequestSHA256 == contract.RequestDigest(csr.Spec.Request)
	})
}
