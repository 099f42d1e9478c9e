package records

import (
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// The NodeRecord cache keeps no managed fields: one entry per record, all
// of the coordinator's, which no read needs.
func TestTrimDropsManagedFields(t *testing.T) {
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": GVR.Group + "/" + GVR.Version, "kind": "NodeRecord",
		"metadata": map[string]any{"name": "n", "resourceVersion": "7", "managedFields": []any{map[string]any{"manager": "nodeinit-coordinator"}}},
		"spec":     map[string]any{"nodeUID": "u"},
	}}
	out, err := trim(u)
	if err != nil {
		t.Fatal(err)
	}
	got := out.(*unstructured.Unstructured)
	if got.GetManagedFields() != nil {
		t.Errorf("managed fields kept: %v", got.GetManagedFields())
	}
	if got.GetResourceVersion() != "7" || got.Object["spec"].(map[string]any)["nodeUID"] != "u" {
		t.Errorf("trimmed more than managed fields: %v", got.Object)
	}
	if out, err := trim("not a record"); err != nil || out != "not a record" {
		t.Errorf("another object: %v, %v", out, err)
	}
}
