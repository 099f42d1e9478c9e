package controller

import (
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
)

// Only a CSR made since the Node's creation is its kubelet's asking: a
// CSR of an earlier Node object under the name does not end the join's
// wait (csr.initWait), pending or decided.
func TestAskedSinceTheNodesCreation(t *testing.T) {
	created := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	store := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{byNode: func(obj any) ([]string, error) {
		return []string{obj.(*certificatesv1.CertificateSigningRequest).Spec.Username}, nil
	}})
	c := &Coordinator{ownCSRs: cache.NewIntegerResourceVersionMutationCacheWithOptions(klog.Background(), store,
		cache.MutationCacheOptions{Indexer: store, TTL: time.Minute})}
	add := func(name, node string, at time.Time) {
		t.Helper()
		if err := store.Add(&certificatesv1.CertificateSigningRequest{ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID(name), ResourceVersion: "1", CreationTimestamp: metav1.NewTime(at)},
			Spec: certificatesv1.CertificateSigningRequestSpec{Username: node}}); err != nil {
			t.Fatal(err)
		}
	}
	node := func(name string) *corev1.Node {
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, CreationTimestamp: metav1.NewTime(created)}}
	}
	add("old", "n1", created.Add(-time.Minute))
	add("other", "n2", created.Add(time.Second))
	if c.kubeletAsked(node("n1")) {
		t.Error("a CSR of an earlier Node object ended the wait")
	}
	add("same-second", "n1", created)
	if !c.kubeletAsked(node("n1")) {
		t.Error("a CSR made in the Node's creation second (timestamps are whole seconds) did not end the wait")
	}
	if !c.kubeletAsked(node("n2")) {
		t.Error("n2's CSR, made after its creation, did not end its wait")
	}
}
