package talosnode

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/talos-nodeinit/talos-nodeinit/pkg/contract"
	"github.com/talos-nodeinit/talos-nodeinit/pkg/harness/gobuild"
	"github.com/talos-nodeinit/talos-nodeinit/pkg/harness/testcluster"
)

// Talos's own kubelet service, as Talos runs it (two settings for this
// host: failCgroupV1 false, and hack/talos's kubelet-cgroup-v1 patch): machined pulls the
// kubelet image (built here from the kubelet binary, served from the
// registry inside the node where the machine config mirrors ghcr.io),
// starts it in the CRI containerd, and the kubelet bootstraps with the
// cluster's bootstrap token, registers its Node with the uninitialized
// taint (external cloud provider) and asks for its serving certificate.
// The extension, with its shipped dependencies but configuration: true
// (never satisfied in container mode), starts once Talos wrote the
// kubelet's kubeconfig; the coordinator finishes the Node.
func TestRealKubelet(t *testing.T) {
	if os.Getuid() != 0 {
		t.Fatal("needs root: namespaces, mounts and veths (make e2e-talos runs as root)")
	}
	const name, addr = "talos-w4", "10.231.4.2"
	root := repoRoot(t)
	parts := Build(t, root)
	ctx, cancel := context.WithTimeout(t.Context(), 150*time.Second)
	defer cancel()
	bootstrapToken(t, ctx, "abcdef", "0123456789abcdef")
	startCoordinator(t, ctx, root)

	agent := gobuild.Binary(t, filepath.Join(root, "agent"))
	shipped, err := os.ReadFile(filepath.Join(root, "extension/nodeinit-agent.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	spec := withoutLines(string(shipped), "  - configuration: true")
	bins, err := testcluster.BinDir()
	if err != nil {
		t.Fatal(err)
	}
	kubelet := filepath.Join(bins, "kubelet")
	if _, err := os.Stat(kubelet); err != nil {
		t.Fatalf("the kubelet binary: %v (make e2e-talos builds it with kube-tools)", err)
	}
	// The image is tagged with the kubelet's own version (the control plane's).
	out, err := exec.Command(kubelet, "--version").Output()
	if err != nil {
		t.Fatalf("kubelet --version: %v", err)
	}
	version := strings.TrimPrefix(strings.TrimSpace(string(out)), "Kubernetes ")
	mc := string(workerConfig(t, name, cluster.Host(), cluster.CAPEM()))
	mc = strings.Replace(mc, "    image: ghcr.io/siderolabs/kubelet:v1.37.0\n", "    image: ghcr.io/siderolabs/kubelet:"+version+"\n    extraArgs:\n      rotate-server-certificates: \"true\"\n"+
		// This host has cgroup v1, which kubelets refuse by default since 1.35.
		"    extraConfig:\n      failCgroupV1: false\n", 1)
	mc = strings.Replace(mc, "cluster:\n", "cluster:\n  externalCloudProvider:\n    enabled: true\n", 1)
	n := Prepare(t, parts, Config{Name: name, Address: addr, MachineCfg: []byte(mc),
		Extensions: []Extension{{Name: "nodeinit-agent", Spec: []byte(spec), Files: map[string]string{"nodeinit-agent": agent}}}})
	serveImages(t, n.NetNS(), map[string]imageSpec{
		// As in Talos's kubelet image, /run is /var/run, where Talos mounts the node's /run.
		"siderolabs/kubelet:" + version: {file: kubelet, path: "usr/local/bin/kubelet", entrypoint: "/usr/local/bin/kubelet", symlinks: map[string]string{"run": "var/run"},
			files: map[string][]byte{"etc/passwd": []byte("root:x:0:0:root:/root:/bin/sh\n"), "etc/group": []byte("root:x:0:\n")}},
	})
	forwardAPIServer(t, n.NetNS(), cluster.Host())
	n.Boot(t)

	admin := kubernetes.NewForConfigOrDie(cluster.Admin())
	var node *corev1.Node
	for {
		node, err = admin.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err == nil && initializedWithCIDR(node) && node.Annotations[contract.AnnotationMetadata] != "" {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("Node %s not registered by Talos's kubelet and initialized: %v (node %v)", name, ctx.Err(), node)
		case <-time.After(time.Second):
		}
	}
	t.Logf("Node %s registered by Talos's kubelet, initialized: podCIDRs %v, addresses %v", name, node.Spec.PodCIDRs, node.Status.Addresses)
	// machined's own API (ServiceList, from inside the extension's container):
	// its kubelet service running and healthy, the extension running.
	svc := waitServices(t, ctx, n, root, func(all map[string]Service) bool {
		return all["kubelet"].State == "Running" && all["kubelet"].Healthy && all["ext-nodeinit-agent"].State == "Running"
	})
	t.Logf("machined's ServiceList: kubelet %s (healthy), ext-nodeinit-agent %s", svc["kubelet"].State, svc["ext-nodeinit-agent"].State)
	// The kubelet's serving CSR (rotate-server-certificates), approved on
	// the agent's attestation and signed.
	for {
		csrs, err := admin.CertificatesV1().CertificateSigningRequests().List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range csrs.Items {
			if c.Spec.SignerName == certificatesv1.KubeletServingSignerName && c.Spec.Username == "system:node:"+name && len(c.Status.Certificate) > 0 {
				t.Logf("the kubelet's serving CSR %s approved and issued", c.Name)
				return
			}
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the kubelet's serving CSR was not issued: %v", ctx.Err())
		case <-time.After(time.Second):
		}
	}
}

// bootstrapToken creates a bootstrap token and the RBAC kubeadm gives it:
// nodes join with it, their client certificates are approved automatically.
func bootstrapToken(t *testing.T, ctx context.Context, id, secret string) {
	t.Helper()
	cs := kubernetes.NewForConfigOrDie(cluster.Admin())
	_, err := cs.CoreV1().Secrets("kube-system").Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "bootstrap-token-" + id},
		Type:       corev1.SecretTypeBootstrapToken,
		StringData: map[string]string{"token-id": id, "token-secret": secret, "usage-bootstrap-authentication": "true", "usage-bootstrap-signing": "true"},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for bname, binding := range map[string][2]string{
		"talosnode-bootstrap":   {"system:node-bootstrapper", "system:bootstrappers"},
		"talosnode-autoapprove": {"system:certificates.k8s.io:certificatesigningrequests:nodeclient", "system:bootstrappers"},
		"talosnode-autorenew":   {"system:certificates.k8s.io:certificatesigningrequests:selfnodeclient", "system:nodes"},
	} {
		_, err := cs.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: bname},
			RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: binding[0]},
			Subjects:   []rbacv1.Subject{{Kind: "Group", APIGroup: "rbac.authorization.k8s.io", Name: binding[1]}},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(fmt.Errorf("%s: %w", bname, err))
		}
	}
}
