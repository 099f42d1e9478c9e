package controller_test

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"encoding/pem"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/talos-nodeinit/talos-nodeinit/pkg/csrcheck/csrtest"
	certificatesv1 "k8s.io/api/certificates/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Hostile serving CSRs submitted through a node identity to a running
// coordinator: the API server refuses what is not a CSR at all; everything
// else is denied with a reason and an Event. Nothing is approved, nothing
// stalls, and the coordinator stays ready.
func TestHostileCSRs(t *testing.T) {
	c := startCoordinator(t, "hostile-csr", ipamSettings)
	n := register(t, "csr-victim", "10.0.10.1")
	n.publish(t, report{providerID: "talos://metal/10.0.10.1"})
	other := register(t, "csr-other", "10.0.10.2")
	other.publish(t, report{providerID: "talos://metal/10.0.10.2"})

	request := func(key crypto.Signer, dns []string, ips ...string) []byte {
		return csrtest.PEM(t, key, "csr-victim", dns, ips...)
	}
	p256, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	rsa1024, _ := rsa.GenerateKey(rand.Reader, 1024)
	_, ed, _ := ed25519.GenerateKey(rand.Reader)
	many := make([]string, 10000)
	for i := range many {
		many[i] = fmt.Sprintf("csr-victim-%d", i)
	}
	huge := int32(10 * 365 * 24 * 3600)

	for _, tc := range []struct {
		name       string
		pem        []byte
		expiration *int32
		refused    bool // by the API server itself
		reason     string
	}{
		{name: "garbage-pem", pem: []byte("-----BEGIN CERTIFICATE REQUEST-----\nnot base64\n-----END CERTIFICATE REQUEST-----\n"), refused: true},
		{name: "wrong-block-type", pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: []byte{1, 2, 3}}), refused: true},
		{name: "ten-thousand-sans", pem: request(p256, many), reason: "limit"},
		{name: "ip-only-own", pem: request(p256, nil, "10.0.10.1"), reason: "DNS"},
		{name: "other-nodes-ip", pem: request(p256, []string{"csr-victim"}, "10.0.10.2"), reason: "10.0.10.2"},
		{name: "other-nodes-name", pem: request(p256, []string{"csr-victim", "csr-other"}), reason: "csr-other"},
		{name: "idna", pem: request(p256, []string{"csr-victim", "xn--csr-victm-ttb"}), reason: "xn--"},
		{name: "unicode", pem: request(p256, []string{"csr-victım"}), refused: true},
		{name: "trailing-dot", pem: request(p256, []string{"csr-victim."}), reason: "csr-victim."},
		{name: "upper-case-kubernetes", pem: request(p256, []string{"csr-victim", "KUBERNETES.DEFAULT"}), reason: "KUBERNETES"},
		{name: "wildcard", pem: request(p256, []string{"*.csr-victim"}), reason: "wildcard"},
		{name: "rsa-1024", pem: request(rsa1024, []string{"csr-victim"}), reason: "RSA"},
		{name: "ed25519", pem: request(ed, []string{"csr-victim"}), reason: "key"},
		{name: "huge-expiration", pem: request(p256, []string{"csr-victim"}), expiration: &huge, reason: "duration"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			name := "hostile-" + tc.name
			_, err := n.self.CertificatesV1().CertificateSigningRequests().Create(t.Context(), &certificatesv1.CertificateSigningRequest{
				ObjectMeta: metav1.ObjectMeta{Name: name},
				Spec: certificatesv1.CertificateSigningRequestSpec{
					Request: tc.pem, SignerName: certificatesv1.KubeletServingSignerName, ExpirationSeconds: tc.expiration,
					Usages: []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageServerAuth},
				},
			}, metav1.CreateOptions{})
			if tc.refused {
				if err == nil {
					t.Fatal("the API server accepted it; the coordinator must then deny it")
				}
				return
			}
			if err != nil {
				t.Fatalf("create: %v", err)
			}
			waitFor(t, 10*time.Second, "decision", func() bool { _, ok := condition(t, name); return ok })
			cond, _ := condition(t, name)
			if cond.Type != certificatesv1.CertificateDenied || !strings.Contains(cond.Message, tc.reason) {
				t.Errorf("%s %q, want Denied naming %q", cond.Type, cond.Message, tc.reason)
			}
			waitFor(t, 5*time.Second, "Denied Event", func() bool { return len(events(t, name, "NodeinitDenied")) > 0 })
			if err := c.Ready(); err != nil {
				t.Errorf("coordinator not ready: %v", err)
			}
		})
	}
}
