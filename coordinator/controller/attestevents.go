package controller

import (
	"crypto/ed25519"
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
// stub of each (no annotation), and each Event's attestation is read once
// per version, small or not at all (maxEventAttestationBytes), and verified
// once per version and enrolled key: a forged Event costs one signature
// check, never one per sync, and what it said before an update counts for
// nothing after it.
type attestEvents struct {
	factory informers.SharedInformerFactory
	index   cache.Indexer
	ignored func() // counts an Event that carries nothing usable

	mu      sync.Mutex
	entries map[types.UID]*eventEntry
}

// eventEntry is one version of one Event's attestation.
type eventEntry struct {
	rv  string
	att contract.Attestation // an approval of the CSR the Event is about
	// checked is what the attestation was verified against (node, key,
	// SANs), ok the result.
	checked string
	ok      bool
}

// maxEventAttestationBytes bounds what an Event's attestation may take,
// read back without its reason: a real one is under 1 KiB.
const maxEventAttestationBytes = 4 << 10

const byCSR = "byCSR"

func newAttestEvents(client kubernetes.Interface, changed func(csr string), ignored func()) (*attestEvents, error) {
	e := &attestEvents{ignored: ignored, entries: map[types.UID]*eventEntry{}}
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
	if err := inf.AddIndexers(cache.Indexers{byCSR: func(obj any) ([]string, error) {
		if ev, ok := obj.(*corev1.Event); ok && ev.InvolvedObject.Kind == "CertificateSigningRequest" {
			return []string{ev.InvolvedObject.Name}, nil
		}
		return nil, nil
	}}); err != nil {
		return nil, err
	}
	e.index = inf.GetIndexer()
	_, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { e.seen(obj, changed) },
		UpdateFunc: func(_, obj any) { e.seen(obj, changed) },
		DeleteFunc: func(obj any) {
			if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			if ev, ok := obj.(*corev1.Event); ok {
				e.mu.Lock()
				delete(e.entries, ev.UID)
				e.mu.Unlock()
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
		ObjectMeta:     metav1.ObjectMeta{Name: ev.Name, Namespace: ev.Namespace, UID: ev.UID, ResourceVersion: ev.ResourceVersion},
		InvolvedObject: corev1.ObjectReference{Kind: ev.InvolvedObject.Kind, Name: ev.InvolvedObject.Name},
		Reason:         ev.Reason,
	}
	if a, err := contract.EventAttestation(ev); err == nil {
		a.Reason = ""
		if v, err := contract.EncodeAttestation(a); err == nil && len(v) <= maxEventAttestationBytes {
			out.Annotations = map[string]string{contract.AnnotationCSRAttestation: v}
		}
	}
	return out
}

// seen reads a new version of an Event once, and hands its CSR to its
// reconciler.
func (e *attestEvents) seen(obj any, changed func(csr string)) {
	ev, ok := obj.(*corev1.Event)
	if !ok {
		return
	}
	a, err := contract.EventAttestation(ev)
	e.mu.Lock()
	if err != nil {
		delete(e.entries, ev.UID)
	} else {
		e.entries[ev.UID] = &eventEntry{rv: ev.ResourceVersion, att: a}
	}
	e.mu.Unlock()
	if err != nil {
		e.ignored()
		return
	}
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
	against := node + "\x00" + string(enrolled) + "\x00" + strings.Join(sans, "\x00")
	for _, en := range e.about(csr) {
		if !en.att.About(csr, request) {
			continue
		}
		e.mu.Lock()
		if en.checked != against {
			en.checked, en.ok = against, approval.EventApproves(en.att, csr, request, node, enrolled, sans) == nil
			if !en.ok {
				defer e.ignored()
			}
		}
		ok, a := en.ok, en.att
		e.mu.Unlock()
		if ok {
			return &a
		}
	}
	return nil
}

// about are the entries of the Events about csr, as the informer has them now.
func (e *attestEvents) about(csr string) []*eventEntry {
	if e == nil {
		return nil
	}
	objs, _ := e.index.ByIndex(byCSR, csr)
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []*eventEntry
	for _, o := range objs {
		if ev, ok := o.(*corev1.Event); ok {
			if en := e.entries[ev.UID]; en != nil && en.rv == ev.ResourceVersion {
				out = append(out, en)
			}
		}
	}
	return out
}

// digests are the requests under the name csr that the node's agent
// approved by Event, as verified by a decision (forged Events never
// count), for asking it again when none is of the request now there.
func (e *attestEvents) digests(csr string) []string {
	var out []string
	for _, en := range e.about(csr) {
		e.mu.Lock()
		if en.ok {
			out = append(out, en.att.RequestSHA256)
		}
		e.mu.Unlock()
	}
	return out
}
