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
	request := []byte("request")
	e := &attestEvents{ignored: func() {}, pending: func(csr string) ([]byte, bool) { return request, pendingCSRs[csr] },
		entries: map[types.UID]*eventEntry{}, byCSR: map[string]map[types.UID]*eventEntry{}, against: map[string]checkAgainst{}}
	sans := []string{"n1"}
	genuine := func(csr string) contract.Attestation {
		a := contract.Attestation{CSR: csr, RequestSHA256: contract.RequestDigest(request), Verdict: contract.VerdictApprove, SANs: sans}
		return a.Sign("n1", key)
	}
	postAtt := func(a contract.Attestation, uid types.UID) {
		t.Helper()
		ev, err := contract.AttestationEvent("n1", a.CSR, "uid-"+types.UID(a.CSR), a, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		ev.UID = uid
		e.seen(trimEvent(ev), func(string) {})
	}
	post := func(csr string, uid types.UID) { t.Helper(); postAtt(genuine(csr), uid) }
	left := func(uids ...types.UID) {
		for _, uid := range uids {
			e.left(uid)
		}
	}
	gone := func(csr string) (n int) {
		for _, en := range e.byCSR[csr] {
			if en.gone {
				n++
			}
		}
		return n
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

	// A pending CSR keeps only what could approve its request, once, and
	// never more than maxGonePerCSR: approvals of another request, copies
	// of one kept, re-encodings of its signature and forgeries past the
	// bound go as they leave; the verified approval is never the one
	// dropped, whether it was checked before it left (with a live copy
	// left behind) or only as it left.
	flood := func(t *testing.T, csr string, checkDuring bool) {
		t.Helper()
		other := genuine(csr)
		other.RequestSHA256 = contract.RequestDigest([]byte("another request"))
		postAtt(other.Sign("n1", key), types.UID(csr+"-other-request"))
		left(types.UID(csr + "-other-request"))
		for i := range 50 {
			uid := types.UID(fmt.Sprintf("%s-copy-%d", csr, i))
			post(csr, uid)
			left(uid)
			reencoded := genuine(csr)
			reencoded.Signature = reencoded.Signature[:i%80] + "\n" + reencoded.Signature[i%80:]
			uid = types.UID(fmt.Sprintf("%s-reencoded-%d", csr, i))
			postAtt(reencoded, uid)
			left(uid)
			forged := genuine(csr)
			forged.Signature = contract.Attestation{}.Sign(fmt.Sprintf("forger-%d", i), key).Signature
			uid = types.UID(fmt.Sprintf("%s-forged-%d", csr, i))
			postAtt(forged, uid)
			if checkDuring && i%2 == 0 {
				approves(csr) // checks the forgeries seen so far
			}
			left(uid)
		}
		if n := gone(csr); n > maxGonePerCSR {
			t.Errorf("a pending CSR keeps %d entries of Events that left the watch, more than %d", n, maxGonePerCSR)
		}
		if e.entries[types.UID(csr+"-other-request")] != nil {
			t.Error("an approval of another request stayed after its Event left")
		}
		for i := range 50 {
			if e.entries[types.UID(fmt.Sprintf("%s-copy-%d", csr, i))] != nil {
				t.Errorf("copy %d of the kept approval stayed after its Event left", i)
			}
		}
		if !approves(csr) {
			t.Error("the verified approval was dropped among forgeries")
		}
		pendingCSRs[csr] = false
		e.settled(csr)
		if len(e.entries) != 0 || len(e.against) != 0 {
			t.Errorf("%d entries kept once the flooded CSR is settled", len(e.entries))
		}
	}
	t.Run("checked, with a live copy", func(t *testing.T) {
		csr := "csr-flooded"
		pendingCSRs[csr] = true
		post(csr, "genuine")
		if !approves(csr) { // checks it: verified
			t.Fatal("the genuine approval does not approve")
		}
		post(csr, "live-copy") // not checked: the genuine one approved first
		left("genuine")
		left("live-copy")
		flood(t, csr, true)
	})
	t.Run("failed under an earlier key, then re-enrolled", func(t *testing.T) {
		csr := "csr-reenrolled"
		pendingCSRs[csr] = true
		oldPub, _, _ := ed25519.GenerateKey(rand.Reader)
		post(csr, "before-reenrol")
		if e.approval(csr, request, "n1", oldPub, sans) != nil { // fails: signed with the key enrolled next
			t.Fatal("approved under a key that did not sign it")
		}
		left("before-reenrol")
		if !approves(csr) { // the key enrolled now: the entry kept is checked again, and verifies
			t.Fatal("the genuine approval, failed under the earlier key, does not approve under the enrolled one")
		}
		post(csr, "copy-after-reenrol")
		left("copy-after-reenrol") // a copy of the one kept: dropped
		if e.entries["copy-after-reenrol"] != nil || e.entries["before-reenrol"] == nil || !e.entries["before-reenrol"].ok {
			t.Fatal("after the re-enrolment, the copy stayed or the verified entry did not")
		}
		flood(t, csr, false)
	})
	t.Run("left before checked", func(t *testing.T) {
		csr := "csr-unchecked"
		pendingCSRs[csr] = true
		approves(csr) // the CSR was looked at with its key enrolled, before any Event
		post(csr, "genuine-unchecked")
		left("genuine-unchecked")
		flood(t, csr, false)
	})
}

// An Event checked by approval and, at the same time, as it leaves the
// watch is counted once as ignored.
func TestIgnoredEventCountedOnce(t *testing.T) {
	pub, _, _ := ed25519.GenerateKey(rand.Reader)
	e, ignored, request := forgedEventSeen(t)
	calls := 0
	e.verify = func(a contract.Attestation, csr string, request []byte, node string, key ed25519.PublicKey, sans []string) error {
		calls++
		if calls == 1 {
			e.left("ev-1") // the Event leaves while approval checks it, outside the lock
		}
		return fmt.Errorf("not signed by the enrolled key")
	}
	if a := e.approval("csr-x", request, "n1", pub, []string{"n1"}); a != nil {
		t.Fatal("a forged Event approves")
	}
	if calls != 2 || *ignored != 1 {
		t.Errorf("checked %d times, counted %d times as ignored; want 2 checks (approval, left) counted once", calls, *ignored)
	}
}

// An Event is counted as ignored once, however often it is checked and
// against what: by approval against one key, then another (a key enrolled
// again), and as it leaves the watch; a malformed one however often it
// changes.
func TestIgnoredEventCountedOncePerEvent(t *testing.T) {
	keyA, _, _ := ed25519.GenerateKey(rand.Reader)
	keyB, _, _ := ed25519.GenerateKey(rand.Reader)
	e, ignored, request := forgedEventSeen(t)
	e.verify = func(contract.Attestation, string, []byte, string, ed25519.PublicKey, []string) error {
		return fmt.Errorf("not signed by the enrolled key")
	}
	for _, key := range []ed25519.PublicKey{keyA, keyB, keyA} {
		if a := e.approval("csr-x", request, "n1", key, []string{"n1"}); a != nil {
			t.Fatal("a forged Event approves")
		}
	}
	e.left("ev-1")
	if *ignored != 1 {
		t.Errorf("a forged Event checked against two keys and as it left: counted %d times as ignored, want 1", *ignored)
	}
	malformed := &corev1.Event{ObjectMeta: metav1.ObjectMeta{Name: "m", UID: "ev-2"}, Reason: contract.EventReasonAttested,
		InvolvedObject: corev1.ObjectReference{Kind: "CertificateSigningRequest", Name: "csr-x"}}
	for range 3 {
		e.seen(trimEvent(malformed), func(string) {}) // created, then changed twice
	}
	if *ignored != 2 {
		t.Errorf("a malformed Event seen three times: counted %d times as ignored in all, want 2", *ignored)
	}
	e.left("ev-2")
	e.seen(trimEvent(malformed), func(string) {}) // back in the watch: counted again
	if *ignored != 3 {
		t.Errorf("a malformed Event back in the watch: counted %d times as ignored in all, want 3", *ignored)
	}
}

// forgedEventSeen is attestEvents whose CSR csr-x is pending, having seen
// Event ev-1: an approval of its request signed by a key no node
// enrolled. ignored counts what it counts as ignored.
func forgedEventSeen(t *testing.T) (e *attestEvents, ignored *int, request []byte) {
	t.Helper()
	_, other, _ := ed25519.GenerateKey(rand.Reader)
	request, ignored = []byte("request"), new(int)
	e = &attestEvents{ignored: func() { *ignored++ }, pending: func(string) ([]byte, bool) { return request, true },
		entries: map[types.UID]*eventEntry{}, byCSR: map[string]map[types.UID]*eventEntry{}, against: map[string]checkAgainst{}}
	forged := contract.Attestation{CSR: "csr-x", RequestSHA256: contract.RequestDigest(request), Verdict: contract.VerdictApprove, SANs: []string{"n1"}}.Sign("n1", other)
	ev, err := contract.AttestationEvent("n1", "csr-x", "uid-x", forged, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	ev.UID = "ev-1"
	e.seen(trimEvent(ev), func(string) {})
	return e, ignored, request
}
