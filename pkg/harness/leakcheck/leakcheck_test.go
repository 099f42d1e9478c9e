package leakcheck

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"math/big"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/util/certificate"
)

// A goroutine started after the snapshot and still running is reported,
// with its stack; one that ended is not.
func TestLeftoverFindsARunningGoroutine(t *testing.T) {
	before := goroutines()
	stop := make(chan struct{})
	go func() { <-stop }()
	left := leftover(before)
	if len(left) != 1 || !strings.Contains(left[0], "TestLeftoverFindsARunningGoroutine") {
		t.Fatalf("leftover = %q, want the one goroutine this test started", left)
	}
	close(stop)
	if left := leftover(before); len(left) != 0 {
		t.Errorf("an ended goroutine is still reported: %q", left)
	}
}

// A stopped certificate manager whose rotation loop sleeps until its
// certificate's next rotation (client-go's loop ignores its context there)
// is not reported; one never stopped is, by its template loop.
func TestStoppedCertificateManagerIsNotALeak(t *testing.T) {
	cert := selfSigned(t)
	start := func() certificate.Manager {
		m, err := certificate.NewManager(&certificate.Config{
			ClientsetFn:      func(*tls.Certificate) (kubernetes.Interface, error) { return fake.NewClientset(), nil },
			GetTemplate:      func() *x509.CertificateRequest { return &x509.CertificateRequest{Subject: cert.Leaf.Subject} },
			SignerName:       "example.com/test",
			GetUsages:        certificate.DefaultKubeletServingGetUsages,
			CertificateStore: memStore{cert},
		})
		if err != nil {
			t.Fatal(err)
		}
		m.Start()
		return m
	}
	before := goroutines()
	m := start()
	waitRotationSleeps(t, 1)
	m.Stop()
	if left := leftover(before); len(left) != 0 {
		t.Fatalf("a stopped manager is reported: %q", left)
	}

	never := start()
	t.Cleanup(never.Stop)
	waitRotationSleeps(t, 2) // the stopped one's and this one's
	left := leftover(before)
	if len(left) == 0 || !slices.ContainsFunc(left, func(g string) bool { return strings.Contains(g, "certificate.(*manager).run.func") }) {
		t.Fatalf("a manager never stopped is not reported: %q", left)
	}
}

// waitRotationSleeps waits until n certificate managers' rotation loops
// sleep until their deadline, as the stacks show.
func waitRotationSleeps(t *testing.T, n int) {
	t.Helper()
	count := func() int {
		buf := make([]byte, 1<<20)
		sleeps := 0
		for g := range strings.SplitSeq(string(buf[:runtime.Stack(buf, true)]), "\n\n") {
			if strings.HasPrefix(firstFrame(g), rotationSleep) {
				sleeps++
			}
		}
		return sleeps
	}
	err := wait.PollUntilContextTimeout(t.Context(), 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return count() >= n, nil
	})
	if err != nil {
		t.Fatalf("%d certificate managers' rotation loops asleep, want %d: %v", count(), n, err)
	}
}

// memStore holds one certificate.
type memStore struct{ cert *tls.Certificate }

func (s memStore) Current() (*tls.Certificate, error) { return s.cert, nil }
func (s memStore) Update(_, _ []byte) (*tls.Certificate, error) {
	return nil, errors.New("not stored")
}

// selfSigned is a certificate valid for a year.
func selfSigned(t *testing.T) *tls.Certificate {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "system:node:leak"},
		NotBefore: time.Now().Add(-time.Minute), NotAfter: time.Now().Add(365 * 24 * time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return &tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}
}
