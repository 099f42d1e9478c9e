package controller_test

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/talos-nodeinit/talos-nodeinit/coordinator/config"
	"github.com/talos-nodeinit/talos-nodeinit/coordinator/controller"
	"github.com/talos-nodeinit/talos-nodeinit/coordinator/records"
	"github.com/talos-nodeinit/talos-nodeinit/pkg/apiclient"
	"github.com/talos-nodeinit/talos-nodeinit/pkg/contract"
	"github.com/talos-nodeinit/talos-nodeinit/pkg/csrcheck"
	"github.com/talos-nodeinit/talos-nodeinit/pkg/csrcheck/csrtest"
	"github.com/talos-nodeinit/talos-nodeinit/pkg/harness/kubeapply"
	"github.com/talos-nodeinit/talos-nodeinit/pkg/harness/kubeletsim"
	"github.com/talos-nodeinit/talos-nodeinit/pkg/harness/testcluster"
)

var cluster *testcluster.Cluster

func TestMain(m *testing.M) {
	os.Exit(testcluster.Main(m, &cluster, testcluster.Options{ControllerManager: true, AuditLog: true}))
}

const coordinatorUser = "system:serviceaccount:kube-system:nodeinit-coordinator"

var rbacOnce sync.Once

// coordinatorIdentity installs the shipped RBAC and returns the
// ServiceAccount's credentials: the coordinator gets nothing more.
func coordinatorIdentity(t testing.TB) *rest.Config {
	t.Helper()
	var err error
	rbacOnce.Do(func() {
		err = kubeapply.Files(t.Context(), cluster.Admin(), "../deploy/noderecords.yaml", "../deploy/rbac.yaml")
	})
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := cluster.ServiceAccountIdentity(t.Context(), "kube-system", "nodeinit-coordinator")
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

func admin() *kubernetes.Clientset { return kubernetes.NewForConfigOrDie(cluster.Admin()) }

type running struct {
	*controller.Coordinator
	stop  func()
	clock *skewClock
}

// skewClock is the real clock moved ahead by what a test skipped, so that
// nothing that counts on time passing stands still.
type skewClock struct{ ahead atomic.Int64 }

func (s *skewClock) Now() time.Time                  { return time.Now().Add(time.Duration(s.ahead.Load())) }
func (s *skewClock) Since(t time.Time) time.Duration { return s.Now().Sub(t) }

// skip moves the coordinator's clock ahead by d instead of sleeping (past
// csr.minAddressAge, an attestation timeout), and has it sync every Node
// again: what waits for that time is decided now.
func (r *running) skip(d time.Duration) {
	r.clock.ahead.Add(int64(d))
	controller.Resync(r.Coordinator)
}

// settled skips past csr.minAddressAge (1s in the tests' settings): the
// addresses the Nodes list now are settled.
func (r *running) settled() { r.skip(1500 * time.Millisecond) }

// lookedAgain touches Node name (an annotation of the test's own) and
// waits until the coordinator synced it at that version: everything that
// happened before, the coordinator's own writes too, has been looked at.
func (r *running) lookedAgain(t testing.TB, name string) {
	t.Helper()
	patch := fmt.Sprintf(`{"metadata":{"annotations":{"test.nodeinit.io/touched":%q}}}`, time.Now().Format(time.RFC3339Nano))
	if _, err := admin().CoreV1().Nodes().Patch(t.Context(), name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	r.syncedNow(t, name)
}

// syncedNow waits until the coordinator has synced Node name, its CSRs
// with it, at the version the API server has now or a later one (its own
// patch may follow at once): whatever that version asks for has been
// decided.
func (r *running) syncedNow(t testing.TB, name string) {
	t.Helper()
	rv, err := strconv.ParseUint(get(t, name).ResourceVersion, 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, 15*time.Second, fmt.Sprintf("%s synced at %d or later", name, rv), func() bool {
		synced, err := strconv.ParseUint(r.SyncedAt(name), 10, 64)
		return err == nil && synced >= rv
	})
}

// resynced has the coordinator sync every Node once more and waits until
// each sync begun since has finished, whatever its outcome.
func (r *running) resynced(t testing.TB) {
	t.Helper()
	all, err := admin().CoreV1().Nodes().List(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	begun := map[string]int{}
	for _, n := range all.Items {
		begun[n.Name], _ = r.Syncs(n.Name)
	}
	controller.Resync(r.Coordinator)
	for name, b := range begun {
		waitFor(t, 15*time.Second, name+" synced again", func() bool {
			_, finished := r.Syncs(name)
			return finished > b
		})
	}
}

func startCoordinator(t *testing.T, id, settings string) *running {
	t.Helper()
	return startCoordinatorAs(t, id, settings, coordinatorIdentity(t))
}

func startCoordinatorAs(t *testing.T, id, settings string, cfg *rest.Config, opts ...func(*controller.Config)) *running {
	t.Helper()
	s, err := config.Parse([]byte(settings))
	if err != nil {
		t.Fatal(err)
	}
	clk := &skewClock{}
	ccfg := controller.Config{
		Clock: clk, Client: kubernetes.NewForConfigOrDie(apiclient.Builtin(cfg)), Dynamic: dynamic.NewForConfigOrDie(cfg), REST: cfg, Settings: s, Identity: id,
		LeaseDuration: 3 * time.Second, RenewDeadline: 2 * time.Second, RetryPeriod: 200 * time.Millisecond,
		Log: slog.New(slog.NewTextHandler(testWriter{t}, nil)).With("coordinator", id),
	}
	for _, o := range opts {
		o(&ccfg)
	}
	c, err := controller.New(ccfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("coordinator %s: %v", id, err)
				}
			case <-time.After(15 * time.Second):
				t.Errorf("coordinator %s did not stop", id)
			}
		})
	}
	t.Cleanup(stop)
	return &running{Coordinator: c, stop: stop, clock: clk}
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

// simNode is a registered Node whose agent the test plays with the node's
// own identity.
type simNode struct {
	name    string
	ip      netip.Addr
	id      *testcluster.NodeIdentity
	kubelet *kubeletsim.Kubelet
	self    *kubernetes.Clientset
	// key is the node agent's own key; the test plays the agent with it.
	key ed25519.PrivateKey
}

func register(t testing.TB, name, ip string) *simNode {
	t.Helper()
	id, err := cluster.NodeIdentity(name)
	if err != nil {
		t.Fatal(err)
	}
	k, err := kubeletsim.Register(t.Context(), kubeletsim.Config{NodeName: name, NodeIPs: []netip.Addr{netip.MustParseAddr(ip)}, Identity: id.Config(), CertDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(k.Stop)
	_, key, _ := ed25519.GenerateKey(rand.Reader)
	return &simNode{name: name, ip: netip.MustParseAddr(ip), id: id, kubelet: k, self: kubernetes.NewForConfigOrDie(id.Config()), key: key}
}

type report struct {
	externalIPs []string
	prefixes    []string
	requested   map[string]string
	taints      []contract.Taint
	providerID  string
	noMetadata  bool
}

// publish writes what the agent would, as the node.
func (n *simNode) publish(t testing.TB, r report) {
	t.Helper()
	addrs := []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: n.ip.String()}}
	for _, a := range r.externalIPs {
		addrs = append(addrs, corev1.NodeAddress{Type: corev1.NodeExternalIP, Address: a})
	}
	addrs = append(addrs, corev1.NodeAddress{Type: corev1.NodeHostName, Address: n.name})

	var prefixes []netip.Prefix
	for _, p := range r.prefixes {
		prefixes = append(prefixes, netip.MustParsePrefix(p))
	}
	ann := map[string]string{}
	if !r.noMetadata {
		ann[contract.AnnotationMetadata], _ = contract.EncodeMetadata(contract.Metadata{Platform: "metal", Hostname: n.name,
			SetProviderID: r.providerID, AgentKey: contract.EncodeAgentKey(n.key.Public().(ed25519.PublicKey))})
	}
	ann[contract.AnnotationPrefixes], _ = contract.EncodePrefixes(prefixes)
	ann[contract.AnnotationRequestedLabels], _ = contract.EncodeRequestedLabels(r.requested)
	ann[contract.AnnotationRequestedTaints], _ = contract.EncodeRequestedTaints(r.taints)
	// As the agent reports: one status patch, the report with its addresses;
	// the coordinator sets the providerID it asks for.
	n.patch(t, map[string]any{"metadata": map[string]any{"annotations": ann}, "status": map[string]any{"addresses": addrs}}, "status")
}

