package controller

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

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
