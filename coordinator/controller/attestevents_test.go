package controller_test

import (
	"crypto/ed25519"
	"crypto/rand"
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
	a.csr(t, "by-event-good", []string{"by-event-a"}, []string{"10.0.41.1"})
	waitFor(t, 10*time.Second, "review of by-event-good", func() bool {
		return get(t, "by-event-a").Annotations[contract.AnnotationCSRReview] == "by-event-good"
	})
	if got := get(t, "by-event-a").Annotations[contract.AnnotationAttestBy]; got != contract.AttestByEvent {
		t.Fatalf("the review says attest-by %q, want %q", got, contract.AttestByEvent)
	}
	csr, err := a.self.CertificatesV1().CertificateSigningRequests().Get(t.Context(), "by-event-good", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	parsed, err := csrcheck.Parse(csr.Spec.Request)
	if err != nil {
		t.Fatal(err)
	}
	genuine := contract.Attestation{CSR: csr.Name, RequestSHA256: contract.RequestDigest(csr.Spec.Request), Verdict: contract.VerdictApprove, SANs: contract.RequestSANs(parsed)}
	_, stranger, _ := ed25519.GenerateKey(rand.Reader)
	post := func(by *simNode, att contract.Attestation, mutate func(*corev1.Event)) {
		t.Helper()
		ev, err := contract.AttestationEvent(a.name, csr.Name, csr.UID, att, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		if mutate != nil {
			mutate(ev)
		}
		if _, err := by.self.CoreV1().Events(ev.Namespace).Create(t.Context(), ev, metav1.CreateOptions{}); err != nil {
			t.Fatalf("node %s creating an Event: %v", by.name, err)
		}
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
	post(thief, genuine.Sign(a.name, a.key), nil)
	waitFor(t, 10*time.Second, "approved by the Event", func() bool {
		c, _ := condition(t, csr.Name)
		return c.Type == certificatesv1.CertificateApproved
	})
	if _, ok := get(t, "by-event-a").Annotations[contract.AnnotationCSRAttestation]; ok {
		t.Error("the Node carries an attestation: the approval came by Event alone")
	}
}
