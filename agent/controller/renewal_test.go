package controller_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"log/slog"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/talos-nodeinit/talos-nodeinit/agent/controller"
	"github.com/talos-nodeinit/talos-nodeinit/pkg/contract"
	"github.com/talos-nodeinit/talos-nodeinit/pkg/harness/syncbuf"
)

// TestAttestsOnlyItsKubeletsRequests: the bootstrap token every Talos
// worker carries mints this node's kubelet identity for anyone, who can
// then ask for a serving certificate with the node's own names and a key of
// its own. The agent vouches for such a request only when its kubelet would
// be asking: its serving certificate (kubelet-server-current.pem) is in its
// renewal window, or names other SANs, or there is none. A request for the
// same names while the kubelet's certificate is fresh is rejected.
func TestAttestsOnlyItsKubeletsRequests(t *testing.T) {
	n := newNode(t, "renew-node", "10.0.0.20", metal("renew-node"))
	current := filepath.Join(t.TempDir(), "kubelet-server-current.pem")
	writeServingCert(t, current, time.Now().Add(-time.Hour), 365*24*time.Hour, "renew-node", "10.0.0.20")
	n.startAgent(t, "", func(c *controller.Config) { c.KubeletServingCert = current })
	n.waitNode(t, 20*time.Second, "join", func(node *corev1.Node) bool { return hasAddress(node, corev1.NodeExternalIP, "203.0.113.10") })

	createCSR(t, n, "renew-same-fresh", []string{"renew-node"}, []string{"10.0.0.20"})
	if att := n.review(t, "renew-same-fresh"); att.Verdict != contract.VerdictReject {
		t.Errorf("the node's own names while its kubelet's certificate for them is fresh: %q (%s), want reject", att.Verdict, att.Reason)
	}
	createCSR(t, n, "renew-other-sans", []string{"renew-node"}, []string{"10.0.0.20", "203.0.113.10"})
	if att := n.review(t, "renew-other-sans"); att.Verdict != contract.VerdictApprove {
		t.Errorf("the node's own names, other than its kubelet's certificate's (its addresses changed): %q (%s), want approve", att.Verdict, att.Reason)
	}
	// The kubelet's certificate in its renewal window.
	writeServingCert(t, current, time.Now().Add(-300*24*time.Hour), 365*24*time.Hour, "renew-node", "10.0.0.20")
	createCSR(t, n, "renew-same-due", []string{"renew-node"}, []string{"10.0.0.20"})
	if att := n.review(t, "renew-same-due"); att.Verdict != contract.VerdictApprove {
		t.Errorf("the same names with the kubelet's certificate due for renewal: %q (%s), want approve", att.Verdict, att.Reason)
	}
}

// TestSaysOnceItHasNoServingCertificate: a node that has just joined has
// no serving certificate at --kubelet-serving-cert, and its kubelet's first
// request is vouched for (the gate fails open there). The agent says so
// once, naming the flag, however many requests it answers meanwhile: a
// kubelet that keeps its certificates elsewhere would leave every request
// vouched for. Once the certificate is there, the gate holds again.
func TestSaysOnceItHasNoServingCertificate(t *testing.T) {
	n := newNode(t, "nocert-node", "10.0.0.21", metal("nocert-node"))
	current := filepath.Join(t.TempDir(), "kubelet-server-current.pem")
	var logs syncbuf.Buffer
	n.startAgent(t, "", func(c *controller.Config) {
		c.KubeletServingCert = current
		c.Log = slog.New(slog.NewTextHandler(io.MultiWriter(&logs, testWriter{t}), nil))
	})
	n.waitNode(t, 20*time.Second, "join", func(node *corev1.Node) bool { return hasAddress(node, corev1.NodeExternalIP, "203.0.113.10") })

	for _, csr := range []string{"nocert-first", "nocert-again"} {
		createCSR(t, n, csr, []string{"nocert-node"}, []string{"10.0.0.21"})
		if att := n.review(t, csr); att.Verdict != contract.VerdictApprove {
			t.Errorf("%s, the node's own names with no serving certificate yet: %q (%s), want approve", csr, att.Verdict, att.Reason)
		}
	}
	if said := strings.Count(logs.String(), "--kubelet-serving-cert"); said != 1 {
		t.Errorf("the agent named --kubelet-serving-cert %d times in its log over two requests, want once:\n%s", said, logs.String())
	}
	writeServingCert(t, current, time.Now().Add(-time.Hour), 365*24*time.Hour, "nocert-node", "10.0.0.21")
	createCSR(t, n, "nocert-fresh", []string{"nocert-node"}, []string{"10.0.0.21"})
	if att := n.review(t, "nocert-fresh"); att.Verdict != contract.VerdictReject {
		t.Errorf("the same names once the kubelet's certificate for them is there and fresh: %q (%s), want reject", att.Verdict, att.Reason)
	}
}

// writeServingCert writes a self-signed serving certificate and its key as
// the kubelet's certificate manager stores them (certificate first).
func writeServingCert(t *testing.T, path string, issued time.Time, life time.Duration, name, ip string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "system:node:" + name, Organization: []string{"system:nodes"}},
		NotBefore: issued, NotAfter: issued.Add(life), DNSNames: []string{name}, IPAddresses: []net.IP{net.ParseIP(ip)},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	data := append(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER})...)
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
}
