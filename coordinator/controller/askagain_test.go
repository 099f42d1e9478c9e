package controller_test

import (
	"crypto/ed25519"
	"crypto/rand"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/talos-nodeinit/talos-nodeinit/pkg/contract"
	"github.com/talos-nodeinit/talos-nodeinit/pkg/csrcheck"
)

// No answer within the attestation timeout (an agent down or slow at the
// ask) is not the end: the coordinator asks once more, for this request,
// and the agent's answer to that approves. Here nothing answers the first
// ask.
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
		return get(t, n.name).Annotations[contract.AnnotationCSRReview] == again
	})
	if evs := events(t, csr.Name, "AttestationTimeout"); len(evs) > 0 {
		t.Fatalf("timed out at the first ask: %s", evs[0].Message)
	}
	n.approveOnNode(t, csr.Name)
	waitApproved(t, csr.Name, 10*time.Second) // by the answer to the ask again
}

// approveOnNode plays the node's agent, or root on the node holding its
// key: it approves the CSR name, as it is now, on its Node, whatever the
// review names.
func (n *simNode) approveOnNode(t *testing.T, name string) {
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
	v, err := contract.EncodeAttestation(att.Sign(n.name, n.key))
	if err != nil {
		t.Fatal(err)
	}
	n.patch(t, map[string]any{"metadata": map[string]any{"annotations": map[string]string{contract.AnnotationCSRAttestation: v}}}, "")
}

// The ask again is the last ask: a timed-out CSR is never asked about a
// third time, even when its Node's review moved on to the kubelet's next
// CSR and that one timed out too (the two would take turns for good), and
// an attestation the coordinator ignores (unsigned, written with the
// kubelet's credential) neither keeps the CSR from asking again nor from
// timing out.
func TestAsksAgainOnlyOnce(t *testing.T) {
	c := startCoordinator(t, "ask-once", ipamSettings) // attestationTimeout: 3s
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
	for range 2 { // beyond two more timeouts
		c.skip(4 * time.Second)
		c.lookedAgain(t, n.name)
		if r, _ := contract.ParseReview(get(t, n.name).Annotations[contract.AnnotationCSRReview]); r.CSR != "ask-once-b" {
			t.Fatalf("after both timed out, the review went on to %q", r.CSR)
		}
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
	c := startCoordinator(t, "unsigned-ask", strings.Replace(ipamSettings, "attestationTimeout: 3s", "attestationTimeout: 60s", 1))
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
		c.syncedNow(t, n.name)
		if r := review(); r.CSR != csr.Name || r.RequestSHA256 != "" {
			t.Fatalf("%s attestation of another request: the review became %q", forged.name, r)
		}
	}
	// The agent's own, of the earlier request: asked again by digest.
	n.attest(t, csr.Name, earlier.RequestSHA256)
	waitFor(t, 10*time.Second, "the ask by digest", func() bool {
		r := review()
		return r.CSR == csr.Name && r.RequestSHA256 == contract.RequestDigest(csr.Spec.Request)
	})
}
