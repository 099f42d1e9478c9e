package controller_test

import (
	"context"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestNoCertificateForAServicesAddress: a Service's load-balancer address
// (MetalLB or kube-vip in layer-2 mode hand out addresses of the nodes'
// subnet) and its external IPs are the Service's: a Node that lists one,
// first or not, is not certified for it (clients that trust the cluster's
// CA would take such a certificate for the Service). It is held, never
// denied: a Service may name a Node's own address (a ServiceLB publishes
// node addresses; anyone who may create a Service may set external IPs),
// and an admin approves such a request by hand.
func TestNoCertificateForAServicesAddress(t *testing.T) {
	startCoordinatorAs(t, "serviceips", ipamSettings+"  attestationRequired: false\n", coordinatorIdentity(t))
	lbIP, externalIP := "10.0.5.98", "10.0.5.97"
	svc, err := admin().CoreV1().Services("default").Create(t.Context(), &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "vault-lb"},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, ExternalIPs: []string{externalIP},
			Ports: []corev1.ServicePort{{Port: 443}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = admin().CoreV1().Services("default").Delete(context.Background(), "vault-lb", metav1.DeleteOptions{})
	})
	svc.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: lbIP}}
	if _, err := admin().CoreV1().Services("default").UpdateStatus(t.Context(), svc, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}

	n := register(t, "svcip-a", "10.0.5.99")
	n.publish(t, report{providerID: "talos://metal/svcip-a", externalIPs: []string{lbIP, externalIP}})
	waitFor(t, 20*time.Second, "svcip-a initialized", func() bool { return initialized(get(t, "svcip-a")) })
	time.Sleep(1500 * time.Millisecond) // csr.minAddressAge
	for _, ip := range []string{lbIP, externalIP} {
		name := "svcip-a-" + ip
		n.csr(t, name, []string{"svcip-a"}, []string{"10.0.5.99", ip})
		eventSays(t, 20*time.Second, name, "AddressClaimedByOtherNode", "Service default/vault-lb")
		if cond, ok := condition(t, name); ok {
			t.Errorf("a certificate for Service vault-lb's address %s: %s %q, want it held", ip, cond.Type, cond.Message)
		}
	}
	// Its own address alone still passes; then a Service that names it
	// (external IPs anyone with Services may set) holds the node's
	// renewal, and never denies it.
	n.csr(t, "svcip-a-own", []string{"svcip-a"}, []string{"10.0.5.99"})
	waitFor(t, 20*time.Second, "svcip-a-own decided", func() bool { _, ok := condition(t, "svcip-a-own"); return ok })
	if cond, _ := condition(t, "svcip-a-own"); cond.Type != certificatesv1.CertificateApproved {
		t.Errorf("svcip-a's own address: %s %q", cond.Type, cond.Message)
	}
	if _, err := admin().CoreV1().Services("default").Create(t.Context(), &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "tenant-ext"},
		Spec:       corev1.ServiceSpec{ExternalIPs: []string{"10.0.5.99"}, Ports: []corev1.ServicePort{{Port: 80}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = admin().CoreV1().Services("default").Delete(context.Background(), "tenant-ext", metav1.DeleteOptions{})
	})
	time.Sleep(500 * time.Millisecond) // the coordinator's watch of Services
	n.csr(t, "svcip-a-own-2", []string{"svcip-a"}, []string{"10.0.5.99"})
	eventSays(t, 20*time.Second, "svcip-a-own-2", "AddressClaimedByOtherNode", "Service default/tenant-ext")
	if cond, ok := condition(t, "svcip-a-own-2"); ok {
		t.Errorf("svcip-a's own address named by a Service: %s %q, want it held", cond.Type, cond.Message)
	}
}
