package controller

import (
	"crypto/ed25519"
	"slices"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/talos-nodeinit/talos-nodeinit/coordinator/approval"
	"github.com/talos-nodeinit/talos-nodeinit/pkg/contract"
)

// attestEvents are the agents' attestation Events (contract.AttestationEvent)
// in namespace default, as the coordinator's watch of reason NodeinitAttested
// sees them. Anyone can create and change Events, so the informer keeps a
// stub of each, and each Event's attestation is read once, as first seen,
// small or not at all (maxEventAttestationBytes), and verified once per
// node, key and SANs: a forged Event costs one signature check, never one
// per sync, and a later change to an Event is never read. An approval of
// a pending CSR's request stays after its Event leaves the watch (deleted,
// or its reason changed by anyone who can name it), until the CSR is
// settled (left): within this process's life, what a node does to an
// Event once seen can neither replace nor remove it.
type attestEvents struct {
	factory informers.SharedInformerFactory
	ignored func() // counts an Event that carries nothing usable
	// pending is the request of the CSR of that name, when it exists,
	// undecided.
	pending func(csr string) (request []byte, ok bool)

	mu      sync.Mutex
	entries map[types.UID]*eventEntry
	byCSR   map[string]map[types.UID]*eventEntry // by the CSR each was about when first seen
	// against is what each pending CSR's approval was last looked for
	// with (approval): an entry leaving the watch unchecked is checked
	// with it, so the one that verifies is known before any is dropped.
	against map[string]checkAgainst
	// malformed are the Events in the watch that carry no attestation:
	// each is counted as ignored once, not on every change.
	malformed map[types.UID]bool
	// verify is approval.EventApproves (nil); a test puts a leave between
	// a check and its result.
	verify func(a contract.Attestation, csr string, request []byte, node string, key ed25519.PublicKey, sans []string) error
}

func (e *attestEvents) approves(a contract.Attestation, csr string, request []byte, node string, key ed25519.PublicKey, sans []string) error {
	if e.verify != nil {
		return e.verify(a, csr, request, node, key, sans)
	}
	return approval.EventApproves(a, csr, request, node, key, sans)
}

// checkAgainst is what an Event's approval of a CSR is verified against:
// the requesting node, its enrolled key, the request and its SANs.
type checkAgainst struct {
	node    string
	key     ed25519.PublicKey
	request []byte
	digest  string // of request
	sans    []string
}

func (c checkAgainst) String() string {
	return c.node + "\x00" + string(c.key) + "\x00" + c.digest + "\x00" + strings.Join(c.sans, "\x00")
}

// eventEntry is one Event's attestation, as first seen.
type eventEntry struct {
	att contract.Attestation // an approval of the CSR the Event is about
	// checked is what the attestation was verified against (node, key,
	// SANs), ok the result; signedBy and signed the same for its own SANs
	// (for asking again, of any request under the name).
	checked, signedBy string
	ok, signed        bool
	// gone: the Event left the watch while its CSR was pending; the entry
	// goes when the CSR is decided or deleted (settled).
	gone bool
	// counted: a check failed and the Event was counted as ignored, once
	// whatever it is checked against later.
	counted bool
}

// maxEventAttestationBytes bounds what an Event's attestation may take,
// read back without its reason: a real one is under 1 KiB.
const maxEventAttestationBytes = 4 << 10

func newAttestEvents(client kubernetes.Interface, pending func(csr string) ([]byte, bool), changed func(csr string), ignored func()) (*attestEvents, error) {
	e := &attestEvents{ignored: ignored, pending: pending, entries: map[types.UID]*eventEntry{}, byCSR: map[string]map[types.UID]*eventEntry{}, against: map[string]checkAgainst{}}
	e.factory = informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithNamespace(metav1.NamespaceDefault),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("reason", contract.EventReasonAttested).String()
		}))
	inf := e.factory.Core().V1().Events().Informer()
	_ = inf.SetTransform(func(obj any) (any, error) {
		if ev, ok := obj.(*corev1.Event); ok {
			return trimEvent(ev), nil
		}
		return obj, nil
	})
	_, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { e.seen(obj, changed) },
		UpdateFunc: func(_, obj any) { e.seen(obj, changed) },
		DeleteFunc: func(obj any) {
			if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			if ev, ok := obj.(*corev1.Event); ok {
				e.left(ev.UID)
			}
		},
	})
	return e, err
}

