package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"net/netip"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/talos-nodeinit/talos-nodeinit/pkg/apiclient"
	"github.com/talos-nodeinit/talos-nodeinit/pkg/contract"
)

// floorSigner is a signer no controller acts on, so the floor's CSRs cost
// the API server exactly their create and approval.
const floorSigner = "bench.nodeinit.io/floor"

// floor times the writes no implementation can avoid for n joins, issued as
// fast as possible on the same API server: the Node create, its status
// patch (the report with its addresses, as the agent writes it), the
// serving CSR's create, the initializing patch and the approval — 5 per
// join. Each join runs on its own goroutine, with clients spread over 16
// admin connections.
//
// With ownConnections, each node's three writes (the Node, its report, its
// CSR) go over that node's own connection as that node, as a kubelet's do
// in any cluster: the API server authenticates a client certificate per
// node, which no implementation avoids either. The coordinator's two stay
// on the admin connections. Every connection is opened before the clock
// starts, as the storm's are.
func floor(ctx context.Context, e *env, prefix string, n int, ownConnections bool) (time.Duration, error) {
	cfg := apiclient.Builtin(e.cluster.Admin())
	cfg.QPS, cfg.Burst = -1, 0 // no client-side rate limit
	clients := make([]kubernetes.Interface, 16)
	for i := range clients {
		var err error
		if clients[i], err = kubernetes.NewForConfig(cfg); err != nil {
			return 0, err
		}
	}
	nodeClients := make([]kubernetes.Interface, n)
	for i := range nodeClients {
		nodeClients[i] = clients[i%len(clients)]
		if !ownConnections {
			continue
		}
		name, _, _, _ := nodeSpec(prefix, i)
		id, err := e.cluster.NodeIdentity(name)
		if err != nil {
			return 0, err
		}
		if nodeClients[i], err = kubernetes.NewForConfig(apiclient.Builtin(id.Config())); err != nil {
			return 0, err
		}
	}
	csrPEM, err := requestPEM("system:node:floor")
	if err != nil {
		return 0, err
	}

	// Every connection is open before the clock starts, as the storm's
	// kubelets' and agents' are: the handshakes are not part of the joins.
	if err := parallel(n, 64, func(i int) error {
		if i < len(clients) {
			if _, err := clients[i].Discovery().ServerVersion(); err != nil {
				return err
			}
		}
		_, err := nodeClients[i].Discovery().ServerVersion()
		return err
	}); err != nil {
		return 0, fmt.Errorf("floor: opening the connections: %w", err)
	}

	start := time.Now()
	err = parallel(n, n, func(i int) error {
		return floorJoin(ctx, nodeClients[i], clients[i%len(clients)], prefix, i, csrPEM)
	})
	return time.Since(start), err
}

// floorJoin makes one join's 5 writes: node's three, then coord's two.
func floorJoin(ctx context.Context, node, coord kubernetes.Interface, prefix string, i int, csrPEM []byte) error {
	name, ip, ip6, _ := nodeSpec(prefix, i)
	nodes := node.CoreV1().Nodes()
	obj := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"kubernetes.io/hostname": name}},
		Spec:       corev1.NodeSpec{Taints: []corev1.Taint{{Key: contract.TaintUninitialized, Value: "true", Effect: corev1.TaintEffectNoSchedule}}},
	}
	if _, err := nodes.Create(ctx, obj, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("floor: %w", err)
	}
	report, _ := json.Marshal(map[string]any{
		"metadata": map[string]any{"labels": map[string]string{"topology.kubernetes.io/zone": "floor"}, "annotations": map[string]string{contract.AnnotationPrefixes: ip6.Masked().String()}},
		"status":   map[string]any{"addresses": []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: ip.String()}, {Type: corev1.NodeHostName, Address: name}}},
	})
	if _, err := nodes.Patch(ctx, name, types.MergePatchType, report, metav1.PatchOptions{}, "status"); err != nil {
		return fmt.Errorf("floor: %w", err)
	}
	csr, err := node.CertificatesV1().CertificateSigningRequests().Create(ctx, &certificatesv1.CertificateSigningRequest{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: certificatesv1.CertificateSigningRequestSpec{Request: csrPEM, SignerName: floorSigner,
			Usages: []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageServerAuth}},
	}, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("floor: %w", err)
	}
	v4 := netip.PrefixFrom(netip.AddrFrom4([4]byte{172, byte(16 + i/256), byte(i % 256), 0}), 24) // one /24 per join
	init, _ := json.Marshal(map[string]any{"spec": map[string]any{"podCIDR": v4.String(), "podCIDRs": []string{v4.String()},
		"taints": []corev1.Taint{}}})
	if _, err := coord.CoreV1().Nodes().Patch(ctx, name, types.StrategicMergePatchType, init, metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("floor: %w", err)
	}
	csr.Status.Conditions = append(csr.Status.Conditions, certificatesv1.CertificateSigningRequestCondition{
		Type: certificatesv1.CertificateApproved, Status: corev1.ConditionTrue, Reason: "Floor", Message: "floor"})
	if _, err := coord.CertificatesV1().CertificateSigningRequests().UpdateApproval(ctx, name, csr, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("floor: %w", err)
	}
	return nil
}

// requestPEM is a PEM certificate request for a fresh key, common name cn.
func requestPEM(cn string) ([]byte, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{Subject: pkix.Name{CommonName: cn, Organization: []string{"system:nodes"}}}, key)
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}), nil
}
