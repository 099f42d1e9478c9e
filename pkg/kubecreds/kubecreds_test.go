package kubecreds

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func selfSigned(t *testing.T, cn string) []byte {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: cn}, NotBefore: time.Now(), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return append(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder})...)
}

const kubeconfig = `apiVersion: v1
kind: Config
clusters:
- name: c
  cluster: {server: "https://127.0.0.1:6443", insecure-skip-tls-verify: true}
users:
- name: u
  user: {client-certificate: CERT, client-key: CERT}
contexts:
- name: x
  context: {cluster: c, user: u}
current-context: x
`

func TestLoadAndWatch(t *testing.T) {
	dir := t.TempDir()
	certFile := filepath.Join(dir, "kubelet-client-current.pem")
	kc := filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(certFile, selfSigned(t, "one"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(kc, []byte(strings.ReplaceAll(kubeconfig, "CERT", certFile)), 0o600); err != nil {
		t.Fatal(err)
	}
	first, err := Load(kc)
	if err != nil {
		t.Fatal(err)
	}
	if first.Config.CertFile != "" || len(first.Config.CertData) == 0 || len(first.Config.KeyData) == 0 {
		t.Fatal("certificate and key must be inlined, not left as paths client-go rereads every 5 minutes")
	}

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ch := Watch(ctx, kc, 20*time.Millisecond, first.Fingerprint)

	// A half-written file (a broken rotation) is not sent; the old stays.
	if err := os.WriteFile(certFile, []byte("-----BEGIN CERTIFICATE-----\ngarbage"), 0o600); err != nil {
		t.Fatal(err)
	}
	select {
	case l := <-ch:
		t.Fatalf("a broken certificate file was sent as new credentials: %s", l.Fingerprint)
	case <-time.After(200 * time.Millisecond):
	}
	if _, err := Load(kc); err == nil || !strings.Contains(err.Error(), "client certificate and key") {
		t.Fatalf("Load of a broken cert: %v", err)
	}

	if err := os.WriteFile(certFile, selfSigned(t, "two"), 0o600); err != nil {
		t.Fatal(err)
	}
	select {
	case l := <-ch:
		if l.Fingerprint == first.Fingerprint || string(l.Config.CertData) == string(first.Config.CertData) {
			t.Fatal("rotated credentials carry the old certificate")
		}
	case <-ctx.Done():
		t.Fatal("rotation not noticed")
	}
}

func TestLoadErrors(t *testing.T) {
	dir := t.TempDir()
	kc := filepath.Join(dir, "kubeconfig")
	if _, err := Load(kc); err == nil || !strings.Contains(err.Error(), "reading kubeconfig") {
		t.Fatalf("missing kubeconfig: %v", err)
	}
	if err := os.WriteFile(kc, []byte(strings.ReplaceAll(kubeconfig, "CERT", filepath.Join(dir, "absent.pem"))), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(kc); err == nil || !strings.Contains(err.Error(), "absent.pem") {
		t.Fatalf("missing certificate: %v", err)
	}
}

// stamp is what lets Watch skip rereading: unchanged files keep it, a rewrite
// or a replacement by rename changes it, and a missing file never matches.
func TestStamp(t *testing.T) {
	dir := t.TempDir()
	f := filepath.Join(dir, "cert.pem")
	if err := os.WriteFile(f, []byte("one"), 0o600); err != nil {
		t.Fatal(err)
	}
	first := stamp([]string{f})
	if first == "" || stamp([]string{f}) != first {
		t.Fatal("an unchanged file must keep its stamp")
	}
	time.Sleep(10 * time.Millisecond)
	if err := os.WriteFile(f, []byte("two"), 0o600); err != nil {
		t.Fatal(err)
	}
	rewritten := stamp([]string{f})
	if rewritten == first {
		t.Error("a rewrite of the same size kept the stamp")
	}
	tmp := filepath.Join(dir, "new.pem")
	if err := os.WriteFile(tmp, []byte("two"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, f); err != nil {
		t.Fatal(err)
	}
	if stamp([]string{f}) == rewritten {
		t.Error("a replacement by rename kept the stamp")
	}
	if stamp([]string{filepath.Join(dir, "missing")}) != "" {
		t.Error("a missing file must not have a stamp")
	}
}
