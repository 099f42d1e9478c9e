package controller

import (
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// Only a record naming a serving certificate still valid turns the joins'
// wait on: not a record without one, one long expired (the kubelets may
// have stopped asking), one whose date does not parse, or what is not a
// record.
func TestRecordsTurnTheWaitOnOnlyForAValidCertificate(t *testing.T) {
	rec := func(serving map[string]any) *unstructured.Unstructured {
		spec := map[string]any{"nodeUID": "u"}
		if serving != nil {
			spec["serving"] = serving
		}
		return &unstructured.Unstructured{Object: map[string]any{"spec": spec}}
	}
	future := time.Now().Add(time.Hour).UTC().Format(time.RFC3339)
	past := time.Now().Add(-time.Hour).UTC().Format(time.RFC3339)
	for _, tc := range []struct {
		name string
		obj  any
		want bool
	}{
		{"valid certificate", rec(map[string]any{"csr": "c", "validUntil": future}), true},
		{"no certificate", rec(nil), false},
		{"expired certificate", rec(map[string]any{"csr": "c", "validUntil": past}), false},
		{"date that does not parse", rec(map[string]any{"csr": "c", "validUntil": "soon"}), false},
		{"date of the wrong type", rec(map[string]any{"csr": "c", "validUntil": 42}), false},
		{"no spec", &unstructured.Unstructured{Object: map[string]any{}}, false},
		{"not a record", "n1", false},
	} {
		c := &Coordinator{}
		c.noteServing(tc.obj)
		if got := c.servingCSRs.Load(); got != tc.want {
			t.Errorf("%s: wait on %v, want %v", tc.name, got, tc.want)
		}
	}
}
