package controller

import (
	"crypto/ed25519"
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

// attestEvents are the agents' attestation Events (contract.AttestationEvent),
// as the coordinator's watch of reason NodeinitAttested sees them, kept as
// little as a decision reads and indexed by the CSR each is about. Anyone
// can create Events, so each one is verified at most once per enrolled key:
// a forged Event costs one signature check, never one per sync.
type attestEvents struct {
	factory informers.SharedInformerFactory
	index   cache.Indexer
	ignored func() // counts an Event that carries nothing usable

	mu      sync.Mutex
	checked map[types.UID]checked
}

type checked struct {
	key string // the enrolled key it was checked against
	ok  bool
}

const byCSR = "byCSR"

func newAttestEvents(client kubernetes.Interface, changed func(csr string), ignored func()) (*attestEvents, error) {
	e := &attestEvents{ignored: ignored, checked: map[types.UID]checked{}}
	e.factory = informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithTweakListOptions(func(o *metav1.ListOptions) {
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
		AddFunc:    func(obj any) { e.added(obj, changed) },
		UpdateFunc: func(_, obj any) { e.added(obj, changed) },
		DeleteFunc: func(obj any) {
			if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			if ev, ok := obj.(*corev1.Event); ok {
				e.mu.Lock()
				delete(e.checked, ev.UID)
				e.mu.Unlock()
			}
		},
	})
	return e, err
}

// trimEvent keeps what a decision reads; an oversized attestation stays
// too large to decode.
func trimEvent(ev *corev1.Event) *corev1.Event {
	value := ev.Annotations[contract.AnnotationCSRAttestation]
	if len(value) > contract.MaxPayloadBytes {
		value = value[:contract.MaxPayloadBytes+1]
	}
	return &corev1.Event{
		ObjectMeta: metav1.ObjectMeta{Name: ev.Name, Namespace: ev.Namespace, UID: ev.UID, ResourceVersion: ev.ResourceVersion,
			Annotations: map[string]string{contract.AnnotationCSRAttestation: value}},
		InvolvedObject: corev1.ObjectReference{Kind: ev.InvolvedObject.Kind, Name: ev.InvolvedObject.Name},
		Reason:         ev.Reason,
	}
}

// added hands a new attestation Event's CSR to its reconciler.
func (e *attestEvents) added(obj any, changed func(csr string)) {
	ev, ok := obj.(*corev1.Event)
	if !ok {
		return
	}
	if _, err := contract.EventAttestation(ev); err != nil {
		e.ignored()
		return
	}
	changed(ev.InvolvedObject.Name)
}

// approval is the attestation of an Event that may stand for the node's
// agent's approval of csr (approval.EventApproves), nil when none may.
func (e *attestEvents) approval(csr string, request []byte, node string, enrolled ed25519.PublicKey, sans []string) *contract.Attestation {
	if e == nil || enrolled == nil {
		return nil
	}
	objs, _ := e.index.ByIndex(byCSR, csr)
	for _, o := range objs {
		ev, ok := o.(*corev1.Event)
		if !ok {
			continue
		}
		a, err := contract.EventAttestation(ev)
		if err != nil || !a.About(csr, request) {
			continue // read for free: not this request's
		}
		if e.verified(ev.UID, enrolled, func() bool { return approval.EventApproves(a, csr, request, node, enrolled, sans) == nil }) {
			return &a
		}
	}
	return nil
}

// verified runs check once per Event and enrolled key.
func (e *attestEvents) verified(uid types.UID, enrolled ed25519.PublicKey, check func() bool) bool {
	key := string(enrolled)
	e.mu.Lock()
	c, seen := e.checked[uid]
	e.mu.Unlock()
	if seen && c.key == key {
		return c.ok
	}
	ok := check()
	if !ok {
		e.ignored()
	}
	e.mu.Lock()
	e.checked[uid] = checked{key: key, ok: ok}
	e.mu.Unlock()
	return ok
}

// digests are the requests the attestation Events about csr approve, for
// asking the agent again when none is of the request now under the name.
func (e *attestEvents) digests(csr string) []string {
	if e == nil {
		return nil
	}
	objs, _ := e.index.ByIndex(byCSR, csr)
	var out []string
	for _, o := range objs {
		if ev, ok := o.(*corev1.Event); ok {
			if a, err := contract.EventAttestation(ev); err == nil {
				out = append(out, a.RequestSHA256)
			}
		}
	}
	return out
}
