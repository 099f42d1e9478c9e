package realnode_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	talosruntime "github.com/siderolabs/talos/pkg/machinery/resources/runtime"
	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/yaml"

	"github.com/talos-nodeinit/talos-nodeinit/hack/realnode"
	"github.com/talos-nodeinit/talos-nodeinit/pkg/contract"
	"github.com/talos-nodeinit/talos-nodeinit/pkg/harness/gobuild"
	"github.com/talos-nodeinit/talos-nodeinit/pkg/harness/kubeapply"
	"github.com/talos-nodeinit/talos-nodeinit/pkg/harness/testcluster"
	"github.com/talos-nodeinit/talos-nodeinit/pkg/harness/testnode"
)

// TestRealNode: two real kubelets on containerd register their Nodes with
// the real API server, tainted uninitialized and not-ready, each with the
// agent beside it; coordinator/deploy, applied as shipped but for its image
// reference, is placed on those nodes by the real scheduler, runs from the
// image `make images` built, passes its probes, wins the Lease and
// initializes the nodes; each agent attests its kubelet's serving CSR, the
// coordinator approves it, and port 10250 serves the signed certificate.
func TestRealNode(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("a real node needs root: run `make e2e` as root")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	began := time.Now()
	since := func() time.Duration { return time.Since(began).Round(time.Second) }

	bins := kubeTools(t)
	cluster, err := testcluster.Start(ctx, testcluster.Options{
		ControllerManager: true,
		// What a Deployment's pods need from kube-controller-manager: their
		// ReplicaSet and Pods, the kube-root-ca.crt ConfigMap behind
		// every service-account token volume; and the not-ready taint on a
		// node that is not Ready.
		Controllers: []string{"deployment", "replicaset", "root-ca-cert-publisher", "serviceaccount", "nodelifecycle"},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Log(cluster.LogTails(30))
		}
		cluster.Close()
	})
	realnode.StartScheduler(t, cluster, filepath.Join(bins, "kube-scheduler"))

	// Two control-plane nodes: one for each of the Deployment's replicas,
	// which both want host ports 10290 and 10291.
	tags, images := localImages(t)
	coordinatorImage := tags[0]
	agent := gobuild.Binary(t, "../../agent")
	var nodes []*realnode.Node
	for i, ip := range []string{"10.77.0.2", "10.77.0.3"} {
		nodes = append(nodes, realnode.Start(ctx, t, cluster, realnode.Spec{
			Name: fmt.Sprintf("real-%d", i), NodeIP: ip, KubeletBin: filepath.Join(bins, "kubelet"), Images: images, AgentBin: agent,
		}))
	}
	// A worker with the agent's static-pod form instead of the extension.
	nodes = append(nodes, realnode.Start(ctx, t, cluster, realnode.Spec{
		Name: "real-2", NodeIP: "10.77.0.4", KubeletBin: filepath.Join(bins, "kubelet"), Images: images,
		StaticPods: [][]byte{agentStaticPod(t, tags[1])},
	}))
	controlPlane := nodes[:2]
	// And a simulated node (the kubelet stand-in, the agent binary beside
	// it): the coordinator in the pod initializes the fast nodes of the
	// other tests too.
	sim := simulatedNode(t, cluster, agent, "sim-0", "10.78.0.2")
	cs := kubernetes.NewForConfigOrDie(cluster.Admin())

	for _, node := range nodes {
		// The kubelet registers the Node tainted uninitialized
		// (--cloud-provider=external); kube-controller-manager's node
		// lifecycle controller taints it not-ready (no CNI:
		// NetworkReady=false).
		n := waitFor(ctx, t, nodes, node.Name+" to register, tainted uninitialized and not-ready", func() (*corev1.Node, error) {
			n, err := cs.CoreV1().Nodes().Get(ctx, node.Name, metav1.GetOptions{})
			if err != nil {
				return nil, err
			}
			if !hasTaint(n, uninitializedTaint) || !hasTaint(n, corev1.TaintNodeNotReady) {
				return nil, fmt.Errorf("taints %v", n.Spec.Taints)
			}
			return n, nil
		})
		t.Logf("%s registered after %s; taints %v; addresses %v", node.Name, since(), n.Spec.Taints, n.Status.Addresses)
		if slices.Contains(controlPlane, node) {
			// As Talos marks a control-plane node (the Deployment's
			// nodeSelector and tolerations expect both).
			markControlPlane(ctx, t, cs, node.Name)
		}
	}

	objs, err := realnode.CoordinatorManifests(coordinatorImage)
	if err != nil {
		t.Fatal(err)
	}
	if err := kubeapply.Apply(ctx, cluster.Admin(), objs); err != nil {
		t.Fatal(err)
	}
	pods := waitFor(ctx, t, nodes, "both coordinator replicas to be Ready", func() ([]corev1.Pod, error) {
		pods, err := coordinatorPods(ctx, cs)
		if err != nil {
			return nil, err
		}
		var states []string
		for _, p := range pods {
			if !podReady(&p) {
				states = append(states, fmt.Sprintf("%s %s on %q: %s", p.Name, p.Status.Phase, p.Spec.NodeName, podSummary(&p)))
			}
		}
		if len(pods) != 2 || len(states) > 0 {
			return nil, fmt.Errorf("%d coordinator pods, not Ready: %v", len(pods), states)
		}
		return pods, nil
	})
	placed := map[string]string{} // pod → node
	for _, p := range pods {
		placed[p.Name] = p.Spec.NodeName
		if got := p.Spec.Containers[0].Image; got != coordinatorImage {
			t.Errorf("coordinator pod %s's image is %s, want %s (make images)", p.Name, got, coordinatorImage)
		}
		if c := p.Status.ContainerStatuses[0]; c.State.Running == nil || !strings.HasPrefix(c.ContainerID, "containerd://") {
			t.Errorf("coordinator container of %s not running under containerd: %+v", p.Name, c)
		}
	}
	if placed[pods[0].Name] == placed[pods[1].Name] || !strings.HasPrefix(placed[pods[0].Name], "real-") || !strings.HasPrefix(placed[pods[1].Name], "real-") {
		t.Errorf("coordinator pods placed %v, want one on each real node", placed)
	}
	t.Logf("coordinator pods Ready %s after start: %v", since(), placed)

	holder := waitFor(ctx, t, nodes, "a coordinator to win its Lease", func() (string, error) {
		l, err := cs.CoordinationV1().Leases("kube-system").Get(ctx, "nodeinit-coordinator", metav1.GetOptions{})
		if err != nil {
			return "", err
		}
		if l.Spec.HolderIdentity == nil || placed[*l.Spec.HolderIdentity] == "" {
			return "", fmt.Errorf("Lease held by %v, want one of %v", l.Spec.HolderIdentity, placed)
		}
		return *l.Spec.HolderIdentity, nil
	})
	t.Logf("Lease kube-system/nodeinit-coordinator held by %s on %s; the other replica is a Ready standby", holder, placed[holder])

	pool := netip.MustParsePrefix("10.244.0.0/16") // coordinator/deploy/configmap.yaml
	cidrs := map[string]string{}
	mirror := waitFor(ctx, t, nodes, "the agent's static pod to run on real-2", func() (*corev1.Pod, error) {
		p, err := cs.CoreV1().Pods("kube-system").Get(ctx, "nodeinit-agent-real-2", metav1.GetOptions{})
		if err != nil {
			return nil, err
		}
		if p.Status.Phase != corev1.PodRunning {
			return nil, fmt.Errorf("static pod %s: %s", p.Status.Phase, podSummary(p))
		}
		return p, nil
	})
	t.Logf("static pod %s Running on %s %s after start (image %s)", mirror.Name, mirror.Spec.NodeName, since(), mirror.Spec.Containers[0].Image)

	for _, name := range []string{nodes[0].Name, nodes[1].Name, nodes[2].Name, sim.Name} {
		n := waitFor(ctx, t, nodes, "the coordinator to initialize "+name, func() (*corev1.Node, error) {
			n, err := cs.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return nil, err
			}
			if hasTaint(n, uninitializedTaint) || len(n.Spec.PodCIDRs) == 0 {
				return nil, fmt.Errorf("taints %v, pod CIDRs %v", n.Spec.Taints, n.Spec.PodCIDRs)
			}
			return n, nil
		})
		for _, c := range n.Spec.PodCIDRs {
			if p, err := netip.ParsePrefix(c); err != nil || p.Bits() != 24 || !pool.Contains(p.Addr()) {
				t.Errorf("%s's pod CIDR %q is not a /24 of the shipped pool %s", name, c, pool)
			}
			if other, dup := cidrs[c]; dup {
				t.Errorf("pod CIDR %s given to both %s and %s", c, other, name)
			}
			cidrs[c] = name
		}
		t.Logf("%s initialized %s after start: pod CIDRs %v, taints %v", name, since(), n.Spec.PodCIDRs, n.Spec.Taints)
		if name != sim.Name && !hasTaint(n, corev1.TaintNodeNotReady) {
			t.Errorf("%s lost its not-ready taint (it has no CNI, so it cannot be Ready): %v", name, n.Spec.Taints)
		}
	}

	for _, node := range nodes {
		user := "system:node:" + node.Name
		csr := waitFor(ctx, t, nodes, "the coordinator to approve "+node.Name+"'s kubelet serving CSR", func() (*certificatesv1.CertificateSigningRequest, error) {
			list, err := cs.CertificatesV1().CertificateSigningRequests().List(ctx, metav1.ListOptions{})
			if err != nil {
				return nil, err
			}
			var seen []string
			for i, c := range list.Items {
				if c.Spec.SignerName != certificatesv1.KubeletServingSignerName || c.Spec.Username != user {
					continue
				}
				for _, cond := range c.Status.Conditions {
					if cond.Type == certificatesv1.CertificateApproved && cond.Reason == "NodeinitApproved" {
						return &list.Items[i], nil
					}
					seen = append(seen, fmt.Sprintf("%s %s %s: %s", c.Name, cond.Type, cond.Reason, cond.Message))
				}
				if len(c.Status.Conditions) == 0 {
					seen = append(seen, c.Name+" pending")
				}
			}
			return nil, fmt.Errorf("no serving CSR from %s approved by the coordinator: %v", user, seen)
		})
		n, err := cs.CoreV1().Nodes().Get(ctx, node.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		att, err := contract.DecodeAttestation(n.Annotations[contract.AnnotationCSRAttestation])
		if err != nil || !att.Approves(csr.Name, csr.Spec.Request) {
			t.Errorf("the approved CSR %s has no approval of its request from %s's agent on its Node: %+v, %v", csr.Name, node.Name, att, err)
		}
		t.Logf("%s's serving CSR %s approved by the coordinator (agent verdict %s) %s after start", node.Name, csr.Name, att.Verdict, since())
		servingCertificateIsServed(ctx, t, cs, nodes, node, cluster, csr)
		kubePrismAnswers(ctx, t, node, cluster)
	}
	t.Logf("converged %s after start", since())
}

