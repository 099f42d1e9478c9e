package controller_test

import (
	"slices"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/talos-nodeinit/talos-nodeinit/pkg/contract"
)

// A coordinator whose ClusterRole does not let it list Events yet (its
// image upgraded before its RBAC) works as before: it starts, becomes
// ready, initializes a node and approves its kubelet's CSR from the
// attestation on the Node, and asks for none by Event. A probe that
// listed Events would keep it waiting for the API server for good.
func TestWorksWithoutListingEvents(t *testing.T) {
	coordinatorIdentity(t) // the shipped roles exist
	shipped, err := admin().RbacV1().ClusterRoles().Get(t.Context(), "nodeinit-coordinator", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "nodeinit-no-event-list"}}
	for _, r := range shipped.Rules {
		if slices.Contains(r.Resources, "events") && slices.Contains(r.Verbs, "list") {
			continue
		}
		role.Rules = append(role.Rules, r)
	}
	if _, err := admin().RbacV1().ClusterRoles().Create(t.Context(), role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	cfg, err := cluster.ClientIdentity("nodeinit-no-event-list")
	if err != nil {
		t.Fatal(err)
	}
	// As the shipped coordinator's: a leader first releases the records
	// of the Nodes earlier tests deleted, hundreds of writes, which
	// client-go's default 5 QPS spreads over a minute.
	cfg.QPS, cfg.Burst = 1000, 2000
	subject := []rbacv1.Subject{{Kind: rbacv1.UserKind, Name: "nodeinit-no-event-list", APIGroup: rbacv1.GroupName}}
	if _, err := admin().RbacV1().ClusterRoleBindings().Create(t.Context(), &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "nodeinit-no-event-list"}, Subjects: subject,
		RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, ns := range []string{"kube-system", "default"} {
		if _, err := admin().RbacV1().RoleBindings(ns).Create(t.Context(), &rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: "nodeinit-no-event-list", Namespace: ns}, Subjects: subject,
			RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "nodeinit-coordinator"},
		}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	c := startCoordinatorAs(t, "no-event-list", ipamSettings, cfg)
	waitFor(t, 10*time.Second, "ready", func() bool { return c.Ready() == nil })
	n := register(t, "no-event-list", "10.0.64.1")
	n.publish(t, report{providerID: "talos://metal/10.0.64.1"})
	waitFor(t, 30*time.Second, n.name+" initialized", func() bool { return initialized(get(t, n.name)) })
	time.Sleep(time.Second) // csr.minAddressAge
	n.csr(t, n.name, []string{n.name}, []string{n.ip.String()})
	n.attest(t, n.name, "")
	if by := get(t, n.name).Annotations[contract.AnnotationAttestBy]; by != "" {
		t.Errorf("the review asks for an answer by Event (%q), which this coordinator cannot read", by)
	}
	waitApproved(t, n.name, 10*time.Second)
}
