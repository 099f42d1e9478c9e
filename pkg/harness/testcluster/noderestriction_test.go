package testcluster_test

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
	authenticationv1 "k8s.io/api/authentication/v1"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"github.com/talos-nodeinit/talos-nodeinit/pkg/contract"
	"github.com/talos-nodeinit/talos-nodeinit/pkg/harness/testcluster"
)

var cluster *testcluster.Cluster

func TestMain(m *testing.M) {
	os.Exit(testcluster.Main(m, &cluster, testcluster.Options{ControllerManager: true, AuditLog: true}))
}

// nodeClient registers a Node with its own identity, as a kubelet does, and
// returns a clientset authenticated as that node.
func nodeClient(t *testing.T, name string) kubernetes.Interface {
	t.Helper()
	id, err := cluster.NodeIdentity(name)
	if err != nil {
		t.Fatal(err)
	}
	cs := kubernetes.NewForConfigOrDie(id.Config())
	_, err = cs.CoreV1().Nodes().Create(context.Background(), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("node %s cannot register itself: %v", name, err)
	}
	return cs
}

func adminClient(t *testing.T) kubernetes.Interface {
	t.Helper()
	return kubernetes.NewForConfigOrDie(cluster.Admin())
}

func mergePatch(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestNodeIdentityLimits runs every row of DESIGN.md §2 against the real API
// server with a node identity, and checks the label rows against
// contract.NodeMaySetLabel. When Kubernetes changes what a node may do, this
// test says which row moved.
func TestNodeIdentityLimits(t *testing.T) {
	ctx := context.Background()
	self := nodeClient(t, "limits-self")
	other := nodeClient(t, "limits-other")
	_ = other
	admin := adminClient(t)
	// The admin gives the node a taint so there is something to remove or change.
	_, err := admin.CoreV1().Nodes().Patch(ctx, "limits-self", types.MergePatchType,
		mergePatch(t, map[string]any{"spec": map[string]any{"taints": []corev1.Taint{{Key: "example.com/t", Effect: corev1.TaintEffectNoSchedule}}}}), metav1.PatchOptions{})
	if err != nil {
		t.Fatal(err)
	}

	// The agent writes its labels through nodes/status (one write with its
	// addresses): NodeRestriction must check them there as on the Node.
	labelPatch := func(key string, subresource ...string) func() error {
		return func() error {
			_, err := self.CoreV1().Nodes().Patch(ctx, "limits-self", types.MergePatchType,
				mergePatch(t, map[string]any{"metadata": map[string]any{"labels": map[string]string{key: "x"}}}), metav1.PatchOptions{}, subresource...)
			return err
		}
	}
	specPatch := func(spec map[string]any) func() error {
		return func() error {
			_, err := self.CoreV1().Nodes().Patch(ctx, "limits-self", types.MergePatchType,
				mergePatch(t, map[string]any{"spec": spec}), metav1.PatchOptions{})
			return err
		}
	}

	type row struct {
		name    string
		do      func() error
		wantErr string // "" means allowed
	}
	// refusedSince is the first Kubernetes minor that refuses a row; older
	// ones allow it. The Node authorizer's field selectors
	// (AuthorizeNodeWithSelectors: alpha in 1.31, on by default from 1.32):
	// before, a node reads every Node.
	refusedSince := map[string]int{"GET another Node": 32, "list all Nodes": 32}
	// refusedWithSince: from this minor on a row is refused with another
	// error, by an earlier stage. From 1.37 spec.providerID is immutable
	// once set for every client (API validation, before NodeRestriction).
	refusedWithSince := map[string]struct {
		minor int
		err   string
	}{"providerID changed": {37, "spec.providerID: Invalid value"}}
	var rows []row
	info, err := admin.Discovery().ServerVersion()
	if err != nil {
		t.Fatal(err)
	}
	minor, err := strconv.Atoi(strings.TrimSuffix(info.Minor, "+"))
	if err != nil {
		t.Fatalf("server minor %q: %v", info.Minor, err)
	}
	allowedLabels := []string{
		"topology.kubernetes.io/zone", "topology.kubernetes.io/region",
		"node.kubernetes.io/instance-type", "node.kubernetes.io/custom", "kubernetes.io/hostname",
		"example.com/x", "unprefixed",
	}
	forbiddenLabels := []string{
		"node-role.kubernetes.io/worker", "node-role.kubernetes.io/control-plane",
		"node.cloudprovider.kubernetes.io/platform", "kubernetes.io/other", "foo.k8s.io/x",
		"node-restriction.kubernetes.io/x",
	}
	for _, k := range allowedLabels {
		rows = append(rows, row{"label " + k, labelPatch(k), ""}, row{"label by status patch " + k, labelPatch(k, "status"), ""})
	}
	for _, k := range forbiddenLabels {
		rows = append(rows, row{"label " + k, labelPatch(k), "is not allowed to modify labels: " + k},
			row{"label by status patch " + k, labelPatch(k, "status"), "is not allowed to modify labels: " + k})
	}
	rows = append(rows,
		row{"any annotation", func() error {
			_, err := self.CoreV1().Nodes().Patch(ctx, "limits-self", types.MergePatchType,
				mergePatch(t, map[string]any{"metadata": map[string]any{"annotations": map[string]string{"node-role.kubernetes.io/x": "y", "nodeinit.io/z": "{}"}}}), metav1.PatchOptions{})
			return err
		}, ""},
		row{"add a taint", specPatch(map[string]any{"taints": []corev1.Taint{
			{Key: "example.com/t", Effect: corev1.TaintEffectNoSchedule}, {Key: "example.com/new", Effect: corev1.TaintEffectNoSchedule}}}),
			`node "limits-self" is not allowed to modify taints`},
		row{"change a taint", specPatch(map[string]any{"taints": []corev1.Taint{{Key: "example.com/t", Value: "v", Effect: corev1.TaintEffectNoSchedule}}}),
			`node "limits-self" is not allowed to modify taints`},
		row{"remove a taint", specPatch(map[string]any{"taints": nil}), `node "limits-self" is not allowed to modify taints`},
		row{"providerID from empty", specPatch(map[string]any{"providerID": "talos://metal/192.0.2.1"}), ""},
		row{"providerID changed", specPatch(map[string]any{"providerID": "talos://metal/192.0.2.2"}), "node updates may not change providerID except from \"\" to valid"},
		row{"podCIDRs from empty", specPatch(map[string]any{"podCIDR": "10.244.1.0/24", "podCIDRs": []string{"10.244.1.0/24"}}), ""},
		row{"podCIDRs changed", specPatch(map[string]any{"podCIDR": "10.244.2.0/24", "podCIDRs": []string{"10.244.2.0/24"}}), "node updates may not change podCIDR except from \"\" to valid"},
		row{"status.addresses by direct status patch", func() error {
			_, err := self.CoreV1().Nodes().Patch(ctx, "limits-self", types.StrategicMergePatchType,
				mergePatch(t, map[string]any{"status": map[string]any{"addresses": []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "192.0.2.1"}}}}), metav1.PatchOptions{}, "status")
			return err
		}, ""},
		row{"the report in one status patch: labels, annotations and addresses all land", func() error {
			n, err := self.CoreV1().Nodes().Patch(ctx, "limits-self", types.MergePatchType, mergePatch(t, map[string]any{
				"metadata": map[string]any{"labels": map[string]string{"example.com/report": "1"}, "annotations": map[string]string{"nodeinit.io/report": "1"}},
				"status":   map[string]any{"addresses": []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "192.0.2.9"}}},
			}), metav1.PatchOptions{}, "status")
			switch {
			case err != nil:
				return err
			case n.Labels["example.com/report"] != "1" || n.Annotations["nodeinit.io/report"] != "1" ||
				len(n.Status.Addresses) != 1 || n.Status.Addresses[0].Address != "192.0.2.9":
				return fmt.Errorf("the status patch did not land whole: labels %v, annotations %v, addresses %v", n.Labels, n.Annotations, n.Status.Addresses)
			}
			return nil
		}, ""},
		row{"spec by status patch is ignored", func() error {
			n, err := self.CoreV1().Nodes().Patch(ctx, "limits-self", types.MergePatchType,
				mergePatch(t, map[string]any{"spec": map[string]any{"unschedulable": true}}), metav1.PatchOptions{}, "status")
			if err == nil && n.Spec.Unschedulable {
				return fmt.Errorf("spec.unschedulable set through nodes/status")
			}
			return err
		}, ""},
		row{"GET nodes/status", func() error {
			return self.CoreV1().RESTClient().Get().Resource("nodes").Name("limits-self").SubResource("status").Do(ctx).Error()
		}, `User "system:node:limits-self" cannot get resource "nodes/status"`},
		row{"GET own Node", func() error { _, err := self.CoreV1().Nodes().Get(ctx, "limits-self", metav1.GetOptions{}); return err }, ""},
		row{"list own Node by field selector", func() error {
			_, err := self.CoreV1().Nodes().List(ctx, metav1.ListOptions{FieldSelector: "metadata.name=limits-self"})
			return err
		}, ""},
		row{"GET another Node", func() error {
			_, err := self.CoreV1().Nodes().Get(ctx, "limits-other", metav1.GetOptions{})
			return err
		},
			`cannot get resource "nodes"`},
		row{"patch another Node", func() error {
			_, err := self.CoreV1().Nodes().Patch(ctx, "limits-other", types.MergePatchType, []byte(`{"metadata":{"annotations":{"a":"b"}}}`), metav1.PatchOptions{})
			return err
		}, `node "limits-self" is not allowed to modify node "limits-other"`},
		row{"list all Nodes", func() error { _, err := self.CoreV1().Nodes().List(ctx, metav1.ListOptions{}); return err },
			`cannot list resource "nodes"`},
		row{"create its own kubelet-serving CSR", func() error { return createServingCSR(ctx, self, "limits-csr", "limits-self") }, ""},
		row{"get, list and watch CSRs", func() error {
			if _, err := self.CertificatesV1().CertificateSigningRequests().Get(ctx, "limits-csr", metav1.GetOptions{}); err != nil {
				return err
			}
			if _, err := self.CertificatesV1().CertificateSigningRequests().List(ctx, metav1.ListOptions{}); err != nil {
				return err
			}
			w, err := self.CertificatesV1().CertificateSigningRequests().Watch(ctx, metav1.ListOptions{})
			if err == nil {
				w.Stop()
			}
			return err
		}, ""},
		row{"approve a CSR", func() error {
			csr, err := self.CertificatesV1().CertificateSigningRequests().Get(ctx, "limits-csr", metav1.GetOptions{})
			if err != nil {
				return err
			}
			csr.Status.Conditions = append(csr.Status.Conditions, certificatesv1.CertificateSigningRequestCondition{
				Type: certificatesv1.CertificateApproved, Status: corev1.ConditionTrue, Reason: "Self", Message: "self-approved"})
			_, err = self.CertificatesV1().CertificateSigningRequests().UpdateApproval(ctx, "limits-csr", csr, metav1.UpdateOptions{})
			return err
		}, `cannot update resource "certificatesigningrequests/approval"`},
	)

	for _, r := range rows {
		t.Run(r.name, func(t *testing.T) {
			if minor < refusedSince[r.name] {
				r.wantErr = ""
			}
			if w, ok := refusedWithSince[r.name]; ok && minor >= w.minor {
				r.wantErr = w.err
			}
			err := r.do()
			switch {
			case r.wantErr == "" && err != nil:
				t.Fatalf("want allowed, got: %v", err)
			case r.wantErr != "" && err == nil:
				t.Fatalf("want refused with %q, but it was allowed", r.wantErr)
			case r.wantErr != "" && !strings.Contains(err.Error(), r.wantErr):
				t.Fatalf("refused, but the error %q does not contain %q", err, r.wantErr)
			}
		})
	}

	// The pure rule in pkg/contract must agree with the server on every label row.
	for _, k := range allowedLabels {
		if !contract.NodeMaySetLabel(k) {
			t.Errorf("the API server lets a node set %q, contract.NodeMaySetLabel says no", k)
		}
	}
	for _, k := range forbiddenLabels {
		if contract.NodeMaySetLabel(k) {
			t.Errorf("the API server forbids a node %q, contract.NodeMaySetLabel says yes", k)
		}
	}
}

