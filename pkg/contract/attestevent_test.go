package contract

import (
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/validation"
)

// An attestation Event carries one approval of the CSR it is about, under
// a name no one can take first, and reads back as the same attestation.
// Anything else on an Event is not an attestation.
func TestAttestationEvent(t *testing.T) {
	_, key, _ := ed25519.GenerateKey(rand.Reader)
	now := time.Date(2026, 11, 27, 0, 0, 0, 0, time.UTC)
	a := Attestation{CSR: "csr-abc", RequestSHA256: strings.Repeat("ab", 32), Verdict: VerdictApprove, SANs: []string{"dns:n1", "ip:10.0.0.1"}}.Sign("n1", key)
	ev, err := AttestationEvent("n1", "csr-abc", "uid-1", a, now)
	if err != nil {
		t.Fatal(err)
	}
	if ev.Namespace != "default" || ev.InvolvedObject.Name != "csr-abc" || ev.InvolvedObject.UID != "uid-1" || ev.Reason != EventReasonAttested || ev.Source.Host != "n1" {
		t.Errorf("event %+v: want one in default about csr-abc (uid-1), reason %s, from n1", ev, EventReasonAttested)
	}
	if !strings.HasPrefix(ev.Name, "csr-abc.") {
		t.Errorf("name %q: want the CSR's and a unique suffix", ev.Name)
	}
	later, _ := AttestationEvent("n1", "csr-abc", "uid-1", a, now.Add(time.Nanosecond))
	if later.Name == ev.Name {
		t.Errorf("two Events named alike: %s", ev.Name)
	}
	got, err := EventAttestation(ev)
	if err != nil {
		t.Fatal(err)
	}
	if got.Signature != a.Signature || got.CSR != a.CSR || got.RequestSHA256 != a.RequestSHA256 {
		t.Errorf("read back %+v, want %+v", got, a)
	}

	long := strings.Repeat("c", 231) + strings.Repeat(".c", 11) // cut where a dot would end it
	la := a
	la.CSR = long
	lev, err := AttestationEvent("n1", long, "", la, now)
	if err != nil {
		t.Fatal(err)
	}
	if errs := validation.NameIsDNSSubdomain(lev.Name, false); len(errs) > 0 {
		t.Errorf("an Event about a CSR with a 253-byte name is named %q: %v", lev.Name, errs)
	}

	reject := a
	reject.Verdict = VerdictReject
	if _, err := AttestationEvent("n1", "csr-abc", "", reject, now); err == nil {
		t.Error("an Event made for a rejection: only approvals travel by Event")
	}
	if _, err := AttestationEvent("n1", "csr-other", "", a, now); err == nil {
		t.Error("an Event about csr-other made for an attestation of csr-abc")
	}

	for name, mutate := range map[string]func(*corev1.Event){
		"another reason":              func(e *corev1.Event) { e.Reason = "Attested" },
		"about a Node":                func(e *corev1.Event) { e.InvolvedObject.Kind = "Node" },
		"about another CSR":           func(e *corev1.Event) { e.InvolvedObject.Name = "csr-other" },
		"no annotation":               func(e *corev1.Event) { e.Annotations = nil },
		"an unreadable annotation":    func(e *corev1.Event) { e.Annotations[AnnotationCSRAttestation] = "{" },
		"a rejection written by hand": func(e *corev1.Event) { e.Annotations[AnnotationCSRAttestation] = mustEncode(t, reject) },
		"an oversized annotation": func(e *corev1.Event) {
			e.Annotations[AnnotationCSRAttestation] = strings.Repeat(" ", MaxPayloadBytes+1)
		},
	} {
		e, _ := AttestationEvent("n1", "csr-abc", "", a, now)
		mutate(e)
		if _, err := EventAttestation(e); err == nil {
			t.Errorf("%s: read as an attestation", name)
		} else if name == "another reason" && !errors.Is(err, ErrNotAnAttestation) {
			t.Errorf("%s: %v, want ErrNotAnAttestation", name, err)
		}
	}
}

// The hint names the review it goes with: an ask written without it (by a
// coordinator that does not read Events) leaves the last one stale.
func TestAttestByEventFor(t *testing.T) {
	if AttestByEventFor("csr-a") == AttestByEventFor("csr-b") || AttestByEventFor("csr-a") == AttestByEventFor("csr-a/"+strings.Repeat("0", 64)) {
		t.Error("the hint does not tell reviews apart")
	}
}

func mustEncode(t *testing.T, a Attestation) string {
	t.Helper()
	s, err := EncodeAttestation(a)
	if err != nil {
		t.Fatal(err)
	}
	return s
}
