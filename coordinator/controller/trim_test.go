package controller

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The Node cache holds what decisions read, not the kubelet's image list
// (up to 50 entries per Node by default) or managed fields.
func TestTrimNode(t *testing.T) {
	n := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "n", Labels: map[string]string{"a": "b"}, Annotations: map[string]string{"c": "d"},
			ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubelet"}}},
		Spec: corev1.NodeSpec{PodCIDRs: []string{"10.244.0.0/24"}, Taints: []corev1.Taint{{Key: "k", Effect: corev1.TaintEffectNoSchedule}}},
		Status: corev1.NodeStatus{
			Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "10.0.0.1"}},
			Images:    []corev1.ContainerImage{{Names: []string{"registry.k8s.io/pause:3.10"}, SizeBytes: 1}},
		},
	}
	trimNode(n)
	if n.ManagedFields != nil || n.Status.Images != nil {
		t.Errorf("kept managed fields %v or images %v", n.ManagedFields, n.Status.Images)
	}
	if n.Labels["a"] != "b" || n.Annotations["c"] != "d" || len(n.Spec.PodCIDRs) != 1 || len(n.Spec.Taints) != 1 || len(n.Status.Addresses) != 1 {
		t.Errorf("trimmed what decisions read: %+v", n)
	}
}
