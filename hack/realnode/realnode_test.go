package realnode_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/talos-nodeinit/talos-nodeinit/hack/realnode"
	"github.com/talos-nodeinit/talos-nodeinit/pkg/harness/testcluster"
)

// TestRealNode: the real kubelet on containerd registers its Node with the
// real API server (tainted uninitialized, as --cloud-provider=external
// makes it), asks for a serving certificate, and runs a hostNetwork pod
// placed by the real scheduler from locally imported images.
func TestRealNode(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("a real node needs root: run `make e2e` as root")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	began := time.Now()

	bins := kubeTools(t)
	cluster, err := testcluster.Start(ctx, testcluster.Options{ControllerManager: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cluster.Close)
	realnode.StartScheduler(t, cluster, filepath.Join(bins, "kube-scheduler"))

	coordinatorImage, images := localImages(t)
	node := realnode.Start(ctx, t, cluster, realnode.Spec{
		Name: "real-0", KubeletBin: filepath.Join(bins, "kubelet"), Images: images,
	})
	cs := kubernetes.NewForConfigOrDie(cluster.Admin())

	n := waitFor(ctx, t, node, "the Node to register", func() (*corev1.Node, error) {
		return cs.CoreV1().Nodes().Get(ctx, "real-0", metav1.GetOptions{})
	})
	t.Logf("Node registered after %s; taints %v; addresses %v", time.Since(began).Round(time.Second), n.Spec.Taints, n.Status.Addresses)
	if !hasTaint(n, "node.cloudprovider.kubernetes.io/uninitialized") {
		t.Errorf("Node has no uninitialized taint (--cloud-provider=external): %v", n.Spec.Taints)
	}

	csr := waitFor(ctx, t, node, "the kubelet's serving CSR", func() (*certificatesv1.CertificateSigningRequest, error) {
		list, err := cs.CertificatesV1().CertificateSigningRequests().List(ctx, metav1.ListOptions{})
		if err != nil {
			return nil, err
		}
		for i, c := range list.Items {
			if c.Spec.SignerName == certificatesv1.KubeletServingSignerName && c.Spec.Username == "system:node:real-0" {
				return &list.Items[i], nil
			}
		}
		return nil, fmt.Errorf("no %s CSR from system:node:real-0 among %d", certificatesv1.KubeletServingSignerName, len(list.Items))
	})
	t.Logf("serving CSR %s from %s", csr.Name, csr.Spec.Username)
	servingCertificateIsServed(ctx, t, cs, node, cluster, csr)

	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "probe", Namespace: "default"},
		Spec: corev1.PodSpec{
			HostNetwork: true,
			Tolerations: []corev1.Toleration{
				{Key: "node.cloudprovider.kubernetes.io/uninitialized", Operator: corev1.TolerationOpExists},
				{Key: "node.kubernetes.io/not-ready", Operator: corev1.TolerationOpExists},
			},
			AutomountServiceAccountToken: new(bool),
			// The coordinator image of `make images` runs (and exits 0)...
			InitContainers: []corev1.Container{{Name: "coordinator-version", Image: coordinatorImage, Args: []string{"version"}, ImagePullPolicy: corev1.PullNever}},
			// ...then the locally built pause image keeps the pod Running.
			Containers: []corev1.Container{{Name: "pause", Image: realnode.PauseImage, ImagePullPolicy: corev1.PullNever}},
		},
	}
	// No serviceaccount controller runs here; admission still wants the
	// pod's ServiceAccount to exist.
	if _, err := cs.CoreV1().ServiceAccounts("default").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	p := waitFor(ctx, t, node, "the pod to run", func() (*corev1.Pod, error) {
		p, err := cs.CoreV1().Pods("default").Get(ctx, "probe", metav1.GetOptions{})
		if err != nil {
			return nil, err
		}
		if p.Status.Phase != corev1.PodRunning {
			return nil, fmt.Errorf("pod is %s on %q: %s", p.Status.Phase, p.Spec.NodeName, podSummary(p))
		}
		return p, nil
	})
	if p.Spec.NodeName != "real-0" {
		t.Errorf("pod scheduled to %q, want real-0", p.Spec.NodeName)
	}
	if got := p.Status.InitContainerStatuses[0].State.Terminated; got == nil || got.ExitCode != 0 {
		t.Errorf("coordinator image's `version` did not exit 0: %+v", p.Status.InitContainerStatuses[0].State)
	}
	if cs := p.Status.ContainerStatuses[0]; cs.State.Running == nil || !strings.HasPrefix(cs.ContainerID, "containerd://") {
		t.Errorf("pause container not running under containerd: %+v", cs)
	}
	kubePrismAnswers(ctx, t, node, cluster)
	t.Logf("pod Running on %s (IPs %v) %s after start", p.Spec.NodeName, p.Status.PodIPs, time.Since(began).Round(time.Second))
}

// kubeTools is the kube-tools directory with the kubelet and scheduler.
func kubeTools(t *testing.T) string {
	root, err := testcluster.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(filepath.Join(root, "hack/kube-tools/build.sh"))
	cmd.Env = append(os.Environ(), "KUBE_TOOLS_BINS=kube-apiserver kube-controller-manager etcd kube-scheduler kubelet")
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("hack/kube-tools/build.sh: %v", err)
	}
	dir := strings.TrimSpace(string(out))
	t.Setenv("KUBE_TOOLS_DIR", dir)
	return dir
}

