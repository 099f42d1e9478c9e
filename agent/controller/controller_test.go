package controller_test

import (
	"context"
	"crypto/ed25519"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/siderolabs/talos/pkg/machinery/resources/runtime"
	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"

	"github.com/talos-nodeinit/talos-nodeinit/agent/controller"
	"github.com/talos-nodeinit/talos-nodeinit/pkg/agentkey"
	"github.com/talos-nodeinit/talos-nodeinit/pkg/contract"
	"github.com/talos-nodeinit/talos-nodeinit/pkg/csrcheck"
	"github.com/talos-nodeinit/talos-nodeinit/pkg/csrcheck/csrtest"
	"github.com/talos-nodeinit/talos-nodeinit/pkg/desired"
	"github.com/talos-nodeinit/talos-nodeinit/pkg/harness/syncbuf"
	"github.com/talos-nodeinit/talos-nodeinit/pkg/harness/testcluster"
	"github.com/talos-nodeinit/talos-nodeinit/pkg/harness/testnode"
	"github.com/talos-nodeinit/talos-nodeinit/pkg/netaddr"
	"github.com/talos-nodeinit/talos-nodeinit/pkg/netaddr/netnstest"
	"github.com/talos-nodeinit/talos-nodeinit/pkg/rules"
	"github.com/talos-nodeinit/talos-nodeinit/pkg/rulesource"
	"github.com/talos-nodeinit/talos-nodeinit/pkg/talos"
	"github.com/talos-nodeinit/talos-nodeinit/pkg/talosccm"
)

var cluster *testcluster.Cluster

func TestMain(m *testing.M) {
	os.Exit(testcluster.Main(m, &cluster, testcluster.Options{AuditLog: true, AfterTests: testnode.Close}))
}

// The rules of the Talos CCM documentation (reference/000), plus a label in
// a domain the node may set itself and an annotation (so owned-annotations
// is written at join, in the same patch).
const ccmRules = `transformations:
- name: nocloud-nodes
  nodeSelector:
  - matchExpressions:
    - key: platform
      operator: In
      values: [nocloud]
  labels:
    pvc-storage-class/name: "my-storage-class"
- name: web-nodes
  nodeSelector:
  - matchExpressions:
    - key: platform
      operator: In
      values: [metal]
    - key: hostname
      operator: Regexp
      values: ['^web-[w]+$']
  labels:
    node-role.kubernetes.io/web: ""
    example.com/tier: web
  annotations:
    example.com/instance-id: "id-{{ .Hostname }}"
  taints:
    dedicated: web:NoSchedule
`

// node is one node under test, with an admin client to observe it.
type node struct {
	*testnode.Node
	name  string
	ns    *netnstest.NS
	id    *testcluster.NodeIdentity
	admin kubernetes.Interface
}

func newNode(t *testing.T, name string, ip string, md runtime.PlatformMetadataSpec) *node {
	t.Helper()
	n := testnode.New(t, cluster, testnode.Spec{
		Name: name, NodeIP: netip.MustParseAddr(ip), Metadata: md,
		Addresses: []string{"203.0.113.10/24", "2001:db8:1:2::10/64"},
	})
	return &node{Node: n, name: name, ns: n.NS, id: n.Identity, admin: kubernetes.NewForConfigOrDie(cluster.Admin())}
}

// agent runs the controller in-process, as the node, until stopped.
type agent struct {
	*controller.Agent
	metrics *controller.Metrics
	stop    func()
}

func (n *node) startAgent(t *testing.T, rulesYAML string, opts ...func(*controller.Config)) *agent {
	t.Helper()
	rs, err := rules.Load([]byte(rulesYAML))
	if err != nil {
		t.Fatal(err)
	}
	m := controller.NewMetrics(prometheus.NewRegistry())
	key, _, err := agentkey.LoadOrCreate(n.KeyFile)
	if err != nil {
		t.Fatal(err)
	}
	cfg := controller.Config{
		Kubeconfig: n.id.Kubeconfig, CredentialsPoll: 200 * time.Millisecond,
		Facts: (&talos.Reader{Socket: n.Machined.Socket, Log: quiet()}).Watch,
		NetNS: n.ns.Path, Rules: rs, Classifier: netaddr.NewClassifier(),
		Policy: desired.ProviderIDTalosFallback, Version: "test", Metrics: m, Key: key,
		Log: slog.New(slog.NewTextHandler(testWriter{t}, nil)).With("node", n.name),
	}
	for _, o := range opts {
		o(&cfg)
	}
	a, err := controller.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	stopped := false
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("agent returned %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Error("agent did not stop within 10s of cancellation")
		}
	}
	t.Cleanup(stop)
	return &agent{Agent: a, metrics: m, stop: stop}
}

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

// waitNode watches the Node as admin until cond holds of a version of it,
// returning how long it took.
func (n *node) waitNode(t *testing.T, timeout time.Duration, what string, cond func(*corev1.Node) bool) time.Duration {
	t.Helper()
	start := time.Now()
	ctx, cancel := context.WithTimeout(t.Context(), timeout)
	defer cancel()
	var last *corev1.Node
	lw := cache.NewListWatchFromClient(n.admin.CoreV1().RESTClient(), "nodes", "", fields.OneTermEqualSelector("metadata.name", n.name))
	_, err := watchtools.UntilWithSync(ctx, lw, &corev1.Node{}, nil, func(e watch.Event) (bool, error) {
		got, ok := e.Object.(*corev1.Node)
		if !ok || e.Type == watch.Deleted {
			return false, nil
		}
		last = got
		return cond(got), nil
	})
	if err == nil {
		return time.Since(start)
	}
	if last != nil {
		t.Fatalf("%s: not within %v; labels=%v annotations=%v providerID=%q addresses=%v", what, timeout, last.Labels, last.Annotations, last.Spec.ProviderID, last.Status.Addresses)
	}
	t.Fatalf("%s: not within %v", what, timeout)
	return 0
}

