package controller_test

import (
	"net/netip"
	"strings"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/talos-nodeinit/talos-nodeinit/pkg/contract"
	"github.com/talos-nodeinit/talos-nodeinit/pkg/csrcheck"
)

// TestHostnameSquatting: a node (squat-m) that lists another node's name,
// and a name the admin's "{node}" pattern gives that node, as its own
// Hostnames holds nothing. The names come from the victim's identity, so
// the victim's CSR is approved, and the squatter's own CSR for them is
// denied, even where a "*" pattern would allow it the name. The squatter joins first, as an attacker would.
func TestHostnameSquatting(t *testing.T) {
	// "*.nodes.example.com" would allow any node the victim's
	// "{node}.nodes.example.com" name, were it not the victim's by identity.
	startCoordinator(t, "squat", ipamSettings+"  allowedDNSNames: [\"{node}.nodes.example.com\", \"*.nodes.example.com\"]\n")
	m := register(t, "squat-m", "10.0.12.2")
	m.publish(t, report{providerID: "talos://metal/10.0.12.2"})
	waitFor(t, 10*time.Second, "squat-m initialized", func() bool { return initialized(get(t, "squat-m")) })
	m.patch(t, map[string]any{"status": map[string]any{"addresses": []corev1.NodeAddress{
		{Type: corev1.NodeInternalIP, Address: "10.0.12.2"},
		{Type: corev1.NodeHostName, Address: "squat-m"},
		{Type: corev1.NodeHostName, Address: "squat-v"},
		{Type: corev1.NodeHostName, Address: "squat-v.nodes.example.com"},
	}}}, "status")

	v := register(t, "squat-v", "10.0.12.1")
	v.publish(t, report{providerID: "talos://metal/10.0.12.1"})
	waitFor(t, 10*time.Second, "squat-v initialized", func() bool { return initialized(get(t, "squat-v")) })
	// One request with both names: a second one with other names would be
	// held by the renewal rule.
	dns := []string{"squat-v", "squat-v.nodes.example.com"}
	v.csr(t, "squat-v-serving", dns, []string{"10.0.12.1"})
	waitFor(t, 15*time.Second, "squat-v-serving under review or held", func() bool {
		return get(t, "squat-v").Annotations[contract.AnnotationCSRReview] == "squat-v-serving" ||
			len(events(t, "squat-v-serving", "NameClaimedByOtherNode")) > 0
	})
	if e := events(t, "squat-v-serving", "NameClaimedByOtherNode"); len(e) > 0 {
		t.Fatalf("the victim's CSR is held by the squatter's Hostname: %s", e[0].Message)
	}
	v.attestNames(t, "squat-v-serving", dns)
	waitFor(t, 10*time.Second, "squat-v-serving decided", func() bool { _, ok := condition(t, "squat-v-serving"); return ok })
	if cond, _ := condition(t, "squat-v-serving"); cond.Type != certificatesv1.CertificateApproved {
		t.Fatalf("the victim's CSR: %s %q, want Approved", cond.Type, cond.Message)
	}

	// The squatter's own requests for the victim's names are refused.
	for _, c := range []struct {
		csr, name string
	}{
		{"squat-m-name", "squat-v"},
		{"squat-m-pattern", "squat-v.nodes.example.com"}, // through "*.nodes.example.com"
	} {
		m.csr(t, c.csr, []string{"squat-m", c.name}, nil)
		waitFor(t, 10*time.Second, c.csr+" decided", func() bool { _, ok := condition(t, c.csr); return ok })
		if cond, _ := condition(t, c.csr); cond.Type != certificatesv1.CertificateDenied || !strings.Contains(cond.Message, c.name) {
			t.Errorf("%s: %s %q, want Denied naming %s", c.csr, cond.Type, cond.Message, c.name)
		}
	}
}

// attestNames plays the agent of a node whose names (Hostname, DNS
// addresses) include dns.
func (n *simNode) attestNames(t testing.TB, csrName string, dns []string) {
	t.Helper()
	waitFor(t, 10*time.Second, "review of "+csrName, func() bool {
		return get(t, n.name).Annotations[contract.AnnotationCSRReview] == csrName
	})
	csr, err := n.self.CertificatesV1().CertificateSigningRequests().Get(t.Context(), csrName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	att := csrcheck.Attest(csrcheck.FromCSR(csr), n.name, dns, []netip.Addr{n.ip})
	v, err := contract.EncodeAttestation(att.Sign(n.name, n.key))
	if err != nil {
		t.Fatal(err)
	}
	n.patch(t, map[string]any{"metadata": map[string]any{"annotations": map[string]string{contract.AnnotationCSRAttestation: v}}}, "")
}