// localImages are `make images`' tarballs for this architecture, and the
// coordinator image's tag.
func localImages(t *testing.T) (coordinator string, tars []string) {
	root, _ := testcluster.RepoRoot()
	dir := filepath.Join(root, "bin", "images")
	for _, image := range []string{"nodeinit-coordinator", "nodeinit-agent-pod"} {
		tar := filepath.Join(dir, image+"-"+runtime.GOARCH+".tar")
		if _, err := os.Stat(tar); err != nil {
			t.Fatalf("%s is missing: run `make images` (make e2e does)", tar)
		}
		tars = append(tars, tar)
	}
	out, err := exec.Command("tar", "-xOf", tars[0], "manifest.json").Output()
	if err != nil {
		t.Fatal(err)
	}
	_, rest, _ := strings.Cut(string(out), `"RepoTags":["`)
	coordinator, _, _ = strings.Cut(rest, `"`)
	if coordinator == "" {
		t.Fatalf("no tag in %s", tars[0])
	}
	return coordinator, tars
}

func waitFor[T any](ctx context.Context, t *testing.T, node *realnode.Node, what string, get func() (T, error)) T {
	t.Helper()
	var last error
	for {
		v, err := get()
		if err == nil {
			return v
		}
		last = err
		select {
		case <-ctx.Done():
			t.Fatalf("waiting for %s: %v (last: %v)", what, ctx.Err(), last)
		case <-time.After(500 * time.Millisecond):
		}
		if err := node.Failed(); err != nil {
			t.Fatalf("waiting for %s: %v (last: %v)", what, err, last)
		}
	}
}

func hasTaint(n *corev1.Node, key string) bool {
	for _, t := range n.Spec.Taints {
		if t.Key == key {
			return true
		}
	}
	return false
}

func podSummary(p *corev1.Pod) string {
	var b strings.Builder
	for _, c := range p.Status.Conditions {
		if c.Status != corev1.ConditionTrue {
			fmt.Fprintf(&b, "%s=%s(%s: %s) ", c.Type, c.Status, c.Reason, c.Message)
		}
	}
	for _, s := range append(p.Status.InitContainerStatuses, p.Status.ContainerStatuses...) {
		if s.State.Waiting != nil {
			fmt.Fprintf(&b, "%s waiting %s: %s ", s.Name, s.State.Waiting.Reason, s.State.Waiting.Message)
		}
	}
	return b.String()
}

// servingCertificateIsServed approves the kubelet's serving CSR (as an admin
// here, standing in for the coordinator), lets kube-controller-manager sign
// it, and checks the kubelet's port 10250 then presents exactly that
// certificate, valid for the cluster CA and for the node's name and address.
func servingCertificateIsServed(ctx context.Context, t *testing.T, cs kubernetes.Interface, node *realnode.Node, cluster *testcluster.Cluster, csr *certificatesv1.CertificateSigningRequest) {
	t.Helper()
	csr.Status.Conditions = append(csr.Status.Conditions, certificatesv1.CertificateSigningRequestCondition{
		Type: certificatesv1.CertificateApproved, Status: corev1.ConditionTrue, Reason: "RealNodeTest", Message: "approved by the real-node test",
	})
	if _, err := cs.CertificatesV1().CertificateSigningRequests().UpdateApproval(ctx, csr.Name, csr, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	issued := waitFor(ctx, t, node, "the serving certificate to be signed", func() (*x509.Certificate, error) {
		c, err := cs.CertificatesV1().CertificateSigningRequests().Get(ctx, csr.Name, metav1.GetOptions{})
		if err != nil {
			return nil, err
		}
		block, _ := pem.Decode(c.Status.Certificate)
		if block == nil {
			return nil, fmt.Errorf("CSR %s has no certificate yet", c.Name)
		}
		return x509.ParseCertificate(block.Bytes)
	})
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(cluster.CAPEM())
	addr := net.JoinHostPort(realnode.NodeIP, "10250")
	served := waitFor(ctx, t, node, "port 10250 to serve the signed certificate", func() (*x509.Certificate, error) {
		raw, err := realnode.DialIn(node.CPNS.Path, addr)
		if err != nil {
			return nil, err
		}
		c := tls.Client(raw, &tls.Config{RootCAs: roots, ServerName: realnode.NodeIP})
		defer c.Close()
		if err := c.HandshakeContext(ctx); err != nil {
			return nil, err // until rotation, the kubelet serves a self-signed certificate
		}
		leaf := c.ConnectionState().PeerCertificates[0]
		if !leaf.Equal(issued) {
			return nil, fmt.Errorf("served certificate (serial %s) is not the issued one (serial %s)", leaf.SerialNumber, issued.SerialNumber)
		}
		return leaf, nil
	})
	if err := served.VerifyHostname("real-0"); err != nil {
		t.Errorf("served certificate is not valid for the node name: %v", err)
	}
	t.Logf("%s from the control-plane namespace serves the approved certificate: CN=%s DNS=%v IPs=%v", addr, served.Subject.CommonName, served.DNSNames, served.IPAddresses)
}

// kubePrismAnswers: a hostNetwork pod on the node (the coordinator, before
// any kube-proxy) reaches the API server at 127.0.0.1:7445 of the node's
// namespace, as on Talos, with the API server's own certificate.
func kubePrismAnswers(ctx context.Context, t *testing.T, node *realnode.Node, cluster *testcluster.Cluster) {
	t.Helper()
	raw, err := realnode.DialIn(node.NodeNS.Path, realnode.KubePrismAddr)
	if err != nil {
		t.Fatalf("dialling %s in the node namespace: %v", realnode.KubePrismAddr, err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(cluster.CAPEM())
	c := tls.Client(raw, &tls.Config{RootCAs: roots, ServerName: "127.0.0.1"})
	defer c.Close()
	if err := c.HandshakeContext(ctx); err != nil {
		t.Fatalf("TLS to the API server through %s: %v", realnode.KubePrismAddr, err)
	}
}
