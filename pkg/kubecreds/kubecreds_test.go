package kubecreds

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/rest"
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

// writeKubeconfig writes a kubeconfig whose client certificate and key are
// the file certFile, holding cert, as the kubelet's.
func writeKubeconfig(t *testing.T, cert []byte) (kc, certFile string) {
	t.Helper()
	dir := t.TempDir()
	certFile = filepath.Join(dir, "kubelet-client-current.pem")
	kc = filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(certFile, cert, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(kc, []byte(strings.ReplaceAll(kubeconfig, "CERT", certFile)), 0o600); err != nil {
		t.Fatal(err)
	}
	return kc, certFile
}

func TestLoadAndWatch(t *testing.T) {
	kc, certFile := writeKubeconfig(t, selfSigned(t, "one"))
	first, err := Load(kc)
	if err != nil {
		t.Fatal(err)
	}
	if first.Config.CertFile != "" || len(first.Config.CertData) == 0 || len(first.Config.KeyData) == 0 {
		t.Fatal("certificate and key must be inlined, not left as paths client-go rereads every 5 minutes")
	}

	w := startWatch(t, kc, first)

	// A half-written file (a broken rotation) is not sent; the old stays.
	if err := os.WriteFile(certFile, []byte("-----BEGIN CERTIFICATE-----\ngarbage"), 0o600); err != nil {
		t.Fatal(err)
	}
	w.looks(3, "a broken certificate file was sent as new credentials")
	if _, err := Load(kc); err == nil || !strings.Contains(err.Error(), "client certificate and key") {
		t.Fatalf("Load of a broken cert: %v", err)
	}

	if err := os.WriteFile(certFile, selfSigned(t, "two"), 0o600); err != nil {
		t.Fatal(err)
	}
	if l := w.next("rotation not noticed"); l.Fingerprint == first.Fingerprint || string(l.Config.CertData) == string(first.Config.CertData) {
		t.Fatal("rotated credentials carry the old certificate")
	}
}

// watcher drives watch look by look. Its loop takes a look only once the
// one before has ended, sent or not: a look taken is the proof that the
// one before sent nothing.
type watcher struct {
	t    *testing.T
	ctx  context.Context
	look chan time.Time
	ch   <-chan Loaded
}

func startWatch(t *testing.T, kc string, from Loaded) *watcher {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	look := make(chan time.Time)
	return &watcher{t: t, ctx: ctx, look: look, ch: watch(ctx, kc, look, from)}
}

// looks makes watch look n times, failing with why if it sends instead;
// the first n-1 have ended when it returns.
func (w *watcher) looks(n int, why string) {
	w.t.Helper()
	for range n {
		select {
		case w.look <- time.Time{}:
		case l := <-w.ch:
			w.t.Fatalf("%s: %s", why, l.Fingerprint)
		case <-w.ctx.Done():
			w.t.Fatal("watch took no look within 10s")
		}
	}
}

// next makes watch look until it sends, failing with why if it has not
// within 10s.
func (w *watcher) next(why string) Loaded {
	w.t.Helper()
	for {
		select {
		case w.look <- time.Time{}:
		case l := <-w.ch:
			return l
		case <-w.ctx.Done():
			w.t.Fatal(why)
		}
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
	if err := os.WriteFile(f, []byte("two"), 0o600); err != nil {
		t.Fatal(err)
	}
	laterWrite(t, f)
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

// Talos 1.14 (internal/app/machined/pkg/controllers/k8s/kubelet_kubeconfig.go)
// says it plainly: neither the kubelet nor Talos write the kubeconfig
// atomically, and rotation rewrites the certificate in place too. A reading
// caught mid-write must never be taken for credentials: Load either fails
// (and Watch keeps the last good ones) or returns exactly the complete ones.
// Kubeconfigs as Talos writes them (file references, block style) and
// inline ones, cut at every byte; the certificate and key file too.
func TestTornWritesAreNeverCredentials(t *testing.T) {
	dir := t.TempDir()
	certFile := filepath.Join(dir, "kubelet-client-current.pem")
	pemBytes := selfSigned(t, "system:node:n")
	if err := os.WriteFile(certFile, pemBytes, 0o600); err != nil {
		t.Fatal(err)
	}
	talosStyle := `apiVersion: v1
kind: Config
clusters:
- cluster:
    certificate-authority-data: ` + base64.StdEncoding.EncodeToString(pemBytes[:strings.Index(string(pemBytes), "-----BEGIN EC")]) + `
    server: https://127.0.0.1:6443
  name: local
contexts:
- context:
    cluster: local
    namespace: default
    user: kubelet
  name: kubelet@local
current-context: kubelet@local
preferences: {}
users:
- name: kubelet
  user:
    client-certificate: ` + certFile + `
    client-key: ` + certFile + `
`
	kc := filepath.Join(dir, "kubeconfig")
	for _, full := range []string{talosStyle, strings.ReplaceAll(kubeconfig, "CERT", certFile)} {
		if err := os.WriteFile(kc, []byte(full), 0o600); err != nil {
			t.Fatal(err)
		}
		want, err := Load(kc)
		if err != nil {
			t.Fatal(err)
		}
		for cut := range len(full) {
			if err := os.WriteFile(kc, []byte(full[:cut]), 0o600); err != nil {
				t.Fatal(err)
			}
			if got, err := Load(kc); err == nil && !sameCredentials(got, want) {
				t.Fatalf("the kubeconfig cut at byte %d/%d was taken for credentials (server %q, certificate %d bytes): %q",
					cut, len(full), got.Config.Host, len(got.Config.CertData), full[:cut])
			}
		}
		if err := os.WriteFile(kc, []byte(full), 0o600); err != nil {
			t.Fatal(err)
		}
		for cut := range len(pemBytes) {
			if err := os.WriteFile(certFile, pemBytes[:cut], 0o600); err != nil {
				t.Fatal(err)
			}
			if got, err := Load(kc); err == nil && !sameCredentials(got, want) {
				t.Fatalf("the certificate file cut at byte %d/%d was taken for credentials", cut, len(pemBytes))
			}
		}
		if err := os.WriteFile(certFile, pemBytes, 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

// sameCredentials: what a client would use (a cut that drops only the final
// newline is the same kubeconfig).
func sameCredentials(a, b Loaded) bool {
	x, y := a.Config, b.Config
	der := func(c *rest.Config) string {
		pair, err := tls.X509KeyPair(c.CertData, c.KeyData)
		if err != nil {
			return "none: " + err.Error()
		}
		return string(pair.Certificate[0])
	}
	return x.Host == y.Host && der(x) == der(y) && strings.TrimSpace(string(x.CAData)) == strings.TrimSpace(string(y.CAData)) &&
		x.BearerToken == y.BearerToken && x.Insecure == y.Insecure
}

// Watch starts from the reading it is given, stamp and all: the agent has
// just loaded the credentials, and rereading and parsing them again at the
// first tick costs each node a kubeconfig parse for nothing (500 of them
// in a join storm, on the API server's cores in the bench). A change the
// stamp cannot see (same inode, size and modification time) therefore
// stays unseen until the next real change, as it does at every later tick.
func TestWatchStartsFromTheReadingItIsGiven(t *testing.T) {
	one := selfSigned(t, "one")
	kc, certFile := writeKubeconfig(t, one)
	first, err := Load(kc)
	if err != nil {
		t.Fatal(err)
	}
	// Another certificate of the same size, written in place with the old
	// modification time: invisible to the stamp.
	st, err := os.Stat(certFile)
	if err != nil {
		t.Fatal(err)
	}
	var other []byte
	for other == nil || len(other) != len(one) {
		other = selfSigned(t, "one")
	}
	if err := os.WriteFile(certFile, other, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(certFile, st.ModTime(), st.ModTime()); err != nil {
		t.Fatal(err)
	}

	w := startWatch(t, kc, first)
	w.looks(3, "Watch reread credentials whose stamp had not changed since the reading it was given")

	// A real rotation is still seen.
	if err := os.WriteFile(certFile, selfSigned(t, "two"), 0o600); err != nil {
		t.Fatal(err)
	}
	laterWrite(t, certFile)
	if l := w.next("rotation not noticed"); l.Fingerprint == first.Fingerprint {
		t.Fatal("the rotation was sent with the old fingerprint")
	}
}

// laterWrite dates the file f a second after its last write, as a write a
// moment later would have: the file system's clock may not have moved on
// since (its granularity is a few milliseconds).
func laterWrite(t *testing.T, f string) {
	t.Helper()
	st, err := os.Stat(f)
	if err != nil {
		t.Fatal(err)
	}
	later := st.ModTime().Add(time.Second)
	if err := os.Chtimes(f, later, later); err != nil {
		t.Fatal(err)
	}
}

// TestNodeNameFromTheCertificate: the node name is the client
// certificate's system:node:<name>, and nothing else passes for one.
func TestNodeNameFromTheCertificate(t *testing.T) {
	for cn, want := range map[string]string{"system:node:w-1": "w-1", "system:node:": "", "w-1": "", "system:admin": ""} {
		kc, _ := writeKubeconfig(t, selfSigned(t, cn))
		l, err := Load(kc)
		if err != nil {
			t.Fatal(err)
		}
		got, err := l.NodeName()
		if got != want || (want == "") != (err != nil) {
			t.Errorf("CN %q: NodeName() = %q, %v; want %q", cn, got, err, want)
		}
	}
	if _, err := (Loaded{}).NodeName(); err == nil {
		t.Error("no credentials gave a node name")
	}
}
