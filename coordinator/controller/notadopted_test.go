package controller_test

import (
	"strings"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/talos-nodeinit/talos-nodeinit/coordinator/controller"
	"github.com/talos-nodeinit/talos-nodeinit/pkg/csrcheck/csrtest"
)

// A Node initialized before the coordinator kept records (a migration from
// Talos CCM) is left alone with adoptExisting off, and so is its kubelet's
// serving CSR. It must never wait in silence: the CSR carries an Event that
// says why and what to do (adopt, or approve by hand).
func TestNotAdoptedNodeCSRSaysWhy(t *testing.T) {
	const name = "legacy-csr"
	if _, err := admin().CoreV1().Nodes().Create(t.Context(), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name},
		Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "10.0.27.1"}}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	startCoordinator(t, "legacy", ipamSettings)
	id, err := cluster.NodeIdentity(name)
	if err != nil {
		t.Fatal(err)
	}
	self := kubernetes.NewForConfigOrDie(id.Config())
	if _, err := self.CertificatesV1().CertificateSigningRequests().Create(t.Context(), &certificatesv1.CertificateSigningRequest{
		ObjectMeta: metav1.ObjectMeta{Name: name + "-serving"},
		Spec: certificatesv1.CertificateSigningRequestSpec{Request: csrtest.PEM(t, nil, name, []string{name}, "10.0.27.1"), SignerName: certificatesv1.KubeletServingSignerName,
			Usages: []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageServerAuth}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 15*time.Second, "NodeNotAdopted Event on the CSR", func() bool { return len(events(t, name+"-serving", "NodeNotAdopted")) > 0 })
	msg := events(t, name+"-serving", "NodeNotAdopted")[0].Message
	if !strings.Contains(msg, "adoptExisting") || !strings.Contains(msg, "kubectl certificate approve "+name+"-serving") {
		t.Errorf("the Event does not say what to do: %q", msg)
	}
	if c, decided := condition(t, name+"-serving"); decided {
		t.Errorf("decided: %+v", c)
	}
}

// nodeinit_coordinator_nodes_not_adopted counts the Nodes left alone that still exist: a deleted
// one is no longer counted.
func TestADeletedNodeIsNoLongerCountedNotAdopted(t *testing.T) {
	const name = "legacy-deleted"
	if _, err := admin().CoreV1().Nodes().Create(t.Context(), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name},
		Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "10.0.27.2"}}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	c := startCoordinatorAs(t, "legacy-deleted", ipamSettings, coordinatorIdentity(t), func(c *controller.Config) { c.Metrics = controller.NewMetrics(reg) })
	waitFor(t, 15*time.Second, name+" synced", func() bool { return c.SyncedAt(name) != "" })
	counted := gauge(t, reg, "nodeinit_coordinator_nodes_not_adopted")
	if counted < 1 {
		t.Fatalf("nodes_not_adopted = %v with %s left alone", counted, name)
	}
	if err := admin().CoreV1().Nodes().Delete(t.Context(), name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 15*time.Second, name+"'s deletion synced", func() bool { return c.SyncedAt(name) == "" })
	if got := gauge(t, reg, "nodeinit_coordinator_nodes_not_adopted"); got != counted-1 {
		t.Errorf("nodes_not_adopted = %v after %s was deleted, want %v", got, name, counted-1)
	}
}