// createServingCSR creates a kubelet-serving CSR for node as that node.
func createServingCSR(ctx context.Context, cs kubernetes.Interface, name, node string) error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{
		Subject:  pkix.Name{CommonName: "system:node:" + node, Organization: []string{"system:nodes"}},
		DNSNames: []string{node},
	}, key)
	if err != nil {
		return err
	}
	_, err = cs.CertificatesV1().CertificateSigningRequests().Create(ctx, &certificatesv1.CertificateSigningRequest{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: certificatesv1.CertificateSigningRequestSpec{
			Request:    pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}),
			SignerName: certificatesv1.KubeletServingSignerName,
			Usages:     []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageServerAuth},
		},
	}, metav1.CreateOptions{})
	return err
}

// TestServiceAccountIdentity checks the TokenRequest identity is who it says.
func TestServiceAccountIdentity(t *testing.T) {
	ctx := context.Background()
	cfg, err := cluster.ServiceAccountIdentity(ctx, "kube-system", "sa-probe")
	if err != nil {
		t.Fatal(err)
	}
	cs := kubernetes.NewForConfigOrDie(cfg)
	review, err := cs.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := review.Status.UserInfo.Username, "system:serviceaccount:kube-system:sa-probe"; got != want {
		t.Fatalf("token authenticates as %q, want %q", got, want)
	}
	// With no RBAC bound it can do nothing.
	if _, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{}); err == nil || !strings.Contains(err.Error(), "forbidden") {
		t.Fatalf("an unbound ServiceAccount listed nodes: %v", err)
	}
}

// TestAuditCountsMutations checks the audit log sees a node's writes, so later
// tests can count requests at the API server rather than in our own code.
func TestAuditCountsMutations(t *testing.T) {
	ctx := context.Background()
	self := nodeClient(t, "audit-node")
	for i := 0; i < 3; i++ {
		_, err := self.CoreV1().Nodes().Patch(ctx, "audit-node", types.MergePatchType,
			[]byte(fmt.Sprintf(`{"metadata":{"annotations":{"n":"%d"}}}`, i)), metav1.PatchOptions{})
		if err != nil {
			t.Fatal(err)
		}
	}
	patches := 0
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 5*time.Second, true, func(context.Context) (bool, error) {
		events, err := cluster.Audit()
		patches = 0
		for _, e := range events {
			if e.User.Username == "system:node:audit-node" && e.Verb == "patch" && e.ObjectRef.Resource == "nodes" {
				patches++
			}
		}
		return patches == 3, err
	})
	if err != nil {
		t.Fatalf("audit log shows %d patches by audit-node, want 3: %v", patches, err)
	}
}
