package controller

import (
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/clock"

	"github.com/talos-nodeinit/talos-nodeinit/coordinator/records"
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
	// Written as the coordinator writes records, so the field path
	// noteServing reads is the record's own.
	written := func(serving *records.Serving) *unstructured.Unstructured {
		u, err := (&records.Record{Name: "n1", Spec: records.Spec{NodeUID: "u", Serving: serving}}).ToUnstructured()
		if err != nil {
			t.Fatal(err)
		}
		return u
	}
	future, past := time.Now().Add(time.Hour).UTC().Truncate(time.Second), time.Now().Add(-time.Hour).UTC().Truncate(time.Second)
	for _, tc := range []struct {
		name string
		obj  any
		want bool
	}{
		{"valid certificate", written(&records.Serving{CSR: "c", SANs: []string{"dns:n1"}, ValidUntil: future}), true},
		{"no certificate", written(nil), false},
		{"expired certificate", written(&records.Serving{CSR: "c", SANs: []string{"dns:n1"}, ValidUntil: past}), false},
		{"date that does not parse", rec(map[string]any{"csr": "c", "validUntil": "soon"}), false},
		{"date of the wrong type", rec(map[string]any{"csr": "c", "validUntil": 42}), false},
		{"no spec", &unstructured.Unstructured{Object: map[string]any{}}, false},
		{"not a record", "n1", false},
	} {
		c := &Coordinator{clock: clock.RealClock{}}
		c.noteServing(tc.obj)
		if got := c.servingCSRs.Load(); got != tc.want {
			t.Errorf("%s: wait on %v, want %v", tc.name, got, tc.want)
		}
	}
}
