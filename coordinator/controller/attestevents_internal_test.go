package controller

import (
	"crypto/ed25519"
	"crypto/rand"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/talos-nodeinit/talos-nodeinit/pkg/contract"
)

// The API server checks neither field of a core/v1 Event's involved
// object, and any node may create Events: the coordinator keeps of each
// only a CSR's valid name, and an attestation only when small.
func TestTrimEventKeepsLittleOfWhatNodesWrite(t *testing.T) {
	huge := strings.Repeat("x", 1<<20)
	for name, ev := range map[string]*corev1.Event{
		"a 1 MiB object name": {InvolvedObject: corev1.ObjectReference{Kind: "CertificateSigningRequest", Name: huge}},
		"a 1 MiB kind":        {InvolvedObject: corev1.ObjectReference{Kind: huge, Name: "csr-a"}},
		"a 1 MiB annotation":  {InvolvedObject: corev1.ObjectReference{Kind: "CertificateSigningRequest", Name: "csr-a"}, ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{contract.AnnotationCSRAttestation: huge}}},
		"a 1 MiB other field": {InvolvedObject: corev1.ObjectReference{Kind: "CertificateSigningRequest", Name: "csr-a", FieldPath: huge}, Message: huge},
	} {
		out := trimEvent(ev)
		if size := len(out.InvolvedObject.Name) + len(out.InvolvedObject.Kind) + len(out.InvolvedObject.FieldPath) + len(out.Message) + len(out.Annotations[contract.AnnotationCSRAttestation]); size > 1024 {
			t.Errorf("%s: the stub keeps %d bytes of it", name, size)
		}
	}
}

// An entry outlives its Event while the CSR it is about is pending, and
// only then: an Event that leaves the watch (deleted, or its reason
// changed by anyone who can name it) removes nothing the agent said from
// a pending CSR, and nothing stays behind once the CSR is settled, or
// when there is no pending CSR of that name (a flood of Events about
// names that do not exist keeps nothing).
func TestAttestationEntriesOutliveTheirEventWhilePending(t *testing.T) {
	pub, key, _ := ed25519.GenerateKey(rand.Reader)
	pendingCSRs := map[string]bool{}
	e := &attestEvents{ignored: func() {}, pending: func(csr string) bool { return pendingCSRs[csr] },
		entries: map[types.UID]*eventEntry{}, byCSR: map[string]map[types.UID]*eventEntry{}}
	request := []byte("request")
	sans := []string{"n1"}
	post := func(csr string, uid types.UID) {
		t.Helper()
		a := contract.Attestation{CSR: csr, RequestSHA256: contract.RequestDigest(request), Verdict: contract.VerdictApprove, SANs: sans}
		ev, err := contract.AttestationEvent("n1", csr, "uid-"+types.UID(csr), a.Sign("n1", key), time.Now())
		if err != nil {
			t.Fatal(err)
		}
		ev.UID = uid
		e.seen(trimEvent(ev), func(string) {})
	}
	approves := func(csr string) bool { return e.approval(csr, request, "n1", pub, sans) != nil }

	for _, order := range []string{"leave, settle", "settle, leave", "leave, return, settle, leave", "leave twice, settle"} {
		t.Run(order, func(t *testing.T) {
			csr := "csr-" + strings.ReplaceAll(order, ", ", "-")
			csr = strings.ReplaceAll(csr, " ", "-")
			pendingCSRs[csr] = true
			post(csr, types.UID(csr+"-ev"))
			if !approves(csr) {
				t.Fatal("the genuine approval does not approve")
			}
			for _, step := range strings.Split(order, ", ") {
				switch step {
				case "leave":
					e.left(types.UID(csr + "-ev"))
				case "leave twice":
					e.left(types.UID(csr + "-ev"))
					e.left(types.UID(csr + "-ev"))
				case "return":
					post(csr, types.UID(csr+"-ev"))
				case "settle":
					pendingCSRs[csr] = false
					e.settled(csr)
				}
				if pendingCSRs[csr] && !approves(csr) {
					t.Fatalf("after %q the pending CSR lost its approval", step)
				}
			}
			if len(e.entries) != 0 || len(e.byCSR) != 0 {
				t.Fatalf("%d entries (%d CSRs) kept once the CSR is settled and its Event gone", len(e.entries), len(e.byCSR))
			}
		})
	}

	// Events about CSRs that are not pending go as they leave.
	for i := range 100 {
		csr := fmt.Sprintf("csr-none-%d", i)
		post(csr, types.UID(csr))
		e.left(types.UID(csr))
	}
	if len(e.entries) != 0 || len(e.byCSR) != 0 {
		t.Fatalf("%d entries kept for Events about CSRs that are not pending", len(e.entries))
	}
}