// simulatedNode is a testnode (network namespace, machined, the kubelet
// stand-in's Node) with the nodeinit-agent binary running beside it,
// registered with its machined as the extension service.
func simulatedNode(t *testing.T, cluster *testcluster.Cluster, agent, name, ip string) *testnode.Node {
	t.Helper()
	n := testnode.New(t, cluster, testnode.Spec{Name: name, NodeIP: netip.MustParseAddr(ip), Unregistered: true,
		Metadata: talosruntime.PlatformMetadataSpec{Platform: "metal", Hostname: name}})
	log, err := os.Create(filepath.Join(t.TempDir(), "agent.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(agent, append([]string{"run"}, n.AgentArgs()...)...)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() {
			out, _ := os.ReadFile(log.Name())
			t.Logf("%s's agent:\n%s", name, out)
		}
		log.Close()
	})
	n.RegisterAgent(cmd.Process.Pid)
	return n
}

const uninitializedTaint = "node.cloudprovider.kubernetes.io/uninitialized"

// markControlPlane labels and taints the node as Talos does a control-plane
// node.
func markControlPlane(ctx context.Context, t *testing.T, cs kubernetes.Interface, name string) {
	t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n, err := cs.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		n.Labels["node-role.kubernetes.io/control-plane"] = ""
		if !hasTaint(n, "node-role.kubernetes.io/control-plane") {
			n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: "node-role.kubernetes.io/control-plane", Effect: corev1.TaintEffectNoSchedule})
		}
		_, err = cs.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

