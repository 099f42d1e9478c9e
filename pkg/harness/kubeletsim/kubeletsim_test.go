package kubeletsim_test

import (
	"context"
	"errors"
	"net/netip"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"github.com/talos-nodeinit/talos-nodeinit/pkg/contract"
	"github.com/talos-nodeinit/talos-nodeinit/pkg/csrcheck"
	"github.com/talos-nodeinit/talos-nodeinit/pkg/harness/kubeletsim"
	"github.com/talos-nodeinit/talos-nodeinit/pkg/harness/testcluster"
)

var cluster *testcluster.Cluster

func TestMain(m *testing.M) {
	os.Exit(testcluster.Main(m, &cluster, testcluster.Options{ControllerManager: true}))
}

// TestRegisterAndGetServingCertificate registers a node as a kubelet with
// --cloud-provider=external does, approves its serving CSR as admin, and
// checks the certificate kube-controller-manager signed.
func TestRegisterAndGetServingCertificate(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	id, err := cluster.NodeIdentity("sim-1")
	if err != nil {
		t.Fatal(err)
	}
	k, err := kubeletsim.Register(ctx, kubeletsim.Config{
		NodeName: "sim-1", NodeIPs: []netip.Addr{netip.MustParseAddr("192.0.2.10")},
		Identity: id.Config(), CertDir: t.TempDir(),
	})
	if err != nil {
		t.Fatal(err)
	}
	defer k.Stop()

	admin := kubernetes.NewForConfigOrDie(cluster.Admin())
	node, err := admin.CoreV1().Nodes().Get(ctx, "sim-1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := node.Annotations[contract.AnnotationProvidedNodeIP]; got != "192.0.2.10" {
		t.Errorf("provided-node-ip annotation = %q", got)
	}
	wantTaint := corev1.Taint{Key: contract.TaintUninitialized, Value: "true", Effect: corev1.TaintEffectNoSchedule}
	if !slices.ContainsFunc(node.Spec.Taints, func(t corev1.Taint) bool { return t.MatchTaint(&wantTaint) }) {
		t.Errorf("taints = %v, want the uninitialized taint", node.Spec.Taints)
	}
	wantAddrs := []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "192.0.2.10"}, {Type: corev1.NodeHostName, Address: "sim-1"}}
	if !slices.Equal(node.Status.Addresses, wantAddrs) {
		t.Errorf("addresses = %v, want %v", node.Status.Addresses, wantAddrs)
	}

	if err := k.StartServing(ctx); err != nil {
		t.Fatal(err)
	}
	csr := waitForCSR(ctx, t, admin, "system:node:sim-1")
	if csr.Spec.SignerName != certificatesv1.KubeletServingSignerName {
		t.Fatalf("signer = %s", csr.Spec.SignerName)
	}
	csr.Status.Conditions = append(csr.Status.Conditions, certificatesv1.CertificateSigningRequestCondition{
		Type: certificatesv1.CertificateApproved, Status: corev1.ConditionTrue, Reason: "TestApproved", Message: "approved by the test"})
	if _, err := admin.CertificatesV1().CertificateSigningRequests().UpdateApproval(ctx, csr.Name, csr, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	cert, err := k.WaitForCertificate(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("certificate issued %s after approval", time.Since(began).Round(time.Millisecond))
	if cert.Subject.CommonName != "system:node:sim-1" {
		t.Errorf("CN = %q", cert.Subject.CommonName)
	}
	if !slices.Equal(cert.DNSNames, []string{"sim-1"}) {
		t.Errorf("DNS SANs = %v, want [sim-1]", cert.DNSNames)
	}
	if len(cert.IPAddresses) != 1 || cert.IPAddresses[0].String() != "192.0.2.10" {
		t.Errorf("IP SANs = %v, want [192.0.2.10]", cert.IPAddresses)
	}
}

// TestHostileSANs checks the override used to play a kubelet that asks for
// another node's IP actually reaches the CSR.
func TestHostileSANs(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	id, err := cluster.NodeIdentity("sim-hostile")
	if err != nil {
		t.Fatal(err)
	}
	k, err := kubeletsim.Register(ctx, kubeletsim.Config{
		NodeName: "sim-hostile", NodeIPs: []netip.Addr{netip.MustParseAddr("192.0.2.20")},
		Identity: id.Config(), CertDir: t.TempDir(),
		ServingIPs: []netip.Addr{netip.MustParseAddr("192.0.2.10")},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer k.Stop()
	if err := k.StartServing(ctx); err != nil {
		t.Fatal(err)
	}
	admin := kubernetes.NewForConfigOrDie(cluster.Admin())
	csr := waitForCSR(ctx, t, admin, "system:node:sim-hostile")
	if len(csr.Spec.Request) == 0 {
		t.Fatal("empty request")
	}
	parsed, err := csrcheck.Parse(csr.Spec.Request)
	if err != nil {
		t.Fatal(err)
	}
	if len(parsed.IPAddresses) != 1 || parsed.IPAddresses[0].String() != "192.0.2.10" || len(parsed.DNSNames) != 0 {
		t.Fatalf("hostile CSR SANs: dns %v ips %v", parsed.DNSNames, parsed.IPAddresses)
	}
}

func waitForCSR(ctx context.Context, t *testing.T, cs kubernetes.Interface, user string) *certificatesv1.CertificateSigningRequest {
	t.Helper()
	for {
		list, err := cs.CertificatesV1().CertificateSigningRequests().List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for i := range list.Items {
			if list.Items[i].Spec.Username == user {
				return &list.Items[i]
			}
		}
		select {
		case <-ctx.Done():
			t.Fatalf("no CSR from %s: %v", user, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// A kubelet registers until it succeeds (registerWithAPIServer: 100 ms,
// doubling up to 7 s): an API server down, or too busy to finish a TLS
// handshake within client-go's 10 s (seen at 1,000 nodes in `make bench`),
// delays the registration but does not fail it. A refusal for good still
// fails at once.
func TestRegisterWaitsForTheAPIServer(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	id, err := cluster.NodeIdentity("sim-late")
	if err != nil {
		t.Fatal(err)
	}
	cluster.StopAPIServer()
	// The API server comes back once a registration has failed on it.
	failed := make(chan struct{})
	fail := sync.OnceFunc(func() { close(failed) })
	restarted := make(chan error, 1)
	go func() {
		select {
		case <-failed:
			restarted <- cluster.StartAPIServer(ctx)
		case <-ctx.Done():
			restarted <- errors.New("no registration attempt failed on the stopped API server")
		}
	}()
	k, err := kubeletsim.Register(ctx, kubeletsim.Config{
		NodeName: "sim-late", NodeIPs: []netip.Addr{netip.MustParseAddr("192.0.2.12")},
		Identity: id.Config(), CertDir: t.TempDir(), OnRetry: func(error) { fail() },
	})
	if err := <-restarted; err != nil {
		t.Fatal(err)
	}
	if err != nil {
		t.Fatalf("registration while the API server restarts: %v", err)
	}
	defer k.Stop()
	if _, err := kubernetes.NewForConfigOrDie(cluster.Admin()).CoreV1().Nodes().Get(ctx, "sim-late", metav1.GetOptions{}); err != nil {
		t.Fatal(err)
	}

	// Another node's name: NodeRestriction refuses it, for good.
	other, err := cluster.NodeIdentity("sim-other")
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, err = kubeletsim.Register(ctx, kubeletsim.Config{
		NodeName: "sim-not-mine", NodeIPs: []netip.Addr{netip.MustParseAddr("192.0.2.13")},
		Identity: other.Config(), CertDir: t.TempDir(),
	})
	if err == nil || !apierrors.IsForbidden(errors.Unwrap(err)) || time.Since(start) > 5*time.Second {
		t.Fatalf("registering another node's name: %v after %v, want Forbidden at once", err, time.Since(start))
	}

	// An API server whose certificate does not verify: a configuration
	// error, not worth a retry.
	wrongCA := id.Config()
	// The node's own client certificate, taken for an authority: it signed
	// nothing.
	if wrongCA.CAData, err = os.ReadFile(id.CertFile); err != nil {
		t.Fatal(err)
	}
	start = time.Now()
	_, err = kubeletsim.Register(ctx, kubeletsim.Config{
		NodeName: "sim-late", NodeIPs: []netip.Addr{netip.MustParseAddr("192.0.2.12")},
		Identity: wrongCA, CertDir: t.TempDir(),
	})
	if err == nil || !strings.Contains(err.Error(), "certificate") || time.Since(start) > 5*time.Second {
		t.Fatalf("registering with the wrong certificate authority: %v after %v, want a certificate error at once", err, time.Since(start))
	}
}

// Start is a kubelet before it registers: its Node watch runs while the
// Node does not exist yet, delivers the Node once registered, and follows
// its addresses (those its serving certificate asks for), such as one the
// agent publishes after the registration.
func TestStartedKubeletFollowsItsNodeFromRegistration(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	k := start(ctx, t, kubeletsim.Config{NodeName: "sim-started", NodeIPs: []netip.Addr{netip.MustParseAddr("192.0.2.14")}})
	if err := wait.PollUntilContextCancel(ctx, 10*time.Millisecond, true, func(context.Context) (bool, error) { return k.Watching(), nil }); err != nil {
		t.Fatal("the Node watch of a started kubelet did not sync")
	}
	if err := k.Register(ctx); err != nil {
		t.Fatal(err)
	}
	admin := kubernetes.NewForConfigOrDie(cluster.Admin())
	patch := []byte(`{"status":{"addresses":[{"type":"InternalIP","address":"192.0.2.14"},{"type":"ExternalIP","address":"198.51.100.14"},{"type":"Hostname","address":"sim-started"}]}}`)
	if _, err := admin.CoreV1().Nodes().Patch(ctx, "sim-started", types.MergePatchType, patch, metav1.PatchOptions{}, "status"); err != nil {
		t.Fatal(err)
	}
	if err := wait.PollUntilContextCancel(ctx, 10*time.Millisecond, true, func(context.Context) (bool, error) {
		return slices.Contains(k.Addresses(), corev1.NodeAddress{Type: corev1.NodeExternalIP, Address: "198.51.100.14"}), nil
	}); err != nil {
		t.Fatalf("the kubelet follows %v: not the address published after the registration", k.Addresses())
	}
}

// With AskWhenSeen the serving-certificate manager runs from the start, as
// the kubelet's, and asks for nothing until its Node watch has the Node.
func TestAskWhenSeenWaitsForTheNode(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	k := start(ctx, t, kubeletsim.Config{NodeName: "sim-seen", NodeIPs: []netip.Addr{netip.MustParseAddr("192.0.2.15")}, AskWhenSeen: true})
	if err := k.StartServing(ctx); err != nil {
		t.Fatal(err)
	}
	// The manager looks for a template every second: twice, and neither
	// look got one.
	if err := wait.PollUntilContextCancel(ctx, 50*time.Millisecond, true, func(context.Context) (bool, error) {
		asked, _ := k.TemplateAsks()
		return asked >= 2, nil
	}); err != nil {
		t.Fatalf("the serving-certificate manager did not look for a template: %v", err)
	}
	if asked, answered := k.TemplateAsks(); answered != 0 {
		t.Fatalf("%d of the manager's %d looks got a template before the kubelet saw its Node", answered, asked)
	}
	admin := kubernetes.NewForConfigOrDie(cluster.Admin())
	list, err := admin.CertificatesV1().CertificateSigningRequests().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, csr := range list.Items {
		if csr.Spec.Username == "system:node:sim-seen" {
			t.Fatalf("a serving CSR (%s) before the kubelet saw its Node", csr.Name)
		}
	}
	if err := k.Register(ctx); err != nil {
		t.Fatal(err)
	}
	waitForCSR(ctx, t, admin, "system:node:sim-seen")
}

// start starts cfg's kubelet (kubeletsim.Start) with its node's identity
// and a certificate directory of its own, stopped when the test ends.
func start(ctx context.Context, t *testing.T, cfg kubeletsim.Config) *kubeletsim.Kubelet {
	t.Helper()
	id, err := cluster.NodeIdentity(cfg.NodeName)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Identity, cfg.CertDir = id.Config(), t.TempDir()
	k, err := kubeletsim.Start(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(k.Stop)
	return k
}
