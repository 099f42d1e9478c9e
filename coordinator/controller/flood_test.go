package controller_test

import (
	"fmt"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/talos-nodeinit/talos-nodeinit/pkg/csrcheck/csrtest"
)

// TestFloodGuardCountsNodes: identities without a Node (what the bootstrap
// token mints for any name) file serving CSRs past csr.maxPending; they
// never count, so an honest node's CSR is still approved, and nothing says
// approval is paused.
func TestFloodGuardCountsNodes(t *testing.T) {
	// The guard counts every pending serving CSR in the cluster: those
	// earlier tests left pending (from Nodes) would pause it by themselves.
	if err := admin().CertificatesV1().CertificateSigningRequests().DeleteCollection(t.Context(), metav1.DeleteOptions{}, metav1.ListOptions{}); err != nil {
		t.Fatal(err)
	}
	startCoordinator(t, "flood-nodes", ipamSettings+"  maxPending: 2\n")
	for i := range 4 {
		name := fmt.Sprintf("ghost-%d", i)
		id, err := cluster.NodeIdentity(name)
		if err != nil {
			t.Fatal(err)
		}
		ghost := kubernetes.NewForConfigOrDie(id.Config())
		for j := range 2 {
			_, err := ghost.CertificatesV1().CertificateSigningRequests().Create(t.Context(), &certificatesv1.CertificateSigningRequest{
				ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-%d", name, j)},
				Spec: certificatesv1.CertificateSigningRequestSpec{
					Request: csrtest.PEM(t, nil, name, []string{name}), SignerName: certificatesv1.KubeletServingSignerName,
					Usages: []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageServerAuth},
				},
			}, metav1.CreateOptions{})
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	honest := register(t, "flood-honest", "10.0.11.1")
	honest.publish(t, report{providerID: "talos://metal/10.0.11.1"})
	honest.csr(t, "flood-honest-1", []string{"flood-honest"}, []string{"10.0.11.1"})
	honest.attest(t, "flood-honest-1", "")
	waitFor(t, 15*time.Second, "the honest CSR decided or paused", func() bool {
		c, _ := condition(t, "flood-honest-1")
		return c.Type == certificatesv1.CertificateApproved || len(events(t, "flood-honest-1", "ApprovalPaused")) > 0
	})
	if e := events(t, "flood-honest-1", "ApprovalPaused"); len(e) > 0 {
		t.Fatalf("approval was paused by identities without a Node: %s", e[0].Message)
	}
	for i := range 4 {
		if c, decided := condition(t, fmt.Sprintf("ghost-%d-0", i)); decided {
			t.Errorf("a CSR of an identity without a Node was decided: %+v", c)
		}
	}
}

// TestFloodNeverDelaysARenewal: Nodes minted with the bootstrap token file
// two serving CSRs each, past csr.maxPending. New Nodes' certificates wait
// (ApprovalPaused), but a certified Node's renewal with the names its
// record holds, attested by its enrolled key, goes on.
func TestFloodNeverDelaysARenewal(t *testing.T) {
	if err := admin().CertificatesV1().CertificateSigningRequests().DeleteCollection(t.Context(), metav1.DeleteOptions{}, metav1.ListOptions{}); err != nil {
		t.Fatal(err)
	}
	c := startCoordinator(t, "flood-renewal", ipamSettings+"  maxPending: 2\n")
	certified := register(t, "flood-certified", "10.0.11.20")
	certified.publish(t, report{providerID: "talos://metal/10.0.11.20"})
	waitFor(t, 20*time.Second, "flood-certified initialized", func() bool { return initialized(get(t, "flood-certified")) })
	c.settled()
	certified.csr(t, "flood-certified-1", []string{"flood-certified"}, []string{"10.0.11.20"})
	certified.attest(t, "flood-certified-1", "")
	waitFor(t, 20*time.Second, "flood-certified-1 approved", func() bool {
		c, _ := condition(t, "flood-certified-1")
		return c.Type == certificatesv1.CertificateApproved
	})
	for i := range 3 {
		name := fmt.Sprintf("flooder-%d", i)
		flooder := register(t, name, fmt.Sprintf("10.0.11.%d", 30+i))
		for j := range 2 {
			flooder.csr(t, fmt.Sprintf("%s-%d", name, j), []string{name}, []string{fmt.Sprintf("10.0.11.%d", 30+i)})
		}
	}
	late := register(t, "flood-new", "10.0.11.21")
	late.publish(t, report{providerID: "talos://metal/10.0.11.21"})
	waitFor(t, 20*time.Second, "flood-new initialized", func() bool { return initialized(get(t, "flood-new")) })
	c.settled()
	late.csr(t, "flood-new-1", []string{"flood-new"}, []string{"10.0.11.21"})
	waitFor(t, 20*time.Second, "flood-new-1 paused", func() bool { return len(events(t, "flood-new-1", "ApprovalPaused")) > 0 })
	certified.csr(t, "flood-certified-2", []string{"flood-certified"}, []string{"10.0.11.20"})
	certified.attest(t, "flood-certified-2", "")
	waitFor(t, 20*time.Second, "the renewal flood-certified-2 approved", func() bool {
		c, _ := condition(t, "flood-certified-2")
		return c.Type == certificatesv1.CertificateApproved
	})
}