func coordinatorPods(ctx context.Context, cs kubernetes.Interface) ([]corev1.Pod, error) {
	list, err := cs.CoreV1().Pods("kube-system").List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=nodeinit-coordinator"})
	if err != nil {
		return nil, err
	}
	return list.Items, nil
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
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

// localImages are `make images`' tarballs for this architecture (the
// coordinator's, the agent pod's) and their tags.
func localImages(t *testing.T) (tags, tars []string) {
	root, _ := testcluster.RepoRoot()
	dir := filepath.Join(root, "bin", "images")
	for _, image := range []string{"nodeinit-coordinator", "nodeinit-agent-pod"} {
		tar := filepath.Join(dir, image+"-"+runtime.GOARCH+".tar")
		if _, err := os.Stat(tar); err != nil {
			t.Fatalf("%s is missing: run `make images` (make e2e does)", tar)
		}
		out, err := exec.Command("tar", "-xOf", tar, "manifest.json").Output()
		if err != nil {
			t.Fatal(err)
		}
		_, rest, _ := strings.Cut(string(out), `"RepoTags":["`)
		tag, _, _ := strings.Cut(rest, `"`)
		if tag == "" {
			t.Fatalf("no tag in %s", tar)
		}
		tars, tags = append(tars, tar), append(tags, tag)
	}
	return tags, tars
}

// agentStaticPod is the pod of extension/patches/static-pod.yaml as
// shipped, but for its image: image (the tag `make images` built).
func agentStaticPod(t *testing.T, image string) []byte {
	root, _ := testcluster.RepoRoot()
	data, err := os.ReadFile(filepath.Join(root, "extension", "patches", "static-pod.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var patch struct {
		Machine struct {
			Pods []map[string]any `json:"pods"`
		} `json:"machine"`
	}
	if err := yaml.Unmarshal(data, &patch); err != nil || len(patch.Machine.Pods) != 1 {
		t.Fatalf("extension/patches/static-pod.yaml: want one machine.pods entry: %v", err)
	}
	pod := patch.Machine.Pods[0]
	containers, _, _ := unstructured.NestedSlice(pod, "spec", "containers")
	if len(containers) != 1 {
		t.Fatalf("static pod has %d containers, want 1", len(containers))
	}
	containers[0].(map[string]any)["image"] = image
	if err := unstructured.SetNestedSlice(pod, containers, "spec", "containers"); err != nil {
		t.Fatal(err)
	}
	out, err := yaml.Marshal(pod)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func waitFor[T any](ctx context.Context, t *testing.T, nodes []*realnode.Node, what string, get func() (T, error)) T {
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
		for _, node := range nodes {
			if err := node.Failed(); err != nil {
				t.Fatalf("waiting for %s: %s: %v (last: %v)", what, node.Name, err, last)
			}
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

// servingCertificateIsServed waits for kube-controller-manager to sign the
// approved serving CSR and checks the kubelet's port 10250 then presents
// exactly that certificate, valid for the cluster CA and for the node's name
// and address.
func servingCertificateIsServed(ctx context.Context, t *testing.T, cs kubernetes.Interface, nodes []*realnode.Node, node *realnode.Node, cluster *testcluster.Cluster, csr *certificatesv1.CertificateSigningRequest) {
	t.Helper()
	issued := waitFor(ctx, t, nodes, "the serving certificate to be signed", func() (*x509.Certificate, error) {
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
	addr := net.JoinHostPort(node.NodeIP, "10250")
	served := waitFor(ctx, t, nodes, "port 10250 to serve the signed certificate", func() (*x509.Certificate, error) {
		raw, err := realnode.DialIn(node.CPNS.Path, addr)
		if err != nil {
			return nil, err
		}
		c := tls.Client(raw, &tls.Config{RootCAs: roots, ServerName: node.NodeIP})
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
	if err := served.VerifyHostname(node.Name); err != nil {
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