func (n *simNode) patch(t testing.TB, body map[string]any, sub string) {
	t.Helper()
	data := mustJSON(t, body)
	var subs []string
	if sub != "" {
		subs = append(subs, sub)
	}
	if _, err := n.self.CoreV1().Nodes().Patch(t.Context(), n.name, types.MergePatchType, data, metav1.PatchOptions{}, subs...); err != nil {
		t.Fatal(err)
	}
}

func get(t testing.TB, name string) *corev1.Node {
	t.Helper()
	node, err := admin().CoreV1().Nodes().Get(t.Context(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return node
}

func initialized(node *corev1.Node) bool {
	return !slices.ContainsFunc(node.Spec.Taints, func(t corev1.Taint) bool { return t.Key == contract.TaintUninitialized })
}

func waitFor(t testing.TB, timeout time.Duration, what string, cond func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	for !cond() {
		if time.Since(start) > timeout {
			t.Fatalf("%s: not within %v", what, timeout)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return time.Since(start)
}

// coordinatorWrites counts the coordinator's mutating requests on one
// object, from the API server's audit log.
func coordinatorWrites(t testing.TB, resource, name string) []testcluster.AuditEvent {
	t.Helper()
	events, err := cluster.Audit()
	if err != nil {
		t.Fatal(err)
	}
	return slices.DeleteFunc(events, func(e testcluster.AuditEvent) bool {
		return e.User.Username != coordinatorUser || e.ObjectRef.Resource != resource || e.ObjectRef.Name != name
	})
}

// eventSays waits up to timeout for an Event of reason about name, and
// checks that the first one's message says want (names the holder, say).
func eventSays(t testing.TB, timeout time.Duration, name, reason, want string) {
	t.Helper()
	waitFor(t, timeout, name+": "+reason+" Event", func() bool { return len(events(t, name, reason)) > 0 })
	if msg := events(t, name, reason)[0].Message; !strings.Contains(msg, want) {
		t.Errorf("%s: %s Event %q does not say %q", name, reason, msg, want)
	}
}

func events(t testing.TB, name, reason string) []corev1.Event {
	t.Helper()
	list, err := admin().CoreV1().Events("").List(t.Context(), metav1.ListOptions{FieldSelector: fields.Set{"involvedObject.name": name, "reason": reason}.String()})
	if err != nil {
		t.Fatal(err)
	}
	return list.Items
}

func podCIDRs(t testing.TB, node *corev1.Node) []netip.Prefix {
	var out []netip.Prefix
	for _, s := range node.Spec.PodCIDRs {
		out = append(out, netip.MustParsePrefix(s))
	}
	return out
}

const ipamSettings = `
nodeNetworks: [10.0.0.0/8, "2001:db8::/32"]
ipam:
  ipv4Pool: 10.244.0.0/16
  ipv6Pool: fd00:10:244::/64
  serviceCIDRs: [10.96.0.0/16, "fd00:10:96::/112"]
  sharedPrefixes: ["2001:db8:1:1::/64"] # alloc-a, -b and -d share one link's /64
  firstClaimPrefixes: ["2001:db8::/32"] # these tests carve from node prefixes without an inventory
requireProviderID: true
grants:
  labels:
    allow: ["node.cloudprovider.kubernetes.io/*", "node-role.kubernetes.io/web"]
csr:
  attestationTimeout: 3s
  minAddressAge: 1s
  initWait: 0s # CSRs and records other tests leave in the shared cluster would make joins wait: initwait_test.go opts in
`

func TestAllocationAndInitialization(t *testing.T) {
	// --initialized-events on: each join is one Normal Event (off by
	// default; hack/bench checks a clean storm has none).
	c := startCoordinatorAs(t, "alloc", ipamSettings, coordinatorIdentity(t), func(c *controller.Config) { c.InitializedEvents = true })
	type spec struct {
		name, ip string
		r        report
	}
	specs := []spec{
		{"alloc-a", "10.0.1.1", report{externalIPs: []string{"2001:db8:1:1::a"}, prefixes: []string{"2001:db8:1:1::/64"}}},
		{"alloc-b", "10.0.1.2", report{externalIPs: []string{"2001:db8:1:1::b"}, prefixes: []string{"2001:db8:1:1::/64"}}},
		{"alloc-c", "10.0.1.3", report{externalIPs: []string{"2001:db8:2:7::c"}, prefixes: []string{"2001:db8:2::/56"}}},
		{"alloc-d", "10.0.1.4", report{externalIPs: []string{"2001:db8:1:1:2::d"}, prefixes: []string{"2001:db8:1:1::/64"}}},
		{"alloc-e", "10.0.1.5", report{}},
	}
	nodes := map[string]*simNode{}
	for _, s := range specs {
		nodes[s.name] = register(t, s.name, s.ip)
	}
	// Registered but not reported: once the coordinator has looked at each
	// node (and found it waiting), nothing has been written to it.
	for _, s := range specs {
		waitFor(t, 10*time.Second, s.name+" seen waiting", func() bool { return c.Waiting(s.name) })
	}
	for _, s := range specs {
		if node := get(t, s.name); initialized(node) || len(node.Spec.PodCIDRs) > 0 {
			t.Fatalf("%s initialized before its agent reported", s.name)
		}
		if w := coordinatorWrites(t, "nodes", s.name); len(w) != 0 {
			t.Fatalf("%s: %d coordinator writes before the agent reported", s.name, len(w))
		}
	}
	// Every condition but providerID: still nothing. The agent's report
	// changes the Node, so the coordinator syncs it again; the resource
	// version it was last seen waiting at is the sync point.
	for _, s := range specs {
		nodes[s.name].publish(t, s.r)
	}
	for _, s := range specs {
		rv := get(t, s.name).ResourceVersion
		waitFor(t, 10*time.Second, s.name+" seen waiting for providerID", func() bool { return atOrAfter(c.WaitingAt(s.name), rv) })
	}
	if initialized(get(t, "alloc-a")) {
		t.Fatal("initialized without spec.providerID while the policy requires it")
	}
	start := time.Now()
	for _, s := range specs {
		s.r.providerID = "talos://metal/" + s.ip
		nodes[s.name].publish(t, s.r)
	}
	for _, s := range specs {
		waitFor(t, 10*time.Second, s.name+" initialized", func() bool { return initialized(get(t, s.name)) })
	}
	t.Logf("5 nodes: last providerID set → all initialized in %v", time.Since(start))

	all := map[string][]netip.Prefix{}
	var nodeAddrs []netip.Addr
	for _, s := range specs {
		node := get(t, s.name)
		all[s.name] = podCIDRs(t, node)
		for _, a := range node.Status.Addresses {
			if ip, err := netip.ParseAddr(a.Address); err == nil {
				nodeAddrs = append(nodeAddrs, ip)
			}
		}
		if w := coordinatorWrites(t, "nodes", s.name); len(w) != 1 || w[0].Verb != "patch" || w[0].ObjectRef.Subresource != "" {
			t.Errorf("%s: coordinator writes %+v, want exactly one patch (CIDRs, labels, providerID and the taint together)", s.name, w)
		}
		if want := "talos://metal/" + s.ip; node.Spec.ProviderID != want {
			t.Errorf("%s: providerID %q, want %q, the one its report asks for, set in the initializing patch", s.name, node.Spec.ProviderID, want)
		}
		waitFor(t, 5*time.Second, s.name+" Initialized Event", func() bool { return len(events(t, s.name, "Initialized")) == 1 })
		t.Logf("%s: %v", s.name, all[s.name])
	}
	in := func(name, cidr string) bool { return netip.MustParsePrefix(cidr).Overlaps(all[name][1]) }
	for _, s := range specs {
		if len(all[s.name]) != 2 || !all[s.name][0].Addr().Is4() || !all[s.name][1].Addr().Is6() {
			t.Errorf("%s: want dual-stack CIDRs, got %v", s.name, all[s.name])
		}
	}
	if !in("alloc-a", "2001:db8:1:1::/64") || !in("alloc-b", "2001:db8:1:1::/64") || all["alloc-a"][1] == all["alloc-b"][1] || all["alloc-a"][1].Bits() != 80 {
		t.Errorf("nodes sharing a /64 need distinct /80s from it: a=%v b=%v", all["alloc-a"], all["alloc-b"])
	}
	if !in("alloc-c", "2001:db8:2:7::/64") {
		t.Errorf("a /56 node gets its segment from the /64 holding its address: %v", all["alloc-c"])
	}
	if !in("alloc-e", "fd00:10:244::/64") {
		t.Errorf("a node without a global prefix gets the fallback pool: %v", all["alloc-e"])
	}
	for name, cidrs := range all {
		for _, c := range cidrs {
			for _, ip := range nodeAddrs {
				if c.Contains(ip) {
					t.Errorf("%s got %v, which holds the node address %v", name, c, ip)
				}
			}
			for other, oc := range all {
				for _, o := range oc {
					if other != name && o.Overlaps(c) {
						t.Errorf("%s %v overlaps %s %v", name, c, other, o)
					}
				}
			}
		}
	}
}

func TestGrants(t *testing.T) {
	startCoordinator(t, "grants", ipamSettings)
	n := register(t, "grant-node", "10.0.2.1")
	n.publish(t, report{providerID: "talos://metal/10.0.2.1", requested: map[string]string{
		"node-role.kubernetes.io/web": "", "node-role.kubernetes.io/control-plane": "", "node-restriction.kubernetes.io/x": "y",
	}, taints: []contract.Taint{{Key: "dedicated", Value: "web", Effect: corev1.TaintEffectNoSchedule}}})
	waitFor(t, 10*time.Second, "initialized", func() bool { return initialized(get(t, n.name)) })
	node := get(t, n.name)
	if _, ok := node.Labels["node-role.kubernetes.io/web"]; !ok {
		t.Error("node-role.kubernetes.io/web was not granted")
	}
	for _, k := range []string{"node-role.kubernetes.io/control-plane", "node-restriction.kubernetes.io/x"} {
		if _, ok := node.Labels[k]; ok {
			t.Errorf("%s was granted", k)
		}
	}
	if node.Labels[contract.LabelPlatform] != "metal" {
		t.Errorf("compatibility label %s = %q", contract.LabelPlatform, node.Labels[contract.LabelPlatform])
	}
	if !slices.ContainsFunc(node.Spec.Taints, func(t corev1.Taint) bool { return t.Key == "dedicated" && t.Value == "web" }) {
		t.Errorf("requested taint not granted: %v", node.Spec.Taints)
	}
	waitFor(t, 5*time.Second, "GrantRefused Event", func() bool { return len(events(t, n.name, "GrantRefused")) > 0 })
	msg := events(t, n.name, "GrantRefused")[0].Message
	if !strings.Contains(msg, "control-plane") || !strings.Contains(msg, "node-restriction") {
		t.Errorf("GrantRefused Event: %q", msg)
	}

	// The request goes away: the label the coordinator granted goes too.
	n.publish(t, report{providerID: "talos://metal/10.0.2.1"})
	waitFor(t, 10*time.Second, "granted label removed", func() bool {
		_, ok := get(t, n.name).Labels["node-role.kubernetes.io/web"]
		return !ok
	})
}

// Grants are owned by value: once an admin changes a granted label or
// taint, the coordinator never rewrites or removes it, and a withdrawn
// request removes only the exact label or taint the coordinator wrote.
func TestGrantsOwnedByValue(t *testing.T) {
	startCoordinator(t, "grants-by-value", ipamSettings)
	n := register(t, "grant-value-node", "10.0.2.7")
	const role = "node-role.kubernetes.io/web"
	granted := corev1.Taint{Key: "dedicated", Value: "web", Effect: corev1.TaintEffectNoSchedule}
	n.publish(t, report{providerID: "talos://metal/10.0.2.7", requested: map[string]string{role: "a"},
		taints: []contract.Taint{{Key: granted.Key, Value: granted.Value, Effect: granted.Effect}}})
	waitFor(t, 10*time.Second, "initialized with the granted label and taint", func() bool {
		node := get(t, n.name)
		return initialized(node) && node.Labels[role] == "a" && hasTaint(node, granted)
	})
	waitFor(t, 5*time.Second, "the record holding the grants by value", func() bool {
		labels, taints := recordedGrants(t, n.name)
		return slices.Contains(labels, role+"=a") && slices.Contains(taints, "dedicated=web:NoSchedule")
	})

	// During an incident an admin takes the label over and quarantines the
	// node on the same taint key with another effect.
	quarantine := corev1.Taint{Key: "dedicated", Value: "quarantine", Effect: corev1.TaintEffectNoExecute}
	node := get(t, n.name)
	node.Labels[role] = "admin"
	node.Spec.Taints = append(node.Spec.Taints, quarantine)
	if _, err := admin().CoreV1().Nodes().Update(t.Context(), node, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "the label relinquished in the record", func() bool {
		labels, _ := recordedGrants(t, n.name)
		return !slices.ContainsFunc(labels, func(e string) bool { return strings.HasPrefix(e, role+"=") })
	})
	if got := get(t, n.name).Labels[role]; got != "admin" {
		t.Fatalf("the admin's label %s=admin was rewritten to %q", role, got)
	}

	// The node withdraws its requests: only the taint the coordinator wrote goes.
	n.publish(t, report{providerID: "talos://metal/10.0.2.7"})
	waitFor(t, 10*time.Second, "the granted taint removed", func() bool { return !hasTaint(get(t, n.name), granted) })
	node = get(t, n.name)
	if !hasTaint(node, quarantine) {
		t.Errorf("the admin's quarantine taint was removed: %v", node.Spec.Taints)
	}
	if node.Labels[role] != "admin" {
		t.Errorf("the admin's label %s=admin was touched: %q", role, node.Labels[role])
	}
	// The record lets the grants go on the sync that sees the patch applied:
	// wait for it rather than read it the moment the Node changed (a race
	// `make test` hit once under -race).
	waitFor(t, 10*time.Second, "the record holding no grants", func() bool {
		labels, taints := recordedGrants(t, n.name)
		return !slices.ContainsFunc(labels, func(e string) bool { return strings.HasPrefix(e, role) }) && len(taints) == 0
	})
}

func hasTaint(node *corev1.Node, want corev1.Taint) bool {
	return slices.ContainsFunc(node.Spec.Taints, func(t corev1.Taint) bool {
		return t.Key == want.Key && t.Value == want.Value && t.Effect == want.Effect
	})
}

// recordedGrants reads the NodeRecord's grants as an admin would.
// recordOf reads a Node's NodeRecord from the API server.
func recordOf(t testing.TB, name string) *records.Record {
	t.Helper()
	u, err := dynamic.NewForConfigOrDie(cluster.Admin()).Resource(records.GVR).Get(t.Context(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	r, err := records.FromUnstructured(u)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func recordedGrants(t testing.TB, name string) (labels, taints []string) {
	t.Helper()
	r := recordOf(t, name)
	return r.Spec.GrantedLabels, r.Spec.GrantedTaints
}

func TestExhaustedPool(t *testing.T) {
	c := startCoordinator(t, "exhaust", `
ipam:
  ipv4Pool: 10.250.0.0/23
  serviceCIDRs: [10.96.0.0/16]
csr: {initWait: 0s}
`)
	var nodes []*simNode
	for i := range 3 {
		n := register(t, fmt.Sprintf("exhaust-%d", i), fmt.Sprintf("10.0.3.%d", i+1))
		n.publish(t, report{})
		nodes = append(nodes, n)
	}
	var starved string
	waitFor(t, 10*time.Second, "two nodes initialized and one PodCIDRAllocationFailed Event", func() bool {
		done := 0
		for _, n := range nodes {
			if initialized(get(t, n.name)) {
				done++
			} else if len(events(t, n.name, "PodCIDRAllocationFailed")) > 0 {
				starved = n.name
			}
		}
		return done == 2 && starved != ""
	})
	if ev := events(t, starved, "PodCIDRAllocationFailed"); !strings.Contains(ev[0].Message, "exhausted") {
		t.Errorf("event %q", ev[0].Message)
	}
	if err := c.Ready(); err != nil {
		t.Errorf("coordinator not ready with an exhausted pool: %v", err)
	}
	// A node goes away; its CIDR serves the starved one.
	for _, n := range nodes {
		if n.name != starved {
			if err := admin().CoreV1().Nodes().Delete(t.Context(), n.name, metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
			break
		}
	}
	took := waitFor(t, 10*time.Second, starved+" initialized after a release", func() bool { return initialized(get(t, starved)) })
	t.Logf("released CIDR reused after %v", took)
}

// csrFor creates a serving CSR as the node.
func (n *simNode) csr(t testing.TB, name string, dns []string, ips []string, usages ...certificatesv1.KeyUsage) {
	t.Helper()
	if len(usages) == 0 {
		usages = []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageServerAuth}
	}
	_, err := n.self.CertificatesV1().CertificateSigningRequests().Create(t.Context(), &certificatesv1.CertificateSigningRequest{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: certificatesv1.CertificateSigningRequestSpec{
			Request: csrtest.PEM(t, nil, n.name, dns, ips...), SignerName: certificatesv1.KubeletServingSignerName, Usages: usages,
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
}

func condition(t testing.TB, name string) (certificatesv1.CertificateSigningRequestCondition, bool) {
	csr, err := admin().CertificatesV1().CertificateSigningRequests().Get(t.Context(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range csr.Status.Conditions {
		if c.Type == certificatesv1.CertificateApproved || c.Type == certificatesv1.CertificateDenied {
			return c, true
		}
	}
	return certificatesv1.CertificateSigningRequestCondition{}, false
}

// attestAs plays the agent: attests the CSR under review with the given
// verdict, or for a different request when digest is set.
func (n *simNode) attest(t testing.TB, csrName string, digest string) {
	t.Helper()
	waitFor(t, 10*time.Second, "review of "+csrName, func() bool {
		r, err := contract.ParseReview(get(t, n.name).Annotations[contract.AnnotationCSRReview])
		return err == nil && r.CSR == csrName
	})
	csr, err := n.self.CertificatesV1().CertificateSigningRequests().Get(t.Context(), csrName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	att := csrcheck.Attest(csrcheck.FromCSR(csr), n.name, []string{n.name}, []netip.Addr{n.ip})
	if digest != "" {
		att.RequestSHA256 = digest
	}
	if parsed, err := csrcheck.Parse(csr.Spec.Request); err == nil {
		att.SANs = contract.RequestSANs(parsed)
	}
	v, err := contract.EncodeAttestation(att.Sign(n.name, n.key))
	if err != nil {
		t.Fatal(err)
	}
	n.patch(t, map[string]any{"metadata": map[string]any{"annotations": map[string]string{contract.AnnotationCSRAttestation: v}}}, "")
}

func TestCSRApprovalAndDenial(t *testing.T) {
	c := startCoordinator(t, "csr", ipamSettings)
	a := register(t, "csr-a", "10.0.4.1")
	b := register(t, "csr-b", "10.0.4.2")
	for _, n := range []*simNode{a, b} {
		n.publish(t, report{providerID: "talos://metal/" + n.ip.String()})
	}

	// A good CSR: approved only after the matching attestation, then issued.
	a.csr(t, "csr-a-good", []string{"csr-a"}, []string{"10.0.4.1"})
	// The review request is the sync point: the coordinator has checked the
	// CSR and now waits for the agent; it must not have decided.
	waitFor(t, 10*time.Second, "review of csr-a-good", func() bool {
		return get(t, "csr-a").Annotations[contract.AnnotationCSRReview] == "csr-a-good"
	})
	if _, decided := condition(t, "csr-a-good"); decided {
		t.Fatal("approved before the node attested")
	}
	a.attest(t, "csr-a-good", "")
	waitFor(t, 10*time.Second, "good CSR issued", func() bool {
		csr, _ := admin().CertificatesV1().CertificateSigningRequests().Get(t.Context(), "csr-a-good", metav1.GetOptions{})
		return len(csr.Status.Certificate) > 0
	})
	if c, _ := condition(t, "csr-a-good"); c.Type != certificatesv1.CertificateApproved || c.Reason != "NodeinitApproved" {
		t.Errorf("good CSR condition %+v", c)
	}
	if w := coordinatorWrites(t, "certificatesigningrequests", "csr-a-good"); len(w) != 1 || w[0].ObjectRef.Subresource != "approval" {
		t.Errorf("approval writes %+v", w)
	}

	for _, tc := range []struct {
		name   string
		create func(string)
		reason string
	}{
		{"csr-a-other-ip", func(n string) { a.csr(t, n, []string{"csr-a"}, []string{"10.0.4.1", "10.0.4.2"}) }, "10.0.4.2"},
		{"csr-a-other-name", func(n string) { a.csr(t, n, []string{"csr-a", "csr-b"}, nil) }, "csr-b"},
		{"csr-a-wildcard", func(n string) { a.csr(t, n, []string{"*.csr-a"}, nil) }, "wildcard"},
		{"csr-a-kubernetes", func(n string) { a.csr(t, n, []string{"csr-a", "KUBERNETES"}, nil) }, "KUBERNETES"},
		{"csr-a-ip-only", func(n string) { a.csr(t, n, nil, []string{"10.0.4.2"}) }, "10.0.4.2"},
		{"csr-a-client-auth", func(n string) {
			a.csr(t, n, []string{"csr-a"}, nil, certificatesv1.UsageDigitalSignature, certificatesv1.UsageServerAuth, certificatesv1.UsageClientAuth)
		}, "client auth"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.create(tc.name)
			waitFor(t, 10*time.Second, "decision", func() bool { _, ok := condition(t, tc.name); return ok })
			c, _ := condition(t, tc.name)
			if c.Type != certificatesv1.CertificateDenied || !strings.Contains(c.Message, tc.reason) {
				t.Errorf("condition %s %q, want Denied naming %q", c.Type, c.Message, tc.reason)
			}
			waitFor(t, 5*time.Second, "Denied Event", func() bool { return len(events(t, tc.name, "NodeinitDenied")) > 0 })
		})
	}

	// A stale attestation under the same name (the kubelet re-created its
	// CSR): the coordinator asks again, for this request, and never denies.
	// The agent alone writes the attestation: the coordinator leaves the
	// stale one where it is.
	a.csr(t, "csr-a-stale", []string{"csr-a"}, []string{"10.0.4.1"})
	a.attest(t, "csr-a-stale", contract.RequestDigest([]byte("the request this name had before")))
	stale, err := admin().CertificatesV1().CertificateSigningRequests().Get(t.Context(), "csr-a-stale", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	again := contract.Review{CSR: "csr-a-stale", RequestSHA256: contract.RequestDigest(stale.Spec.Request)}.String()
	waitFor(t, 10*time.Second, "the review asked again for this request", func() bool {
		return get(t, "csr-a").Annotations[contract.AnnotationCSRReview] == again
	})
	if _, ok := get(t, "csr-a").Annotations[contract.AnnotationCSRAttestation]; !ok {
		t.Fatal("the coordinator removed the agent's attestation: that annotation has one writer, the agent")
	}
	if c, decided := condition(t, "csr-a-stale"); decided {
		t.Fatalf("a stale attestation decided the CSR: %+v", c)
	}
	a.attest(t, "csr-a-stale", "")
	waitApproved(t, "csr-a-stale", 10*time.Second)

	// No attestation: asked once more, for this request, then pending with
	// an Event, under the default policy; never asked a third time.
	b.csr(t, "csr-b-silent", []string{"csr-b"}, []string{"10.0.4.2"})
	waitFor(t, 20*time.Second, "AttestationTimeout Event", func() bool { return len(events(t, "csr-b-silent", "AttestationTimeout")) > 0 })
	if len(events(t, "csr-b-silent", "AttestationAskedAgain")) == 0 {
		t.Error("timed out without asking again")
	}
	if c, decided := condition(t, "csr-b-silent"); decided {
		t.Errorf("an unattested CSR was decided: %+v", c)
	}
	asked := get(t, "csr-b").Annotations[contract.AnnotationCSRReview]
	if r, _ := contract.ParseReview(asked); r.CSR != "csr-b-silent" || r.RequestSHA256 == "" {
		t.Errorf("the review after the timeouts is %q, want an ask again for csr-b-silent's request", asked)
	}
	c.skip(4 * time.Second) // beyond another attestationTimeout (3s)
	c.lookedAgain(t, "csr-b")
	if now := get(t, "csr-b").Annotations[contract.AnnotationCSRReview]; now != asked {
		t.Errorf("asked a third time: %q after %q", now, asked)
	}
}

// An address is recorded for the Node that claimed it first: a node that
// lists it later neither takes it nor blocks the honest node's certificate;
// its own CSR for it stays pending with an Event.
func TestFirstClaimKeepsItsAddress(t *testing.T) {
	startCoordinator(t, "shared", ipamSettings)
	a := register(t, "own-a", "10.0.5.1")
	a.publish(t, report{providerID: "talos://metal/10.0.5.1"})
	waitFor(t, 10*time.Second, "own-a initialized", func() bool { return initialized(get(t, "own-a")) })
	b := register(t, "own-b", "10.0.5.2")
	b.publish(t, report{providerID: "talos://metal/10.0.5.2", externalIPs: []string{"10.0.5.1"}})
	waitFor(t, 10*time.Second, "AddressNotRecorded Event", func() bool { return len(events(t, "own-b", "AddressNotRecorded")) > 0 })
	// On the victim's (here: the later claimant's) Node, an Event names the holder.
	eventSays(t, 10*time.Second, "own-b", "AddressHeldByOtherNode", "10.0.5.1: Node own-a")

	a.csr(t, "own-a-shared", []string{"own-a"}, []string{"10.0.5.1"})
	a.attest(t, "own-a-shared", "")
	waitFor(t, 10*time.Second, "decision", func() bool { _, ok := condition(t, "own-a-shared"); return ok })
	if c, _ := condition(t, "own-a-shared"); c.Type != certificatesv1.CertificateApproved {
		t.Errorf("the first claimant's CSR: %s %q, want Approved", c.Type, c.Message)
	}
	b.csr(t, "own-b-shared", []string{"own-b"}, []string{"10.0.5.1"})
	eventSays(t, 10*time.Second, "own-b-shared", "AddressClaimedByOtherNode", "held by Node own-a")
	if c, decided := condition(t, "own-b-shared"); decided {
		t.Errorf("the later claimant's CSR was decided: %+v", c)
	}
}

// TestAnEarlierListerHoldsTheCSR: an address another Node has listed since
// before this one did, with no record naming it yet (that Node waits to be
// initialized), is that Node's. The later lister's CSR for it is held with
// an Event naming the holder, as for a recorded claim, not left waiting
// (with the node's review) for as long as the other Node keeps listing it.
func TestAnEarlierListerHoldsTheCSR(t *testing.T) {
	register(t, "lister-first", "10.0.5.21") // never reports: it waits, uninitialized, without a record
	c := startCoordinator(t, "lister", ipamSettings)
	// Leading, so it has seen lister-first list the address before
	// lister-late does (an initial list would see both at once).
	waitFor(t, 20*time.Second, "leading", func() bool { return c.Ready() == nil })
	late := register(t, "lister-late", "10.0.5.22")
	late.publish(t, report{providerID: "talos://metal/10.0.5.22", externalIPs: []string{"10.0.5.21"}})
	waitFor(t, 20*time.Second, "AddressHeldByOtherNode Event", func() bool { return len(events(t, "lister-late", "AddressHeldByOtherNode")) > 0 })
	late.csr(t, "lister-late-serving", []string{"lister-late"}, []string{"10.0.5.21"})
	eventSays(t, 20*time.Second, "lister-late-serving", "AddressClaimedByOtherNode", "held by Node lister-first")
	if c, decided := condition(t, "lister-late-serving"); decided {
		t.Errorf("the later lister's CSR was decided: %+v", c)
	}
}

// TestListersOfTheFirstListAreContested: two Nodes list one address that
// no record holds when the coordinator starts. Its first list cannot say
// which of them listed it first (it sees both at once, in name order), so
// neither is taken for the first lister: the address is held against both,
// and neither's record claims it. A node choosing a name that sorts first
// must not win an address by a coordinator's restart.
func TestListersOfTheFirstListAreContested(t *testing.T) {
	a := register(t, "first-list-a", "10.0.5.41")
	b := register(t, "first-list-b", "10.0.5.42")
	for _, n := range []*simNode{a, b} {
		n.publish(t, report{providerID: "talos://metal/" + n.ip.String(), externalIPs: []string{"10.0.5.43"}})
	}
	startCoordinator(t, "first-list", ipamSettings)
	for self, other := range map[string]string{"first-list-a": "first-list-b", "first-list-b": "first-list-a"} {
		eventSays(t, 20*time.Second, self, "AddressHeldByOtherNode", "10.0.5.43: Node "+other)
		waitFor(t, 20*time.Second, self+" initialized", func() bool { return initialized(get(t, self)) })
		if claims := recordedClaims(t, self); slices.Contains(claims, "10.0.5.43") {
			t.Errorf("%s's record claims the contested address: %v", self, claims)
		}
	}
}

func recordedClaims(t testing.TB, name string) []string {
	t.Helper()
	var out []string
	for _, c := range recordOf(t, name).Spec.Addresses {
		out = append(out, c.IP)
	}
	return out
}

// TestADecoyDoesNotHideAnEntitledEarlierLister: where the inventory binds
// an address's network, only a Node it entitles can be its earlier lister.
// A decoy the inventory does not entitle, listing the address before
// either, must not hide the entitled Node that listed it first from the
// entitled one that listed it later.
func TestADecoyDoesNotHideAnEntitledEarlierLister(t *testing.T) {
	c := startCoordinator(t, "decoy", ipamSettings+`
inventory:
- nodes: ["bound-*"]
  networks: [10.0.6.0/24]
`)
	waitFor(t, 20*time.Second, "leading", func() bool { return c.Ready() == nil })
	// Neither reports: they wait, uninitialized, without records.
	register(t, "aaa-decoy", "10.0.6.7")
	waitFor(t, 10*time.Second, "aaa-decoy seen", func() bool { return c.Waiting("aaa-decoy") })
	register(t, "bound-first", "10.0.6.7")
	waitFor(t, 10*time.Second, "bound-first seen", func() bool { return c.Waiting("bound-first") })
	second := register(t, "bound-second", "10.0.5.53")
	second.publish(t, report{providerID: "talos://metal/10.0.5.53", externalIPs: []string{"10.0.6.7"}})
	eventSays(t, 20*time.Second, "bound-second", "AddressHeldByOtherNode", "10.0.6.7: Node bound-first")
	waitFor(t, 20*time.Second, "bound-second initialized", func() bool { return initialized(get(t, "bound-second")) })
	if claims := recordedClaims(t, "bound-second"); slices.Contains(claims, "10.0.6.7") {
		t.Errorf("the later lister's record claims the address: %v", claims)
	}
}

// TestAnUnreadableRecordStillHolds: an admin's edit the API server accepts
// but the coordinator cannot read (a date in lower case: the schema's
// date-time check lower-cases before it checks, Go's RFC 3339 parser does
// not) must not free what the record holds: here the node prefix another
// Node lists an address in.
func TestAnUnreadableRecordStillHolds(t *testing.T) {
	m := controller.NewMetrics(prometheus.NewRegistry())
	unreadable := func() float64 { return testutil.ToFloat64(m.RecordsUnreadable) }
	first := startCoordinatorAs(t, "unreadable", ipamSettings, coordinatorIdentity(t), func(c *controller.Config) { c.Metrics = m })
	a := register(t, "garbled-a", "10.0.5.71")
	a.publish(t, report{providerID: "talos://metal/10.0.5.71", externalIPs: []string{"2001:db8:5:1::a"}, prefixes: []string{"2001:db8:5:1::/64"}})
	waitFor(t, 20*time.Second, "garbled-a initialized", func() bool { return initialized(get(t, "garbled-a")) })
	editSince(t, "garbled-a", strings.ToLower)
	t.Cleanup(func() { editSince(t, "garbled-a", strings.ToUpper) }) // for the tests after this one
	u, err := dynamic.NewForConfigOrDie(cluster.Admin()).Resource(records.GVR).Get(t.Context(), "garbled-a", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := records.FromUnstructured(u); err == nil {
		t.Fatal("the edited record still reads: the test edits nothing the coordinator cannot read")
	}
	waitFor(t, 10*time.Second, "nodeinit_coordinator_noderecords_unreadable at 1", func() bool { return unreadable() == 1 })
	b := register(t, "garbled-b", "10.0.5.72")
	b.publish(t, report{providerID: "talos://metal/10.0.5.72", externalIPs: []string{"2001:db8:5:1::b"}})
	waitFor(t, 20*time.Second, "garbled-b initialized", func() bool { return initialized(get(t, "garbled-b")) })
	if claims := recordedClaims(t, "garbled-b"); slices.Contains(claims, "2001:db8:5:1::b") {
		t.Errorf("garbled-b's record claims an address inside garbled-a's node prefix: %v", claims)
	}
	// garbled-a's own CSR is held for its record: nothing is decided from
	// a record that cannot be read (not "no enrolled key", which would
	// have an admin enrol a key again).
	a.csr(t, "garbled-a-serving", []string{"garbled-a"}, []string{"10.0.5.71"})
	waitFor(t, 20*time.Second, "NodeRecordUnreadable Event", func() bool { return len(events(t, "garbled-a-serving", "NodeRecordUnreadable")) > 0 })
	if c, decided := condition(t, "garbled-a-serving"); decided {
		t.Errorf("a CSR of the Node whose record cannot be read was decided: %+v", c)
	}
	if ev := events(t, "garbled-a-serving", "NoEnrolledAgentKey"); len(ev) > 0 {
		t.Errorf("held as if no key were enrolled: %q", ev[0].Message)
	}
	// Fixed, it counts no more.
	editSince(t, "garbled-a", strings.ToUpper)
	waitFor(t, 10*time.Second, "nodeinit_coordinator_noderecords_unreadable back at 0", func() bool { return unreadable() == 0 })
	editSince(t, "garbled-a", strings.ToLower)
	// A new leader starts all the same: one record it cannot read does not
	// stop its fresh list of records at leader start.
	first.stop()
	next := startCoordinator(t, "unreadable-next", ipamSettings)
	waitFor(t, 20*time.Second, "the next coordinator leading", func() bool { return next.Ready() == nil })
}

// editSince rewrites the dates of a record's claims, as an admin's
// kubectl edit would.
func editSince(t testing.TB, name string, edit func(string) string) {
	t.Helper()
	recs := dynamic.NewForConfigOrDie(cluster.Admin()).Resource(records.GVR)
	// The coordinator may write the record meanwhile: edit its latest.
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		u, err := recs.Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		addrs, _, _ := unstructured.NestedSlice(u.Object, "spec", "addresses")
		for _, c := range addrs {
			c.(map[string]any)["since"] = edit(c.(map[string]any)["since"].(string))
		}
		if err := unstructured.SetNestedSlice(u.Object, addrs, "spec", "addresses"); err != nil {
			return err
		}
		_, err = recs.Update(context.Background(), u, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Fatalf("the edited record: %v", err)
	}
}

// A coordinator whose first lists are refused (here: its RBAC is not bound
// yet, as after an API-server restart) says so on /readyz, keeps probing,
// and is ready within a probe of the lists being allowed, instead of sitting
// in client-go's reflector backoff.
func TestWaitsForTheAPIServer(t *testing.T) {
	coordinatorIdentity(t) // the shipped roles exist
	cfg, err := cluster.ClientIdentity("nodeinit-late")
	if err != nil {
		t.Fatal(err)
	}
	c := startCoordinatorAs(t, "late", ipamSettings, cfg)
	waitFor(t, 5*time.Second, "readiness naming the API server", func() bool {
		err := c.Ready()
		return err != nil && strings.Contains(err.Error(), "waiting for the API server") && strings.Contains(err.Error(), "forbidden")
	})
	time.Sleep(3 * time.Second) // long enough for a reflector to have backed off
	subject := []rbacv1.Subject{{Kind: rbacv1.UserKind, Name: "nodeinit-late", APIGroup: rbacv1.GroupName}}
	if _, err := admin().RbacV1().ClusterRoleBindings().Create(t.Context(), &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "nodeinit-late"}, Subjects: subject,
		RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "nodeinit-coordinator"},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := admin().RbacV1().RoleBindings("kube-system").Create(t.Context(), &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "nodeinit-late", Namespace: "kube-system"}, Subjects: subject,
		RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "nodeinit-coordinator"},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The kubernetes EndpointSlices (the default namespace's Role) are
	// allowed last, seconds later, as a GitOps tool applying the manifest
	// in pieces may: long enough for a reflector refused them to back off
	// twice.
	time.Sleep(3 * time.Second)
	if _, err := admin().RbacV1().RoleBindings("default").Create(t.Context(), &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "nodeinit-late", Namespace: "default"}, Subjects: subject,
		RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "nodeinit-coordinator"},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	took := waitFor(t, 3*time.Second, "ready once allowed", func() bool { return c.Ready() == nil })
	t.Logf("ready %v after its RBAC was bound", took.Round(time.Millisecond))
}

// The shipped RBAC lets the coordinator do its job and nothing more.
func TestRBAC(t *testing.T) {
	coordinatorIdentity(t)
	allowed := func(attrs authorizationv1.ResourceAttributes) bool {
		review, err := admin().AuthorizationV1().SubjectAccessReviews().Create(t.Context(), &authorizationv1.SubjectAccessReview{
			Spec: authorizationv1.SubjectAccessReviewSpec{
				User: coordinatorUser, Groups: []string{"system:serviceaccounts", "system:serviceaccounts:kube-system", "system:authenticated"},
				ResourceAttributes: &attrs,
			},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return review.Status.Allowed
	}
	cert := "certificates.k8s.io"
	for _, tc := range []struct {
		what  authorizationv1.ResourceAttributes
		allow bool
	}{
		{authorizationv1.ResourceAttributes{Verb: "list", Resource: "nodes"}, true},
		{authorizationv1.ResourceAttributes{Verb: "watch", Resource: "nodes"}, true},
		{authorizationv1.ResourceAttributes{Verb: "patch", Resource: "nodes", Name: "any"}, true},
		{authorizationv1.ResourceAttributes{Verb: "list", Group: cert, Resource: "certificatesigningrequests"}, true},
		{authorizationv1.ResourceAttributes{Verb: "update", Group: cert, Resource: "certificatesigningrequests", Subresource: "approval"}, true},
		{authorizationv1.ResourceAttributes{Verb: "approve", Group: cert, Resource: "signers", Name: "kubernetes.io/kubelet-serving"}, true},
		{authorizationv1.ResourceAttributes{Verb: "create", Resource: "events", Namespace: "default"}, true},
		{authorizationv1.ResourceAttributes{Verb: "watch", Resource: "events"}, false}, // it reads no Events
		{authorizationv1.ResourceAttributes{Verb: "list", Resource: "events", Namespace: "default"}, false},
		{authorizationv1.ResourceAttributes{Verb: "delete", Resource: "events", Namespace: "default"}, false},
		{authorizationv1.ResourceAttributes{Verb: "update", Group: "coordination.k8s.io", Resource: "leases", Namespace: "kube-system", Name: "nodeinit-coordinator"}, true},

		{authorizationv1.ResourceAttributes{Verb: "update", Group: "nodeinit.io", Resource: "noderecords", Name: "any"}, true},
		{authorizationv1.ResourceAttributes{Verb: "list", Group: "networking.k8s.io", Resource: "servicecidrs"}, true},
		{authorizationv1.ResourceAttributes{Verb: "watch", Group: "discovery.k8s.io", Resource: "endpointslices", Namespace: "default"}, true},
		// --secure-metrics-addr: who is asking, and may they get /metrics.
		{authorizationv1.ResourceAttributes{Verb: "create", Group: "authentication.k8s.io", Resource: "tokenreviews"}, true},
		{authorizationv1.ResourceAttributes{Verb: "create", Group: "authorization.k8s.io", Resource: "subjectaccessreviews"}, true},
		{authorizationv1.ResourceAttributes{Verb: "create", Group: "authorization.k8s.io", Resource: "localsubjectaccessreviews", Namespace: "kube-system"}, false},
		{authorizationv1.ResourceAttributes{Verb: "create", Resource: "serviceaccounts", Subresource: "token", Namespace: "kube-system", Name: "any"}, false},

		{authorizationv1.ResourceAttributes{Verb: "delete", Resource: "nodes", Name: "any"}, false},
		{authorizationv1.ResourceAttributes{Verb: "delete", Group: "nodeinit.io", Resource: "noderecords", Name: "any"}, false},
		{authorizationv1.ResourceAttributes{Verb: "list", Group: "discovery.k8s.io", Resource: "endpointslices", Namespace: "kube-system"}, false},
		{authorizationv1.ResourceAttributes{Verb: "create", Resource: "nodes"}, false},
		{authorizationv1.ResourceAttributes{Verb: "update", Resource: "nodes", Name: "any"}, false},
		{authorizationv1.ResourceAttributes{Verb: "patch", Resource: "nodes", Subresource: "status", Name: "any"}, false},
		{authorizationv1.ResourceAttributes{Verb: "get", Resource: "secrets", Namespace: "kube-system"}, false},
		{authorizationv1.ResourceAttributes{Verb: "list", Resource: "pods"}, false},
		{authorizationv1.ResourceAttributes{Verb: "approve", Group: cert, Resource: "signers", Name: "kubernetes.io/kube-apiserver-client"}, false},
		{authorizationv1.ResourceAttributes{Verb: "approve", Group: cert, Resource: "signers", Name: "kubernetes.io/kube-apiserver-client-kubelet"}, false},
		{authorizationv1.ResourceAttributes{Verb: "delete", Group: cert, Resource: "certificatesigningrequests"}, false},
		{authorizationv1.ResourceAttributes{Verb: "update", Group: "coordination.k8s.io", Resource: "leases", Namespace: "kube-system", Name: "kube-controller-manager"}, false},
		{authorizationv1.ResourceAttributes{Verb: "create", Group: "rbac.authorization.k8s.io", Resource: "clusterrolebindings"}, false},
	} {
		if got := allowed(tc.what); got != tc.allow {
			t.Errorf("%s %s/%s %s in %q: allowed=%v, want %v", tc.what.Verb, tc.what.Resource, tc.what.Subresource, tc.what.Name, tc.what.Namespace, got, tc.allow)
		}
	}
}

func mustJSON(t testing.TB, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// Pod CIDRs another writer put on a Node after the leader rebuilt (the
// previous leader's last patch, an admin, a migrated cluster) are accounted
// for: they are never handed out again, and a conflict is an Event.
func TestPodCIDRsFromAnotherWriter(t *testing.T) {
	c := startCoordinator(t, "other-writer", `
nodeNetworks: [10.0.0.0/8]
ipam:
  ipv4Pool: 10.250.0.0/16
  serviceCIDRs: [10.96.0.0/16]
csr: {minAddressAge: 1s, initWait: 0s}
`)
	waitFor(t, 10*time.Second, "leading", func() bool { return c.Ready() == nil })
	// Nodes left by earlier tests take segments first; once that settles,
	// the allocator would hand out the lowest free segment next: another
	// writer takes it.
	held := func() map[string]bool {
		out := map[string]bool{}
		all, _ := admin().CoreV1().Nodes().List(t.Context(), metav1.ListOptions{})
		for _, n := range all.Items {
			for _, p := range n.Spec.PodCIDRs {
				out[p] = true
			}
		}
		return out
	}
	// Once each has synced again, whatever it takes is written.
	c.resynced(t)
	prev := held()
	next := ""
	for i := 0; next == ""; i++ {
		if seg := fmt.Sprintf("10.250.%d.0/24", i); !prev[seg] {
			next = seg
		}
	}
	x := register(t, "ow-x", "10.0.8.1")
	if _, err := admin().CoreV1().Nodes().Patch(t.Context(), "ow-x", types.MergePatchType,
		fmt.Appendf(nil, `{"spec":{"podCIDR":%q,"podCIDRs":[%q]}}`, next, next), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	x.publish(t, report{})
	waitFor(t, 10*time.Second, "ow-x initialized", func() bool { return initialized(get(t, "ow-x")) })
	y := register(t, "ow-y", "10.0.8.2")
	y.publish(t, report{})
	waitFor(t, 10*time.Second, "ow-y initialized", func() bool { return initialized(get(t, "ow-y")) && len(get(t, "ow-y").Spec.PodCIDRs) > 0 })
	all, err := admin().CoreV1().Nodes().List(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	holder := map[string]string{}
	for _, n := range all.Items {
		for _, p := range n.Spec.PodCIDRs {
			if other, ok := holder[p]; ok {
				t.Errorf("pod CIDR %s is both %s's and %s's", p, other, n.Name)
			}
			holder[p] = n.Name
		}
	}
	// Another writer creates a Node holding ow-y's segment: a conflict, said.
	ySeg := get(t, "ow-y").Spec.PodCIDRs[0]
	if _, err := admin().CoreV1().Nodes().Create(t.Context(), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "ow-z"},
		Spec: corev1.NodeSpec{PodCIDR: ySeg, PodCIDRs: []string{ySeg}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = admin().CoreV1().Nodes().Delete(context.Background(), "ow-z", metav1.DeleteOptions{}) })
	waitFor(t, 10*time.Second, "PodCIDRConflict", func() bool { return len(events(t, "ow-z", "PodCIDRConflict")) > 0 })

	// Another writer gives a Node a pod CIDR holding its own address: its
	// serving CSRs would be denied for good; the coordinator says how to
	// get another.
	if _, err := admin().CoreV1().Nodes().Create(t.Context(), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "ow-w"},
		Spec:   corev1.NodeSpec{PodCIDR: "10.0.9.0/24", PodCIDRs: []string{"10.0.9.0/24"}},
		Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "10.0.9.5"}}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = admin().CoreV1().Nodes().Delete(context.Background(), "ow-w", metav1.DeleteOptions{}) })
	waitFor(t, 10*time.Second, "PodCIDRHoldsNodeAddress", func() bool {
		ev := events(t, "ow-w", "PodCIDRHoldsNodeAddress")
		return len(ev) > 0 && strings.Contains(ev[0].Message, "10.0.9.5") && strings.Contains(ev[0].Message, "service kubelet restart")
	})
	if ev := events(t, "ow-x", "PodCIDRHoldsNodeAddress"); len(ev) > 0 {
		t.Errorf("ow-x's pod CIDR holds none of its addresses, yet: %s", ev[0].Message)
	}
}

// A CSR first seen after the attestation timeout (the coordinator was down)
// is still reviewed: the timeout counts from the review request, so even
// onTimeout: approve does not approve it without its agent's attestation.
func TestLateCSRIsReviewed(t *testing.T) {
	n := register(t, "late-csr", "10.0.6.1")
	n.publish(t, report{providerID: "talos://metal/10.0.6.1"})
	n.csr(t, "late-csr-serving", []string{"late-csr"}, []string{"10.0.6.1"})
	// Older than attestationTimeout (3s) before any coordinator runs.
	startCoordinatorAs(t, "late-csr", ipamSettings+"  onTimeout: approve\n", coordinatorIdentity(t), func(c *controller.Config) {
		c.Clock.(*skewClock).ahead.Store(int64(4 * time.Second))
	})
	waitFor(t, 15*time.Second, "review request", func() bool {
		return get(t, "late-csr").Annotations[contract.AnnotationCSRReview] == "late-csr-serving"
	})
	if c, decided := condition(t, "late-csr-serving"); decided {
		t.Fatalf("decided before the node's agent was asked: %+v", c)
	}
	n.attest(t, "late-csr-serving", "")
	waitFor(t, 10*time.Second, "approved", func() bool {
		c, _ := condition(t, "late-csr-serving")
		return c.Type == certificatesv1.CertificateApproved && strings.Contains(c.Message, "attested")
	})
}

// atOrAfter compares resource versions (etcd revisions) as numbers.
func atOrAfter(rv, than string) bool {
	a, errA := strconv.ParseUint(rv, 10, 64)
	b, errB := strconv.ParseUint(than, 10, 64)
	return errA == nil && errB == nil && a >= b
}

// reviewOf is the CSR the Node's review names, whether it is the plain ask
// or, after the attestation timeout, the ask again with the request's
// digest.
func reviewOf(t *testing.T, node string) string {
	t.Helper()
	r, _ := contract.ParseReview(get(t, node).Annotations[contract.AnnotationCSRReview])
	return r.CSR
}

// A CSR approved by hand while under review hands the Node's review on to
// its next pending CSR: the CSR sync sees it decided and drops its
// hand-off, as it does for its own decisions. Before, the Node's review
// stayed on the hand-approved CSR until the csrcleaner removed it.
func TestReviewMovesOnWhenApprovedByHand(t *testing.T) {
	c := startCoordinator(t, "by-hand", ipamSettings)
	n := register(t, "by-hand", "10.0.6.2")
	n.publish(t, report{providerID: "talos://metal/10.0.6.2"})
	n.csr(t, "by-hand-old", []string{"by-hand"}, []string{"10.0.6.2"})
	waitFor(t, 10*time.Second, "review of by-hand-old", func() bool {
		return reviewOf(t, "by-hand") == "by-hand-old"
	})
	time.Sleep(1100 * time.Millisecond) // a newer creation time (seconds)
	n.csr(t, "by-hand-new", []string{"by-hand"}, []string{"10.0.6.2"})
	// The one under review keeps the review over a newer one.
	c.lookedAgain(t, "by-hand")
	if got := reviewOf(t, "by-hand"); got != "by-hand-old" {
		t.Fatalf("csr-review %q while by-hand-old waits for its attestation, want by-hand-old", got)
	}
	// An admin approves it by hand, before the attestation timeout (3s).
	csr, err := admin().CertificatesV1().CertificateSigningRequests().Get(t.Context(), "by-hand-old", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	csr.Status.Conditions = append(csr.Status.Conditions, certificatesv1.CertificateSigningRequestCondition{
		Type: certificatesv1.CertificateApproved, Status: corev1.ConditionTrue, Reason: "ApprovedByHand",
	})
	if _, err := admin().CertificatesV1().CertificateSigningRequests().UpdateApproval(t.Context(), "by-hand-old", csr, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "the review handed on to by-hand-new", func() bool {
		return reviewOf(t, "by-hand") == "by-hand-new"
	})
}
