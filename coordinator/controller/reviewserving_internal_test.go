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
	"k8s.io/utils/clock"

	"github.com/talos-nodeinit/talos-nodeinit/coordinator/approval"
	"github.com/talos-nodeinit/talos-nodeinit/coordinator/config"
	"github.com/talos-nodeinit/talos-nodeinit/pkg/contract"
	"github.com/talos-nodeinit/talos-nodeinit/pkg/csrcheck/csrtest"
)

// reviewCoordinator is a Coordinator with just what review() reads: its
// hand-offs and a CSR cache over store.
func reviewCoordinator(t *testing.T) (*Coordinator, cache.Indexer) {
	t.Helper()
	settings, err := config.Parse([]byte("{}"))
	if err != nil {
		t.Fatal(err)
	}
	store := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	c := &Coordinator{
		notes: newCSRNotes(), settings: settings, clock: clock.RealClock{},
		ownCSRs: cache.NewIntegerResourceVersionMutationCacheWithOptions(klog.Background(), store, cache.MutationCacheOptions{TTL: time.Minute}),
	}
	return c, store
}

// A Node's record names, at its initialization, only a CSR its own kubelet
// made: when the CSR its review hand-off names is, by the time of the sync,
// another node's (deleted and made again under the name by another
// identity, before the delete reached the hand-off), the record names no
// certificate rather than the other node's SANs.
func TestRecordNamesOnlyTheNodesOwnCSR(t *testing.T) {
	c, store := reviewCoordinator(t)
	csrOf := func(name, requester string) *certificatesv1.CertificateSigningRequest {
		return &certificatesv1.CertificateSigningRequest{
			ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID(name + "-" + requester), ResourceVersion: "1"},
			Spec: certificatesv1.CertificateSigningRequestSpec{Username: "system:node:" + requester, SignerName: certificatesv1.KubeletServingSignerName,
				Request: csrtest.PEM(t, nil, requester, []string{requester}, "10.0.0.9")},
		}
	}
	uninitialized := func(name string) *corev1.Node {
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.NodeSpec{Taints: []corev1.Taint{{Key: contract.TaintUninitialized, Value: "true", Effect: corev1.TaintEffectNoSchedule}}}}
	}
	wants := []approval.Want{{CSR: "x", Created: time.Now(), Review: true}}

	if err := store.Add(csrOf("x", "a")); err != nil {
		t.Fatal(err)
	}
	if r := c.review(uninitialized("a"), wants); r.Serving == nil || r.Serving.CSR != "x" {
		t.Fatalf("the Node's own CSR under review: the record names %+v, want x", r.Serving)
	}
	if err := store.Update(csrOf("x", "b")); err != nil {
		t.Fatal(err)
	}
	if r := c.review(uninitialized("a"), wants); r.Serving != nil {
		t.Errorf("the record of Node a names %+v, a CSR Node b made under the name", r.Serving)
	}
}