func hasAddress(n *corev1.Node, typ corev1.NodeAddressType, addr string) bool {
	return slices.Contains(n.Status.Addresses, corev1.NodeAddress{Type: typ, Address: addr})
}

// agentWrites counts the mutating requests the agent made for this node,
// as the API server's audit log recorded them.
func agentWrites(t *testing.T, nodeName string) []testcluster.AuditEvent {
	t.Helper()
	events, err := cluster.Audit()
	if err != nil {
		t.Fatal(err)
	}
	return slices.DeleteFunc(events, func(e testcluster.AuditEvent) bool {
		return e.User.Username != "system:node:"+nodeName || !strings.HasPrefix(e.UserAgent, "nodeinit-agent/")
	})
}

// resyncs makes the agent resync count times: an admin touches an
// annotation it does not own, so its Node watch fires, and the sync
// counter is the sync point, not a sleep.
func (n *node) resyncs(t *testing.T, a *agent, count int) {
	t.Helper()
	for i := range count {
		synced := testutil.ToFloat64(a.metrics.Syncs.WithLabelValues("ok"))
		poke := fmt.Appendf(nil, `{"metadata":{"annotations":{"example.com/poke":"%d"}}}`, i)
		if _, err := n.admin.CoreV1().Nodes().Patch(t.Context(), n.name, types.MergePatchType, poke, metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
		if !eventually(t, 10*time.Second, func() bool { return testutil.ToFloat64(a.metrics.Syncs.WithLabelValues("ok")) > synced }) {
			t.Fatal("the agent did not resync after its Node changed")
		}
	}
}

// eventually polls cond until it holds (true) or d has passed (false).
func eventually(t *testing.T, d time.Duration, cond func() bool) bool {
	t.Helper()
	return wait.PollUntilContextTimeout(t.Context(), 10*time.Millisecond, d, true, func(context.Context) (bool, error) {
		return cond(), nil
	}) == nil
}

func metal(hostname string) runtime.PlatformMetadataSpec {
	return runtime.PlatformMetadataSpec{Platform: "metal", Hostname: hostname, Region: "eu-west", Zone: "eu-west-1a", InstanceType: "m1.large"}
}

func TestJoinThenSteadyStateWritesNothing(t *testing.T) {
	n := newNode(t, "web-www", "10.0.0.10", metal("web-www"))
	a := n.startAgent(t, ccmRules)

	took := n.waitNode(t, 20*time.Second, "the agent's report", func(node *corev1.Node) bool {
		return node.Annotations[contract.AnnotationMetadata] != "" && node.Annotations[contract.AnnotationPrefixes] != "" &&
			hasAddress(node, corev1.NodeExternalIP, "203.0.113.10")
	})
	t.Logf("join: node written %v after the agent started", took)
	node, err := n.admin.CoreV1().Nodes().Get(t.Context(), n.name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}

	for k, v := range map[string]string{
		"topology.kubernetes.io/region": "eu-west", "topology.kubernetes.io/zone": "eu-west-1a",
		"node.kubernetes.io/instance-type": "m1.large", "example.com/tier": "web",
	} {
		if node.Labels[k] != v {
			t.Errorf("label %s = %q, want %q", k, node.Labels[k], v)
		}
	}
	if _, ok := node.Labels["node-role.kubernetes.io/web"]; ok {
		t.Error("node-role.kubernetes.io/web is forbidden to nodes; the agent must request it, not set it")
	}
	ownedNotes, err := contract.DecodeKeys(contract.AnnotationOwnedAnnotations, node.Annotations[contract.AnnotationOwnedAnnotations])
	if node.Annotations["example.com/instance-id"] != "id-web-www" || err != nil || !slices.Equal(ownedNotes, []string{"example.com/instance-id"}) {
		t.Errorf("rule annotation = %q, owned-annotations = %v (%v)", node.Annotations["example.com/instance-id"], ownedNotes, err)
	}
	requested, err := contract.DecodeRequestedLabels(node.Annotations[contract.AnnotationRequestedLabels])
	if err != nil || requested["node-role.kubernetes.io/web"] != "" || len(requested) != 1 {
		t.Errorf("requested-labels = %v (%v), want exactly node-role.kubernetes.io/web", requested, err)
	}
	taints, err := contract.DecodeRequestedTaints(node.Annotations[contract.AnnotationRequestedTaints])
	if err != nil || len(taints) != 1 || taints[0] != (contract.Taint{Key: "dedicated", Value: "web", Effect: corev1.TaintEffectNoSchedule}) {
		t.Errorf("requested-taints = %v (%v)", taints, err)
	}
	md, err := contract.DecodeMetadata(node.Annotations[contract.AnnotationMetadata])
	if err != nil || md.Platform != "metal" || md.Region != "eu-west" || md.AgentVersion != "test" || md.AgentKey == "" {
		t.Errorf("metadata = %+v (%v)", md, err)
	}
	// The Node waits for its initialization: the providerID is asked for in
	// the report, for the coordinator's initializing patch to set.
	if got, want := md.SetProviderID, "talos://metal/10.0.0.10"; got != want || node.Spec.ProviderID != "" {
		t.Errorf("report asks for providerID %q, want %q; spec.providerID %q, want none before the initialization", got, want, node.Spec.ProviderID)
	}
	wantAddrs := []corev1.NodeAddress{
		{Type: corev1.NodeInternalIP, Address: "10.0.0.10"},
		{Type: corev1.NodeExternalIP, Address: "203.0.113.10"},
		{Type: corev1.NodeExternalIP, Address: "2001:db8:1:2::10"},
		{Type: corev1.NodeHostName, Address: "web-www"},
	}
	if !slices.Equal(node.Status.Addresses, wantAddrs) {
		t.Errorf("status.addresses = %v, want %v", node.Status.Addresses, wantAddrs)
	}
	prefixes, err := contract.DecodePrefixes(node.Annotations[contract.AnnotationPrefixes])
	if err != nil || !slices.Equal(prefixes, []netip.Prefix{netip.MustParsePrefix("2001:db8:1:2::/64")}) {
		t.Errorf("prefixes = %v (%v)", prefixes, err)
	}
	if slices.ContainsFunc(node.Spec.Taints, func(t corev1.Taint) bool { return t.Key == "dedicated" }) {
		t.Error("the agent must never write taints")
	}

	// The agent's writes, counted by the API server: one status patch, the
	// report with its addresses, as the node itself.
	writes := agentWrites(t, n.name)
	var kinds []string
	for _, e := range writes {
		kinds = append(kinds, e.Verb+" "+e.ObjectRef.Resource+"/"+e.ObjectRef.Subresource)
		if e.ObjectRef.Name != n.name || e.ResponseStatus.Code != 200 {
			t.Errorf("agent write %+v: must be a successful write to its own Node", e)
		}
	}
	slices.Sort(kinds)
	if !slices.Equal(kinds, []string{"patch nodes/status"}) {
		t.Errorf("join writes = %q, want one status patch", kinds)
	}

	// Steady state: the agent resyncs (an admin touches an annotation it
	// does not own, so its Node watch fires) and writes nothing. The sync
	// counter is the sync point, not a sleep.
	before := len(writes)
	n.resyncs(t, a, 3)
	if after := len(agentWrites(t, n.name)); after != before {
		t.Errorf("steady state: %d agent writes over 3 resyncs with nothing to do, want 0", after-before)
	}
	if err := a.Ready(); err != nil {
		t.Errorf("agent not ready in steady state: %v", err)
	}
	t.Logf("steady state: 0 writes over 3 resyncs; %d writes in all", before)

	// Initialized without a providerID (by an older coordinator, or by
	// hand): nobody else will set it, so the agent does, in one spec patch.
	untaint := []byte(`{"spec":{"taints":null}}`)
	if _, err := n.admin.CoreV1().Nodes().Patch(t.Context(), n.name, types.MergePatchType, untaint, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	n.waitNode(t, 10*time.Second, "the agent's own providerID once initialized", func(node *corev1.Node) bool {
		return node.Spec.ProviderID == "talos://metal/10.0.0.10"
	})
	if got := len(agentWrites(t, n.name)) - before; got != 1 {
		t.Errorf("%d agent writes to set its providerID, want 1", got)
	}
}

func TestAddressChangesWithinOneSecond(t *testing.T) {
	n := newNode(t, "addr-node", "10.0.0.11", metal("addr-node"))
	n.startAgent(t, "")
	n.waitNode(t, 20*time.Second, "join", func(node *corev1.Node) bool { return hasAddress(node, corev1.NodeExternalIP, "203.0.113.10") })

	n.ns.AddAddr("eth0", "198.51.100.7/24")
	took := n.waitNode(t, 5*time.Second, "added IPv4 address in status", func(node *corev1.Node) bool {
		return hasAddress(node, corev1.NodeExternalIP, "198.51.100.7")
	})
	t.Logf("address added → status.addresses: %v", took)

	n.ns.AddAddr("eth0", "2001:db8:77::1/64", "nodad")
	took = n.waitNode(t, 5*time.Second, "added IPv6 prefix", func(node *corev1.Node) bool {
		p, _ := contract.DecodePrefixes(node.Annotations[contract.AnnotationPrefixes])
		return slices.Contains(p, netip.MustParsePrefix("2001:db8:77::/64")) && hasAddress(node, corev1.NodeExternalIP, "2001:db8:77::1")
	})
	t.Logf("IPv6 address added → prefixes and status.addresses: %v", took)

	n.ns.DelAddr("eth0", "2001:db8:1:2::10/64")
	took = n.waitNode(t, 5*time.Second, "removed IPv6 address", func(node *corev1.Node) bool {
		p, _ := contract.DecodePrefixes(node.Annotations[contract.AnnotationPrefixes])
		return !slices.Contains(p, netip.MustParsePrefix("2001:db8:1:2::/64")) && !hasAddress(node, corev1.NodeExternalIP, "2001:db8:1:2::10")
	})
	t.Logf("IPv6 address removed → prefixes and status.addresses: %v", took)

	// Talos's external (cloud public) addresses arrive through the watch.
	if err := n.Machined.SetExternalAddresses(t.Context(), netip.MustParsePrefix("192.0.2.200/32")); err != nil {
		t.Fatal(err)
	}
	took = n.waitNode(t, 5*time.Second, "Talos external address", func(node *corev1.Node) bool {
		return hasAddress(node, corev1.NodeExternalIP, "192.0.2.200")
	})
	t.Logf("Talos external address → status.addresses: %v", took)
}

func TestRulesChangeRemovesOnlyOwnLabelsAndAnnotations(t *testing.T) {
	n := newNode(t, "rules-node", "10.0.0.12", metal("rules-node"))
	const before = `transformations:
- name: both
  labels: {example.com/a: "1", example.com/b: "1"}
  annotations: {example.com/note-a: "1", example.com/note-b: "1"}
`
	const after = `transformations:
- name: only-b
  labels: {example.com/b: "2"}
  annotations: {example.com/note-b: "2"}
`
	a := n.startAgent(t, before)
	n.waitNode(t, 20*time.Second, "old rules applied", func(node *corev1.Node) bool {
		return node.Labels["example.com/a"] == "1" && node.Labels["example.com/b"] == "1" &&
			node.Annotations["example.com/note-a"] == "1" && node.Annotations["example.com/note-b"] == "1"
	})
	// Someone else's labels and annotation, in a domain the agent could also write.
	patch := `{"metadata":{"labels":{"example.com/someone-else":"keep","topology.kubernetes.io/region":"eu-west"},` +
		`"annotations":{"example.com/someone-elses-note":"keep"}}}`
	if _, err := n.admin.CoreV1().Nodes().Patch(t.Context(), n.name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	a.stop()

	n.startAgent(t, after)
	n.waitNode(t, 20*time.Second, "new rules applied", func(node *corev1.Node) bool {
		_, stale := node.Labels["example.com/a"]
		_, staleNote := node.Annotations["example.com/note-a"]
		return !stale && !staleNote && node.Labels["example.com/b"] == "2" && node.Annotations["example.com/note-b"] == "2"
	})
	node, err := n.admin.CoreV1().Nodes().Get(t.Context(), n.name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if node.Labels["example.com/someone-else"] != "keep" {
		t.Errorf("a label the agent never set was touched: %v", node.Labels)
	}
	if node.Annotations["example.com/someone-elses-note"] != "keep" {
		t.Errorf("an annotation the agent never set was touched: %v", node.Annotations)
	}
	owned, err := contract.DecodeKeys(contract.AnnotationOwnedLabels, node.Annotations[contract.AnnotationOwnedLabels])
	if err != nil || slices.Contains(owned, "example.com/a") || slices.Contains(owned, "example.com/someone-else") || !slices.Contains(owned, "example.com/b") {
		t.Errorf("owned-labels = %v (%v)", owned, err)
	}
	owned, err = contract.DecodeKeys(contract.AnnotationOwnedAnnotations, node.Annotations[contract.AnnotationOwnedAnnotations])
	if err != nil || !slices.Equal(owned, []string{"example.com/note-b"}) {
		t.Errorf("owned-annotations = %v (%v), want exactly example.com/note-b", owned, err)
	}
}

// createCSR submits a kubelet-serving CSR as the node, with the given SANs.
func createCSR(t *testing.T, n *node, name string, dns []string, ips []string) {
	t.Helper()
	cs := kubernetes.NewForConfigOrDie(n.id.Config())
	_, err := cs.CertificatesV1().CertificateSigningRequests().Create(t.Context(), &certificatesv1.CertificateSigningRequest{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: certificatesv1.CertificateSigningRequestSpec{
			Request:    csrtest.PEM(t, nil, n.name, dns, ips...),
			SignerName: certificatesv1.KubeletServingSignerName,
			Usages:     []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageServerAuth},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
}

// review plays the coordinator: it asks the agent to attest a CSR.
func (n *node) review(t *testing.T, csr string) contract.Attestation {
	t.Helper()
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, contract.AnnotationCSRReview, csr)
	if _, err := n.admin.CoreV1().Nodes().Patch(t.Context(), n.name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	var att contract.Attestation
	took := n.waitNode(t, 10*time.Second, "attestation of "+csr, func(node *corev1.Node) bool {
		var err error
		att, err = contract.DecodeAttestation(node.Annotations[contract.AnnotationCSRAttestation])
		return err == nil && att.CSR == csr
	})
	t.Logf("review of %s → attestation: %v", csr, took)
	return att
}

func TestAttestation(t *testing.T) {
	n := newNode(t, "attest-node", "10.0.0.13", metal("attest-node"))
	a := n.startAgent(t, "")
	n.waitNode(t, 20*time.Second, "join", func(node *corev1.Node) bool { return hasAddress(node, corev1.NodeExternalIP, "203.0.113.10") })

	createCSR(t, n, "attest-good", []string{"attest-node"}, []string{"10.0.0.13", "203.0.113.10", "2001:db8:1:2::10"})
	att := n.review(t, "attest-good")
	if att.Verdict != contract.VerdictApprove {
		t.Errorf("a CSR naming only the node's own addresses: verdict %q (%s), want approve", att.Verdict, att.Reason)
	}
	csr, err := n.admin.CertificatesV1().CertificateSigningRequests().Get(t.Context(), "attest-good", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !att.Approves("attest-good", csr.Spec.Request) {
		t.Error("the attestation is not bound to the CSR's name and request digest")
	}

	createCSR(t, n, "attest-foreign-ip", []string{"attest-node"}, []string{"10.0.0.13", "198.51.100.99"})
	att = n.review(t, "attest-foreign-ip")
	if att.Verdict != contract.VerdictReject || !strings.Contains(att.Reason, "198.51.100.99") {
		t.Errorf("a CSR with an IP not on the node: verdict %q reason %q, want reject naming 198.51.100.99", att.Verdict, att.Reason)
	}
	// The agent counts an attestation once its write returned, which may
	// be after the test saw the annotation: wait for the count, briefly.
	eventually(t, 5*time.Second, func() bool { return testutil.ToFloat64(a.metrics.Attestations.WithLabelValues("reject")) >= 1 })
	if got := testutil.ToFloat64(a.metrics.Attestations.WithLabelValues("reject")); got != 1 {
		t.Errorf("reject attestations metric = %v, want 1", got)
	}
}

// The coordinator trusts an attestation only when it verifies with the key
// the agent published in its metadata annotation (enrolled on the node's
// first join): every attestation, approve or reject, is signed with exactly
// that key, for this node, over exactly the request's SANs.
func TestAttestationSignedWithPublishedKey(t *testing.T) {
	n := newNode(t, "sign-node", "10.0.0.17", metal("sign-node"))
	n.startAgent(t, "")
	var md contract.Metadata
	n.waitNode(t, 20*time.Second, "the agent key in the metadata annotation", func(node *corev1.Node) bool {
		var err error
		md, err = contract.DecodeMetadata(node.Annotations[contract.AnnotationMetadata])
		return err == nil && md.AgentKey != ""
	})
	pub, err := contract.DecodeAgentKey(md.AgentKey)
	if err != nil {
		t.Fatalf("published agent key %q: %v", md.AgentKey, err)
	}
	stored, err := agentkey.Load(n.KeyFile)
	if err != nil {
		t.Fatal(err)
	}
	if !pub.Equal(stored.Public()) {
		t.Errorf("published key %s is not the one in %s", md.AgentKey, n.KeyFile)
	}
	_, other, err := ed25519.GenerateKey(nil)
	if err != nil {
		t.Fatal(err)
	}

	requestSANs := func(name string) ([]string, []byte) {
		t.Helper()
		csr, err := n.admin.CertificatesV1().CertificateSigningRequests().Get(t.Context(), name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		parsed, err := csrcheck.Parse(csr.Spec.Request)
		if err != nil {
			t.Fatal(err)
		}
		return contract.RequestSANs(parsed), csr.Spec.Request
	}
	for _, c := range []struct {
		csr  string
		ips  []string
		want contract.Verdict
	}{
		{"sign-approve", []string{"10.0.0.17", "203.0.113.10"}, contract.VerdictApprove},
		{"sign-reject", []string{"10.0.0.17", "198.51.100.99"}, contract.VerdictReject},
	} {
		createCSR(t, n, c.csr, []string{"sign-node"}, c.ips)
		att := n.review(t, c.csr)
		sans, _ := requestSANs(c.csr)
		if att.Verdict != c.want {
			t.Errorf("%s: verdict %q (%s), want %q", c.csr, att.Verdict, att.Reason, c.want)
		}
		if err := att.Verify(n.name, pub, sans); err != nil {
			t.Errorf("%s: the attestation does not verify with the published key: %v", c.csr, err)
		}
		if att.Verify(n.name, other.Public().(ed25519.PublicKey), sans) == nil {
			t.Errorf("%s: the attestation verifies with another key", c.csr)
		}
		if att.Verify("another-node", pub, sans) == nil {
			t.Errorf("%s: the attestation verifies for another node", c.csr)
		}
	}

	// An approval for the very CSR under review, already there when the
	// review arrives (as the kubelet's credential could write it) but not
	// signed by the agent's key, counts for nothing: the agent replaces it
	// with its own verdict. One patch, so the agent never sees them apart.
	createCSR(t, n, "sign-forged", []string{"sign-node"}, []string{"10.0.0.17", "198.51.100.99"})
	sans, request := requestSANs("sign-forged")
	forged := contract.Attestation{CSR: "sign-forged", RequestSHA256: contract.RequestDigest(request), Verdict: contract.VerdictApprove, SANs: sans}.Sign(n.name, other)
	value, err := contract.EncodeAttestation(forged)
	if err != nil {
		t.Fatal(err)
	}
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q,%q:%q}}}`, contract.AnnotationCSRReview, "sign-forged", contract.AnnotationCSRAttestation, value)
	if _, err := n.admin.CoreV1().Nodes().Patch(t.Context(), n.name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	n.waitNode(t, 10*time.Second, "the forged attestation replaced by the agent's", func(node *corev1.Node) bool {
		att, err := contract.DecodeAttestation(node.Annotations[contract.AnnotationCSRAttestation])
		return err == nil && att.CSR == "sign-forged" && att.Verdict == contract.VerdictReject && att.Verify(n.name, pub, sans) == nil
	})
}

// The kubelet asks for the addresses its Node lists (client-go's
// certificate manager takes the template's IPs from status.addresses), and
// the agent writes those. An address the node holds but does not publish (on
// lo, on an excluded link such as KubeSpan, kube-proxy's kube-ipvs0 or
// kube-router's kube-dummy-if, where they bind Services' cluster, external
// and load-balancer IPs, on a link that is down, or a deprecated one) is in
// no honest request: whoever asks for it holds the node's credential, so the
// agent rejects it. Every address it publishes, internal or external, IPv4
// or IPv6, it vouches for.
func TestAttestationCoversOnlyPublishedAddresses(t *testing.T) {
	n := newNode(t, "attest-all", "10.0.0.16", metal("attest-all"))
	// Public addresses, which the agent would publish as ExternalIPs on any
	// other link: it is the link that keeps them out.
	n.ns.AddAddr("lo", "198.51.100.77/32")
	n.ns.AddIFB("kubespan")
	n.ns.AddAddr("kubespan", "2001:db8:99::1/128", "nodad")
	n.ns.AddIFB("kube-ipvs0")
	n.ns.AddAddr("kube-ipvs0", "198.51.100.250/32")
	n.ns.AddIFB("kube-dummy-if") // kube-router's, for Services' external and load-balancer IPs
	n.ns.AddAddr("kube-dummy-if", "198.51.100.251/32")
	n.ns.AddIFB("eth1")
	n.ns.AddAddr("eth1", "192.0.2.50/24")
	n.ns.SetLink("eth1", false)
	n.ns.AddAddr("eth0", "2001:db8:1:2::99/64", "nodad", "preferred_lft", "0")
	n.startAgent(t, "")
	n.waitNode(t, 20*time.Second, "join", func(node *corev1.Node) bool { return hasAddress(node, corev1.NodeExternalIP, "203.0.113.10") })

	for _, c := range []struct {
		csr, ip string
		want    contract.Verdict
	}{
		{"attest-all-published-v4", "203.0.113.10", contract.VerdictApprove},
		{"attest-all-published-v6", "2001:db8:1:2::10", contract.VerdictApprove},
		{"attest-all-lo", "198.51.100.77", contract.VerdictReject},
		{"attest-all-excluded-link", "2001:db8:99::1", contract.VerdictReject},
		{"attest-all-ipvs", "198.51.100.250", contract.VerdictReject},
		{"attest-all-kube-router", "198.51.100.251", contract.VerdictReject},
		{"attest-all-link-down", "192.0.2.50", contract.VerdictReject},
		{"attest-all-deprecated", "2001:db8:1:2::99", contract.VerdictReject},
	} {
		createCSR(t, n, c.csr, []string{"attest-all"}, []string{"10.0.0.16", c.ip})
		if att := n.review(t, c.csr); att.Verdict != c.want {
			t.Errorf("a CSR naming %s (%s): verdict %q (%s), want %q", c.ip, c.csr, att.Verdict, att.Reason, c.want)
		}
	}
}

func TestCertificateRotation(t *testing.T) {
	n := newNode(t, "rotate-node", "10.0.0.14", metal("rotate-node"))
	const validFor = 16 * time.Second // the join below takes seconds under -race on a busy machine
	if err := n.id.RotateValidFor(validFor); err != nil {
		t.Fatal(err)
	}
	short := time.Now()
	oldCreds, err := os.ReadFile(n.id.CertFile)
	if err != nil {
		t.Fatal(err)
	}
	a := n.startAgent(t, "")
	n.waitNode(t, 12*time.Second, "join with the short-lived certificate", func(node *corev1.Node) bool {
		return hasAddress(node, corev1.NodeExternalIP, "203.0.113.10")
	})

	// The kubelet rotates its client certificate: a new file renamed over the old.
	if err := n.id.Rotate(); err != nil {
		t.Fatal(err)
	}

	// The old certificate expires: the API server refuses it...
	oldCfg := cluster.Admin()
	oldCfg.TLSClientConfig.CertData, oldCfg.TLSClientConfig.KeyData = oldCreds, oldCreds
	old := kubernetes.NewForConfigOrDie(oldCfg)
	if err := wait.PollUntilContextTimeout(t.Context(), 200*time.Millisecond, time.Until(short.Add(validFor+10*time.Second)), false, func(ctx context.Context) (bool, error) {
		_, err := old.CoreV1().Nodes().Get(ctx, n.name, metav1.GetOptions{})
		return err != nil, nil
	}); err != nil {
		t.Fatal("the old certificate still works 10s after it expired; the test would prove nothing")
	}
	// ...and the agent still writes.
	n.ns.AddAddr("eth0", "198.51.100.8/24")
	n.waitNode(t, 15*time.Second, "a write after the old certificate expired", func(node *corev1.Node) bool {
		return hasAddress(node, corev1.NodeExternalIP, "198.51.100.8")
	})
	if got := testutil.ToFloat64(a.metrics.CredReloads); got < 1 {
		t.Errorf("credential reloads = %v, want ≥ 1", got)
	}
}

func TestAPIServerOutageAndMachinedRestart(t *testing.T) {
	n := newNode(t, "outage-node", "10.0.0.15", metal("outage-node"))
	var factsLog syncbuf.Buffer
	a := n.startAgent(t, "", func(c *controller.Config) {
		debug := slog.New(slog.NewTextHandler(&factsLog, &slog.HandlerOptions{Level: slog.LevelDebug}))
		c.Facts = (&talos.Reader{Socket: n.Machined.Socket, Log: debug}).Watch
	})
	n.waitNode(t, 20*time.Second, "join", func(node *corev1.Node) bool { return hasAddress(node, corev1.NodeExternalIP, "203.0.113.10") })

	failed := testutil.ToFloat64(a.metrics.Syncs.WithLabelValues("error"))
	cluster.StopAPIServer()
	n.ns.AddAddr("eth0", "198.51.100.9/24")
	// The agent fails a sync (the write of the new address), and says so.
	if !eventually(t, 20*time.Second, func() bool {
		return testutil.ToFloat64(a.metrics.Syncs.WithLabelValues("error")) > failed && a.Ready() != nil
	}) {
		t.Errorf("agent reports ready (%v) while its write cannot reach the API server; %v failed syncs", a.Ready(), testutil.ToFloat64(a.metrics.Syncs.WithLabelValues("error"))-failed)
	}
	if err := cluster.StartAPIServer(t.Context()); err != nil {
		t.Fatal(err)
	}
	took := n.waitNode(t, 40*time.Second, "the change made during the outage", func(node *corev1.Node) bool {
		return hasAddress(node, corev1.NodeExternalIP, "198.51.100.9")
	})
	t.Logf("API server back → pending change written: %v", took)

	// machined goes away (the agent's reader finds it gone) and comes back
	// with new metadata.
	n.Machined.Stop()
	if !eventually(t, 10*time.Second, func() bool { return strings.Contains(factsLog.String(), "machined not reachable") }) {
		t.Fatalf("the agent's facts reader did not find machined gone:\n%s", factsLog.String())
	}
	if err := n.Machined.Serve(); err != nil {
		t.Fatal(err)
	}
	md := metal("outage-node")
	md.Zone = "eu-west-1b"
	if err := n.Machined.SetPlatformMetadata(t.Context(), md); err != nil {
		t.Fatal(err)
	}
	n.waitNode(t, 20*time.Second, "metadata change after machined restart", func(node *corev1.Node) bool {
		return node.Labels["topology.kubernetes.io/zone"] == "eu-west-1b"
	})
}

// TestBetaTopologyLabels: with global.betaTopologyLabels the agent sets the
// beta labels Talos CCM sets, with the node's own credentials (the real API
// server's NodeRestriction admits them), and removes them when the option
// is turned off.
func TestBetaTopologyLabels(t *testing.T) {
	n := newNode(t, "beta-node", "10.0.0.18", metal("beta-node"))
	beta := map[string]string{
		"failure-domain.beta.kubernetes.io/region": "eu-west",
		"failure-domain.beta.kubernetes.io/zone":   "eu-west-1a",
		"beta.kubernetes.io/instance-type":         "m1.large",
	}
	a := n.startAgent(t, "global:\n  betaTopologyLabels: true\n"+ccmRules)
	n.waitNode(t, 20*time.Second, "beta labels set by the node", func(node *corev1.Node) bool {
		for k, v := range beta {
			if node.Labels[k] != v {
				return false
			}
		}
		return node.Labels["topology.kubernetes.io/zone"] == "eu-west-1a"
	})
	a.stop()

	n.startAgent(t, ccmRules)
	n.waitNode(t, 20*time.Second, "beta labels removed with the option", func(node *corev1.Node) bool {
		for k := range beta {
			if _, ok := node.Labels[k]; ok {
				return false
			}
		}
		return node.Labels["topology.kubernetes.io/zone"] == "eu-west-1a"
	})
}

// TestMigratedTalosCCMConfiguration: Talos CCM's documented configuration,
// migrated, runs on a node against the real API server: the node gets the
// labels Talos CCM gave it (the beta ones included), the overrides'
// effective metadata, and requests for what only the coordinator may set.
func TestMigratedTalosCCMConfiguration(t *testing.T) {
	data, err := os.ReadFile("../../pkg/rules/testdata/talos-ccm/config-md-quoted.yaml")
	if err != nil {
		t.Fatal(err)
	}
	res, err := talosccm.Convert("config-md-quoted.yaml", data)
	if err != nil {
		t.Fatal(err)
	}
	src, err := rulesource.Find(res.AgentPatch)
	if err != nil {
		t.Fatal(err)
	}
	md := runtime.PlatformMetadataSpec{Platform: "metal", Hostname: "web-cloud-1", Region: "us-west-1", InstanceID: "i-42", Spot: true}
	n := newNode(t, "web-cloud-1", "10.0.0.19", md)
	n.startAgent(t, string(src.Content))
	n.waitNode(t, 20*time.Second, "Talos CCM's documented rules applied", func(node *corev1.Node) bool {
		req, _ := contract.DecodeRequestedLabels(node.Annotations[contract.AnnotationRequestedLabels])
		taints, _ := contract.DecodeRequestedTaints(node.Annotations[contract.AnnotationRequestedTaints])
		return node.Labels["topology.kubernetes.io/region"] == "us-west-1-on-metal" &&
			node.Labels["failure-domain.beta.kubernetes.io/region"] == "us-west-1-on-metal" &&
			node.Labels["topology.kubernetes.io/zone"] == "us-west-1f" &&
			node.Labels["failure-domain.beta.kubernetes.io/zone"] == "us-west-1f" &&
			node.Annotations["custom-annotation/instance-id"] == "id-i-42" &&
			req["node-role.kubernetes.io/web"] == "" && req["node-role.kubernetes.io/capacity-type"] == "spot" &&
			slices.Contains(taints, contract.Taint{Key: "node.cloudprovider.kubernetes.io/storage-type", Value: "ceph", Effect: "NoSchedule"})
	})
}

// The coordinator asks again, for the request now under a name, when the
// Node's attestation is of an earlier request under it (a CSR deleted and
// created again): the agent alone writes the attestation, so the changed
// review is the only signal it gets.
func TestAttestsAgainWhenAskedForAnotherRequest(t *testing.T) {
	n := newNode(t, "again-node", "10.0.0.14", metal("again-node"))
	n.startAgent(t, "")
	n.waitNode(t, 20*time.Second, "join", func(node *corev1.Node) bool { return hasAddress(node, corev1.NodeInternalIP, "10.0.0.14") })
	createCSR(t, n, "again", []string{"again-node"}, []string{"10.0.0.14"})
	first := n.review(t, "again")
	if err := n.admin.CertificatesV1().CertificateSigningRequests().Delete(t.Context(), "again", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	createCSR(t, n, "again", []string{"again-node"}, nil)
	csr, err := n.admin.CertificatesV1().CertificateSigningRequests().Get(t.Context(), "again", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	digest := contract.RequestDigest(csr.Spec.Request)
	if digest == first.RequestSHA256 {
		t.Fatal("the second request is the first one")
	}
	ask := contract.Review{CSR: "again", RequestSHA256: digest}.String()
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, contract.AnnotationCSRReview, ask)
	if _, err := n.admin.CoreV1().Nodes().Patch(t.Context(), n.name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	n.waitNode(t, 10*time.Second, "the attestation of the new request", func(node *corev1.Node) bool {
		att, err := contract.DecodeAttestation(node.Annotations[contract.AnnotationCSRAttestation])
		return err == nil && att.CSR == "again" && att.RequestSHA256 == digest
	})
}

// A providerID the API server refuses to the node (an admin's admission
// policy: this cluster sets providerIDs otherwise) is asked for once per
// ProviderIDRecheck: the agent is ready, its resyncs do not send the
// refused patch again, and once the policy is lifted it asks again without
// anything else happening. Seen failing before: the agent returned the
// refusal from every sync, never ready, and patched again on each; then
// (with the first fix) it never asked again until restarted.
func TestProviderIDRefusedToTheNodeIsAskedAgainLater(t *testing.T) {
	n := newNode(t, "pid-refused-node", "10.0.0.19", metal("pid-refused-node"))
	const label = "test.nodeinit.io/refusing"
	// Initialized by the cluster's own means, without a providerID: the
	// agent would set it itself.
	if _, err := n.admin.CoreV1().Nodes().Patch(t.Context(), n.name, types.MergePatchType,
		[]byte(`{"metadata":{"labels":{"`+label+`":"true"}},"spec":{"taints":null}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	remove, err := cluster.Refuse(t.Context(), testcluster.Refusal{Name: "test-no-node-provider-id", Label: label, ProbeNode: n.name,
		Who:        `"system:nodes" in request.userInfo.groups`,
		Expression: `!has(object.spec.providerID) || (has(oldObject.spec.providerID) && oldObject.spec.providerID == object.spec.providerID)`,
		Message:    "this cluster sets providerIDs itself"}, n.id.Config(), `{"spec":{"providerID":"talos://metal/probe"}}`)
	if err != nil {
		t.Fatal(err)
	}
	lift := sync.OnceValue(remove)
	t.Cleanup(func() {
		if err := lift(); err != nil {
			t.Error(err)
		}
	})
	const recheck = 8 * time.Second // well over the checks before the lift
	a := n.startAgent(t, "", func(c *controller.Config) { c.ProviderIDRecheck = recheck })
	n.waitNode(t, 20*time.Second, "the agent's report", func(node *corev1.Node) bool {
		return node.Annotations[contract.AnnotationMetadata] != ""
	})
	if !eventually(t, 10*time.Second, func() bool { return a.Ready() == nil }) {
		t.Fatalf("agent not ready with its providerID refused: %v", a.Ready())
	}
	specWrites := func() []testcluster.AuditEvent {
		return slices.DeleteFunc(agentWrites(t, n.name), func(e testcluster.AuditEvent) bool { return e.ObjectRef.Subresource != "" })
	}
	if got := len(specWrites()); got != 1 {
		t.Errorf("%d providerID patches, want 1 (refused)", got)
	}
	n.resyncs(t, a, 3)
	if got := len(specWrites()); got != 1 {
		t.Errorf("%d providerID patches after 3 resyncs, want the 1 refused", got)
	}
	if node, err := n.admin.CoreV1().Nodes().Get(t.Context(), n.name, metav1.GetOptions{}); err != nil || node.Spec.ProviderID != "" {
		t.Errorf("providerID through a policy that refuses it: %v", err)
	}

	// The admin lifts the policy; nothing else changes on the Node. The
	// agent asks again once ProviderIDRecheck is over.
	if err := lift(); err != nil {
		t.Fatal(err)
	}
	n.waitNode(t, recheck+10*time.Second, "the providerID, asked for again", func(node *corev1.Node) bool {
		return node.Spec.ProviderID == "talos://metal/10.0.0.19"
	})
	// Whatever the timing (the policy may outlive a recheck or two on
	// busy cores): refused patches, one per recheck at most, then one
	// accepted, and nothing after it.
	writes := specWrites()
	for i, w := range writes {
		last := i == len(writes)-1
		if ok := w.ResponseStatus.Code < 300; ok != last {
			t.Errorf("providerID patch %d of %d answered %d", i+1, len(writes), w.ResponseStatus.Code)
		}
		if i > 0 {
			if gap := w.StageTimestamp.Sub(writes[i-1].StageTimestamp); gap < recheck-500*time.Millisecond {
				t.Errorf("providerID patch %d came %s after the refused one, before the recheck (%s)", i+1, gap, recheck)
			}
		}
	}
	if len(writes) < 2 {
		t.Errorf("%d providerID patches, want the refused one and the one after the recheck", len(writes))
	}
}
