package testcluster_test

import (
	"slices"
	"testing"

	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// A node identity from the harness authenticates as the kubelet's does:
// user system:node:<name> in group system:nodes. Every NodeRestriction
// claim the tests make rests on this.
func TestNodeIdentityIsAKubelet(t *testing.T) {
	id, err := cluster.NodeIdentity("selfreview-1")
	if err != nil {
		t.Fatal(err)
	}
	review, err := kubernetes.NewForConfigOrDie(id.Config()).AuthenticationV1().SelfSubjectReviews().Create(t.Context(), &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if u := review.Status.UserInfo; u.Username != "system:node:selfreview-1" || !slices.Contains(u.Groups, "system:nodes") {
		t.Fatalf("node identity authenticates as %q in %v; want system:node:selfreview-1 in system:nodes", u.Username, u.Groups)
	}
}
