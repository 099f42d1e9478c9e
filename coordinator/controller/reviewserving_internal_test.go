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

	"github.com/talos-nodeinit/talos-nodeinit/coordinator/approval"
	"github.com/talos-nodeinit/talos-nodeinit/coordinator/config"
	"github.com/talos-nodeinit/talos-nodeinit/pkg/contract"
	"github.com/talos-nodeinit/talos-nodeinit/pkg/csrcheck"
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
		reviews: newReviews(), settings: settings, requests: &requests{parsed: map[types.UID]csrcheck.Request{}},
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
	c.reviews.set("a", approval.Want{CSR: "x", Created: time.Now(), Review: true})

	if err := store.Add(csrOf("x", "a")); err != nil {
		t.Fatal(err)
	}
	if r := c.review(uninitialized("a")); r.Serving == nil || r.Serving.CSR != "x" {
		t.Fatalf("the Node's own CSR under review: the record names %+v, want x", r.Serving)
	}
	if err := store.Update(csrOf("x", "b")); err != nil {
		t.Fatal(err)
	}
	if r := c.review(uninitialized("a")); r.Serving != nil {
		t.Errorf("the record of Node a names %+v, a CSR Node b made under the name", r.Serving)
	}
}

// A replica that has just started (or led) has synced some of a node's
// CSRs and not others. The CSR the Node's review names, still pending and
// this node's, keeps the review until this replica's own decision about it
// says otherwise: a Node sync that runs first does not move the review back
// to an older CSR the kubelet has left.
func TestReviewStaysWithAPendingCSRNotYetSynced(t *testing.T) {
	c, store := reviewCoordinator(t)
	now := time.Now()
	csrOf := func(name, requester string, created time.Time) *certificatesv1.CertificateSigningRequest {
		return &certificatesv1.CertificateSigningRequest{
			ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID(name), ResourceVersion: "1", CreationTimestamp: metav1.NewTime(created)},
			Spec: certificatesv1.CertificateSigningRequestSpec{Username: "system:node:" + requester, SignerName: certificatesv1.KubeletServingSignerName,
				Request: csrtest.PEM(t, nil, requester, []string{requester}, "10.0.0.9")},
		}
	}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "a", Annotations: map[string]string{contract.AnnotationCSRReview: "newer"}}}
	for _, csr := range []*certificatesv1.CertificateSigningRequest{csrOf("older", "a", now.Add(-time.Hour)), csrOf("newer", "a", now)} {
		if err := store.Add(csr); err != nil {
			t.Fatal(err)
		}
	}
	c.reviews.set("a", approval.Want{CSR: "older", Created: now.Add(-time.Hour), Review: true}) // synced; "newer" not yet
	if r := c.review(node); r.Ask.CSR != "newer" {
		t.Errorf("the review went to %q before the CSR under review was synced, want it kept on newer", r.Ask.CSR)
	}
	// Its own decision then says it no longer wants it: the hand-off
	// applies (here: no newer CSR, so the annotation is left alone).
	c.reviews.set("a", approval.Want{CSR: "newer", Created: now, Review: false})
	if r := c.review(node); r.Ask.CSR != "" {
		t.Errorf("after the CSR under review gave it up, the review went to %q, want none (only a newer CSR may take it)", r.Ask.CSR)
	}
	// A review naming another node's CSR, or one decided, is no hold.
	if err := store.Update(csrOf("newer", "b", now)); err != nil {
		t.Fatal(err)
	}
	c.reviews = newReviews()
	c.reviews.set("a", approval.Want{CSR: "older", Created: now.Add(-time.Hour), Review: true})
	if r := c.review(node); r.Ask.CSR != "older" {
		t.Errorf("a review naming another node's CSR held the review: got %q, want older", r.Ask.CSR)
	}
}