// trimEvent keeps what a decision reads: the Event's identity, the CSR it
// is about, and its attestation, read back without the reason when it is
// an approval of that CSR no larger than maxEventAttestationBytes (else
// none).
func trimEvent(ev *corev1.Event) *corev1.Event {
	out := &corev1.Event{
		ObjectMeta: metav1.ObjectMeta{Name: ev.Name, Namespace: ev.Namespace, UID: ev.UID, ResourceVersion: ev.ResourceVersion},
		Reason:     ev.Reason,
	}
	// The API server checks neither field of a core/v1 Event's object:
	// only a CSR's valid name is kept, or the stub would keep what any
	// node wrote there.
	if ev.InvolvedObject.Kind != "CertificateSigningRequest" || contract.CheckReviewName(ev.InvolvedObject.Name) != nil {
		return out
	}
	out.InvolvedObject = corev1.ObjectReference{Kind: ev.InvolvedObject.Kind, Name: ev.InvolvedObject.Name}
	if a, err := contract.EventAttestation(ev); err == nil {
		a.Reason = ""
		if v, err := contract.EncodeAttestation(a); err == nil && len(v) <= maxEventAttestationBytes {
			out.Annotations = map[string]string{contract.AnnotationCSRAttestation: v}
		}
	}
	return out
}

// left is an Event leaving the watch. Its entry stays, gone, while its CSR
// is pending and it is about the request there now (no other entry can
// approve it) and no gone entry carries the same signed approval already;
// at most maxGonePerCSR stay per CSR. Else it goes now.
func (e *attestEvents) left(uid types.UID) {
	e.mu.Lock()
	defer e.mu.Unlock()
	delete(e.malformed, uid)
	en := e.entries[uid]
	if en == nil || en.gone {
		return
	}
	csr := en.att.CSR
	// pending reads the CSR informer under e.mu, so settled cannot run
	// between that read and the mark: keep it under the lock.
	request, pending := e.pending(csr)
	if !pending || !en.att.About(csr, request) {
		e.drop(uid, en)
		return
	}
	if c, ok := e.against[csr]; ok {
		e.check(en, c)
	}
	if kept := e.copyOf(uid, en); kept != nil {
		if c, ok := e.against[csr]; kept.checked == "" || ok && en.checked == c.String() {
			kept.checked, kept.ok = en.checked, en.ok // the same signed content, checked since
		}
		e.drop(uid, en)
		return
	}
	en.gone = true
	e.trimGone(csr)
}

// maxGonePerCSR bounds the entries a pending CSR keeps after their Events
// left the watch: as many as live Events about it would cost, and one
// genuine approval of its request is all it needs.
const maxGonePerCSR = 8

// copyOf is the gone entry about the same CSR that carries the same signed
// approval, nil when none: ed25519 signs one way, and Verify takes one
// encoding of a signature, so copies of a genuine one are equal. e.mu is
// held.
func (e *attestEvents) copyOf(uid types.UID, en *eventEntry) *eventEntry {
	for other, o := range e.byCSR[en.att.CSR] {
		if other != uid && o.gone && o.att.Signature == en.att.Signature && o.att.RequestSHA256 == en.att.RequestSHA256 && slices.Equal(o.att.SANs, en.att.SANs) {
			return o
		}
	}
	return nil
}

// trimGone drops gone entries about csr beyond maxGonePerCSR: those whose
// signature failed first, then unchecked ones; never one that verified.
// e.mu is held.
func (e *attestEvents) trimGone(csr string) {
	for {
		var n int
		var failed, unchecked types.UID
		for uid, en := range e.byCSR[csr] {
			if !en.gone {
				continue
			}
			n++
			switch {
			case en.checked != "" && !en.ok:
				failed = uid
			case en.checked == "":
				unchecked = uid
			}
		}
		victim := failed
		if victim == "" {
			victim = unchecked
		}
		if n <= maxGonePerCSR || victim == "" {
			return
		}
		e.drop(victim, e.entries[victim])
	}
}

