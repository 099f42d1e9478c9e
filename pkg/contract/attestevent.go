package contract

import (
	"errors"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// An agent approves a serving CSR with an Event on the CSR instead of a
// patch of its Node, when the coordinator says it reads them
// (AnnotationAttestBy, AttestByEventFor): an Event is a small object that only the
// coordinator watches, where every Node patch reaches every watcher of
// Nodes. Anyone may create Events, so an Event is only a carrier: the
// attestation inside is signed by the agent key and bound to the CSR's
// name and request, and the coordinator uses one only when it verifies
// and approves exactly that request. Rejections stay on the Node, which
// only the node (and admins) can write, so no Event can get a CSR denied.

// EventReasonAttested is the reason of an agent's attestation Event, which
// the coordinator's watch selects on.
const EventReasonAttested = "NodeinitAttested"

// EventSource is the component an agent's attestation Event names.
const EventSource = "nodeinit-agent"

// maxEventNameBytes bounds an Event's name: the CSR's (at most 253) would
// leave no room for the suffix, so a long one is cut.
const maxEventNameBytes = 253

// AttestationEvent is the Event by which node's agent approves the CSR
// csr (uid) with a, in namespace default as for any cluster-scoped object.
// Its name is unique (the CSR's and the time, as client-go's recorder
// names Events) so no one can take it first.
func AttestationEvent(node, csr string, uid types.UID, a Attestation, now time.Time) (*corev1.Event, error) {
	if a.Verdict != VerdictApprove || a.CSR != csr {
		return nil, fmt.Errorf("an attestation Event carries an approval of %s, not %s of %s", csr, a.Verdict, a.CSR)
	}
	encoded, err := EncodeAttestation(a)
	if err != nil {
		return nil, err
	}
	suffix := fmt.Sprintf(".%x", now.UnixNano())
	name := csr
	if len(name)+len(suffix) > maxEventNameBytes {
		name = strings.TrimRight(name[:maxEventNameBytes-len(suffix)], ".-")
	}
	t := metav1.NewTime(now)
	return &corev1.Event{
		ObjectMeta: metav1.ObjectMeta{Name: name + suffix, Namespace: metav1.NamespaceDefault,
			Annotations: map[string]string{AnnotationCSRAttestation: encoded}},
		InvolvedObject: corev1.ObjectReference{Kind: "CertificateSigningRequest", APIVersion: "certificates.k8s.io/v1", Name: csr, UID: uid},
		Reason:         EventReasonAttested,
		Message:        fmt.Sprintf("the agent on node %s attests that every SAN of this request is the node's own (signed, in annotation %s)", node, AnnotationCSRAttestation),
		Type:           corev1.EventTypeNormal,
		Source:         corev1.EventSource{Component: EventSource, Host: node},
		FirstTimestamp: t, LastTimestamp: t, Count: 1,
	}, nil
}

// ErrNotAnAttestation is returned by EventAttestation for an Event that
// carries no approval of the CSR it is about.
var ErrNotAnAttestation = errors.New("not an attestation Event")

// EventAttestation reads the approval an attestation Event carries. It
// checks the form only (an approval, of the CSR the Event is about); the
// signature is the reader's to verify, with the enrolled key.
func EventAttestation(ev *corev1.Event) (Attestation, error) {
	if ev.Reason != EventReasonAttested || ev.InvolvedObject.Kind != "CertificateSigningRequest" {
		return Attestation{}, ErrNotAnAttestation
	}
	a, err := DecodeAttestation(ev.Annotations[AnnotationCSRAttestation])
	if err != nil {
		return Attestation{}, err
	}
	if a.Verdict != VerdictApprove || a.CSR != ev.InvolvedObject.Name {
		return Attestation{}, fmt.Errorf("%w: %s of %s on an Event about %s", ErrNotAnAttestation, a.Verdict, NodeText(a.CSR), NodeText(ev.InvolvedObject.Name))
	}
	return a, nil
}