// settled forgets, for a CSR decided or deleted, the entries of its Events
// that left the watch, and what its approval was looked for with.
func (e *attestEvents) settled(csr string) {
	if e == nil {
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	delete(e.against, csr)
	for uid, en := range e.byCSR[csr] {
		if en.gone {
			e.drop(uid, en)
		}
	}
}

// check verifies en against c once (approval.EventApproves) and says
// whether it stands; e.mu is held.
func (e *attestEvents) check(en *eventEntry, c checkAgainst) bool {
	if against := c.String(); en.checked != against {
		en.checked, en.ok = against, e.approves(en.att, en.att.CSR, c.request, c.node, c.key, c.sans) == nil
		e.countFailed(en)
	}
	return en.ok
}

// countFailed counts en as ignored when its last check failed, the first
// time one did; e.mu is held.
func (e *attestEvents) countFailed(en *eventEntry) {
	if !en.ok && !en.counted {
		en.counted = true
		e.ignored()
	}
}

// drop forgets an entry; e.mu is held.
func (e *attestEvents) drop(uid types.UID, en *eventEntry) {
	delete(e.byCSR[en.att.CSR], uid)
	if len(e.byCSR[en.att.CSR]) == 0 {
		delete(e.byCSR, en.att.CSR)
	}
	delete(e.entries, uid)
}

// seen reads an Event once, as it was first seen, and hands its CSR to its
// reconciler. An agent never changes its Events; anyone else may, so a
// later version is not read: it can neither replace what the agent said
// nor remove it.
func (e *attestEvents) seen(obj any, changed func(csr string)) {
	ev, ok := obj.(*corev1.Event)
	if !ok {
		return
	}
	e.mu.Lock()
	if en := e.entries[ev.UID]; en != nil {
		en.gone = false // back in the watch, as first seen
		e.mu.Unlock()
		return
	}
	e.mu.Unlock()
	a, err := contract.EventAttestation(ev)
	if err != nil {
		e.mu.Lock()
		counted := e.malformed[ev.UID]
		if e.malformed == nil {
			e.malformed = map[types.UID]bool{}
		}
		e.malformed[ev.UID] = true
		e.mu.Unlock()
		if !counted {
			e.ignored()
		}
		return
	}
	e.mu.Lock()
	if e.byCSR[a.CSR] == nil {
		e.byCSR[a.CSR] = map[types.UID]*eventEntry{}
	}
	en := &eventEntry{att: a}
	e.entries[ev.UID], e.byCSR[a.CSR][ev.UID] = en, en
	e.mu.Unlock()
	changed(ev.InvolvedObject.Name)
}

// synced says the watch has listed the Events (none without a watch): until then (the RBAC to
// list them not applied yet) the coordinator does not say it reads them.
func (e *attestEvents) synced() bool {
	return e != nil && e.factory.Core().V1().Events().Informer().HasSynced()
}

// approval is the attestation of an Event that may stand for the node's
// agent's approval of csr (approval.EventApproves), nil when none may.
func (e *attestEvents) approval(csr string, request []byte, node string, enrolled ed25519.PublicKey, sans []string) *contract.Attestation {
	if e == nil || enrolled == nil {
		return nil
	}
	c := checkAgainst{node: node, key: enrolled, request: request, digest: contract.RequestDigest(request), sans: sans}
	against := c.String()
	e.mu.Lock()
	if _, pending := e.pending(csr); pending {
		e.against[csr] = c
	}
	var about []*eventEntry
	for _, en := range e.byCSR[csr] {
		if en.att.About(csr, request) {
			about = append(about, en)
		}
	}
	e.mu.Unlock()
	// Here signatures are checked outside the lock: a node may create any
	// number of live Events about its own CSR, and the Events' handler
	// need not wait for them (left checks one, the leaving one, under it).
	for _, en := range about {
		e.mu.Lock()
		checked, ok := en.checked == against, en.ok
		e.mu.Unlock()
		if !checked {
			ok = e.approves(en.att, csr, request, node, enrolled, sans) == nil
			e.mu.Lock()
			// left may have checked it meanwhile.
			if en.checked != against {
				en.checked, en.ok = against, ok
				e.countFailed(en)
			}
			e.mu.Unlock()
		}
		if ok {
			a := en.att
			return &a
		}
	}
	return nil
}

// has says an Event was about csr when first seen.
func (e *attestEvents) has(csr string) bool {
	if e == nil {
		return false
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.byCSR[csr]) > 0
}

// about are the entries of the Events that were about csr when first seen.
func (e *attestEvents) about(csr string) []*eventEntry {
	if e == nil {
		return nil
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	out := make([]*eventEntry, 0, len(e.byCSR[csr]))
	for _, en := range e.byCSR[csr] {
		out = append(out, en)
	}
	return out
}

// digests are the requests under the name csr that node's agent approved
// by Event, signed with its enrolled key (forged Events never count), for
// asking it again when none is of the request now there.
func (e *attestEvents) digests(csr, node string, enrolled ed25519.PublicKey) []string {
	if enrolled == nil {
		return nil
	}
	by := node + "\x00" + string(enrolled)
	var out []string
	for _, en := range e.about(csr) {
		e.mu.Lock()
		if en.signedBy != by {
			en.signedBy, en.signed = by, en.att.Verify(node, enrolled, en.att.SANs) == nil
		}
		if en.signed {
			out = append(out, en.att.RequestSHA256)
		}
		e.mu.Unlock()
	}
	return out
}
