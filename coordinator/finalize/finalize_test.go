package finalize

import (
	"encoding/json"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/talos-nodeinit/talos-nodeinit/coordinator/config"
	"github.com/talos-nodeinit/talos-nodeinit/pkg/contract"
)

// grants is the default policy with the roles these tests request listed,
// as a cluster that wants them (or `migrate`) lists them.
func grants(t *testing.T) config.Grants {
	c, err := config.Parse([]byte(`grants: {labels: {allow: ["node.cloudprovider.kubernetes.io/*", "node-role.kubernetes.io/web", "node-role.kubernetes.io/db"]}}`))
	if err != nil {
		t.Fatal(err)
	}
	return c.Grants
}

func reportedNode(t *testing.T, requested map[string]string, taints []contract.Taint) *corev1.Node {
	t.Helper()
	md, _ := contract.EncodeMetadata(contract.Metadata{Platform: "metal", Spot: true})
	rl, _ := contract.EncodeRequestedLabels(requested)
	rt, _ := contract.EncodeRequestedTaints(taints)
	pf, _ := contract.EncodePrefixes([]netip.Prefix{netip.MustParsePrefix("2001:db8:1:2::/64")})
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "n1", ResourceVersion: "42", Labels: map[string]string{"other": "x"}, Annotations: map[string]string{
			contract.AnnotationMetadata: md, contract.AnnotationRequestedLabels: rl, contract.AnnotationRequestedTaints: rt,
			contract.AnnotationPrefixes: pf, contract.AnnotationProvidedNodeIP: "10.0.0.1",
		}},
		Spec: corev1.NodeSpec{Taints: []corev1.Taint{
			{Key: contract.TaintUninitialized, Value: "true", Effect: corev1.TaintEffectNoSchedule},
			{Key: "node.kubernetes.io/not-ready", Effect: corev1.TaintEffectNoSchedule},
		}},
		Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{
			{Type: corev1.NodeInternalIP, Address: "10.0.0.1"}, {Type: corev1.NodeExternalIP, Address: "2001:db8:1:2::10"},
		}},
	}
}

type patch struct {
	Metadata struct {
		ResourceVersion string            `json:"resourceVersion"`
		Labels          map[string]any    `json:"labels"`
		Annotations     map[string]string `json:"annotations"`
	} `json:"metadata"`
	Spec struct {
		PodCIDR  string         `json:"podCIDR"`
		PodCIDRs []string       `json:"podCIDRs"`
		Taints   []corev1.Taint `json:"taints"`
	} `json:"spec"`
}

func TestInitializeInOnePatch(t *testing.T) {
	node := reportedNode(t,
		map[string]string{"node-role.kubernetes.io/web": "", "node-role.kubernetes.io/control-plane": "", "node-restriction.kubernetes.io/x": "y"},
		[]contract.Taint{{Key: "dedicated", Value: "web", Effect: corev1.TaintEffectNoSchedule}})
	r := Read(node)
	if w := Waiting(node, r, false); len(w) != 0 {
		t.Fatalf("waiting for %v", w)
	}
	cidrs := []netip.Prefix{netip.MustParsePrefix("10.244.1.0/24"), netip.MustParsePrefix("2001:db8:1:2:1::/80")}
	plan, err := Compute(node, r, Inputs{Grants: grants(t), ClusterName: "prod", CIDRs: cidrs, Initialize: true})
	if err != nil {
		t.Fatal(err)
	}
	var p patch
	if err := json.Unmarshal(plan.Patch, &p); err != nil {
		t.Fatal(err)
	}
	if p.Metadata.ResourceVersion != "42" {
		t.Error("the patch must be conditional on the resourceVersion read")
	}
	wantLabels := map[string]any{"node-role.kubernetes.io/web": "", contract.LabelPlatform: "metal", contract.LabelLifecycle: "spot", contract.LabelClusterName: "prod"}
	if len(p.Metadata.Labels) != len(wantLabels) {
		t.Errorf("labels %v, want %v", p.Metadata.Labels, wantLabels)
	}
	for k, v := range wantLabels {
		if p.Metadata.Labels[k] != v {
			t.Errorf("label %s = %v, want %v", k, p.Metadata.Labels[k], v)
		}
	}
	if len(plan.Refused) != 2 || !strings.Contains(strings.Join(plan.Refused, "|"), "control-plane") || !strings.Contains(strings.Join(plan.Refused, "|"), "node-restriction") {
		t.Errorf("refused %v", plan.Refused)
	}
	if p.Spec.PodCIDR != "10.244.1.0/24" || !slices.Equal(p.Spec.PodCIDRs, []string{"10.244.1.0/24", "2001:db8:1:2:1::/80"}) {
		t.Errorf("pod CIDRs %q %q", p.Spec.PodCIDR, p.Spec.PodCIDRs)
	}
	keys := []string{}
	for _, tt := range p.Spec.Taints {
		keys = append(keys, tt.Key)
	}
	if !slices.Equal(keys, []string{"node.kubernetes.io/not-ready", "dedicated"}) {
		t.Errorf("taints %v: uninitialized removed, others kept, granted added", keys)
	}
}

func TestNothingToDoIsNoPatch(t *testing.T) {
	node := reportedNode(t, map[string]string{"node-role.kubernetes.io/web": ""}, nil)
	node.Spec.Taints = nil
	node.Spec.PodCIDRs, node.Spec.PodCIDR = []string{"10.244.1.0/24"}, "10.244.1.0/24"
	node.Labels = map[string]string{"node-role.kubernetes.io/web": "", contract.LabelPlatform: "metal", contract.LabelLifecycle: "spot"}
	plan, err := Compute(node, Read(node), Inputs{Grants: grants(t), CIDRs: []netip.Prefix{netip.MustParsePrefix("10.244.9.0/24")},
		PreviousLabels: []string{"node-role.kubernetes.io/web", contract.LabelPlatform, contract.LabelLifecycle}})
	if err != nil || plan.Patch != nil {
		t.Fatalf("steady state must not patch: %s %v", plan.Patch, err)
	}
}

func TestRemovesOnlyLabelsItGranted(t *testing.T) {
	node := reportedNode(t, map[string]string{}, nil)
	node.Labels = map[string]string{"node-role.kubernetes.io/web": "", "node-role.kubernetes.io/db": "", contract.LabelPlatform: "metal", contract.LabelLifecycle: "spot"}
	plan, err := Compute(node, Read(node), Inputs{Grants: grants(t), PreviousLabels: []string{"node-role.kubernetes.io/web=", contract.LabelPlatform, contract.LabelLifecycle}})
	if err != nil {
		t.Fatal(err)
	}
	var p patch
	_ = json.Unmarshal(plan.Patch, &p)
	if v, ok := p.Metadata.Labels["node-role.kubernetes.io/web"]; !ok || v != nil {
		t.Errorf("a label granted earlier and no longer requested must be removed: %v", p.Metadata.Labels)
	}
	if _, touched := p.Metadata.Labels["node-role.kubernetes.io/db"]; touched {
		t.Error("a label the coordinator never granted was touched")
	}
}

func TestWaitingAndMalformedReports(t *testing.T) {
	node := reportedNode(t, nil, nil)
	node.Annotations[contract.AnnotationRequestedLabels] = `{"v":1,"labels":` // truncated
	node.Annotations[contract.AnnotationMetadata] = `{"v":99}`
	r := Read(node)
	if len(r.Problems) != 2 || r.Metadata != nil || r.RequestedLabels != nil {
		t.Errorf("malformed annotations must be reported and ignored: %+v", r)
	}
	node.Status.Addresses = node.Status.Addresses[1:]
	w := Waiting(node, r, true)
	if len(w) != 3 {
		t.Errorf("waiting = %v, want metadata, providerID and the node IP", w)
	}
}

func TestRequestPicksThePrefixHoldingAnAddress(t *testing.T) {
	node := reportedNode(t, nil, nil)
	r := Read(node)
	nets := []netip.Prefix{netip.MustParsePrefix("2001:db8::/32")}
	claimed := Addresses(node)
	req := Request(claimed, r, nets, true, false)
	if !req.IPv4 || !req.IPv6 || req.IPv6Prefix != netip.MustParsePrefix("2001:db8:1:2::/64") || req.IPv6Addr != netip.MustParseAddr("2001:db8:1:2::10") {
		t.Errorf("request %+v", req)
	}
	r.Prefixes = []netip.Prefix{netip.MustParsePrefix("2001:db8:9::/64")} // holds no address of the node
	if req := Request(claimed, r, nets, true, false); req.IPv6 {
		t.Errorf("a prefix holding none of the node's addresses must not be used: %+v", req)
	}
	r = Read(node)
	if req := Request(claimed[:1], r, nets, true, false); req.IPv6 {
		t.Errorf("a prefix holding an address not recorded as the node's must not be used: %+v", req)
	}
	if req := Request(claimed, r, []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}, true, false); req.IPv6 {
		t.Errorf("a prefix outside the node networks must not be used: %+v", req)
	}
}

// Prefixes reported before the addresses that justify them: wait, or the
// node would get a pool segment instead of one from its own prefix.
func TestWaitsForAddressesInReportedPrefixes(t *testing.T) {
	node := reportedNode(t, nil, nil)
	node.Status.Addresses = node.Status.Addresses[:1] // only the IPv4 InternalIP
	w := Waiting(node, Read(node), false)
	if len(w) != 1 || !strings.Contains(w[0], "reported prefixes") {
		t.Fatalf("waiting = %v", w)
	}
}

// A CSR pending at initialization is put under review by the same patch;
// a review already requested is not requested again.
func TestInitializationCarriesReview(t *testing.T) {
	node := reportedNode(t, nil, nil)
	cidrs := []netip.Prefix{netip.MustParsePrefix("10.244.1.0/24")}
	plan, err := Compute(node, Read(node), Inputs{Grants: grants(t), CIDRs: cidrs, Initialize: true, Review: "csr-abc"})
	if err != nil {
		t.Fatal(err)
	}
	var p struct {
		Metadata struct {
			Annotations map[string]string `json:"annotations"`
		} `json:"metadata"`
		Spec struct {
			PodCIDRs []string `json:"podCIDRs"`
		} `json:"spec"`
	}
	if err := json.Unmarshal(plan.Patch, &p); err != nil {
		t.Fatal(err)
	}
	if p.Metadata.Annotations[contract.AnnotationCSRReview] != "csr-abc" || len(p.Spec.PodCIDRs) != 1 {
		t.Errorf("patch %s: want the review request and the pod CIDRs together", plan.Patch)
	}
	node.Annotations[contract.AnnotationCSRReview] = "csr-abc"
	plan, err = Compute(node, Read(node), Inputs{Grants: grants(t), CIDRs: cidrs, Initialize: true, Review: "csr-abc"})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(plan.Patch), contract.AnnotationCSRReview) {
		t.Errorf("patch %s repeats a review already requested", plan.Patch)
	}
}

// The node's annotations are attacker-controlled: a node naming an admin's
// label in its old granted-labels annotation, or requesting the cluster
// name, changes nothing.
func TestNodeWrittenBookkeepingIsIgnored(t *testing.T) {
	node := reportedNode(t, map[string]string{contract.LabelClusterName: "other", contract.LabelPlatform: "aws"}, nil)
	node.Spec.Taints = nil
	node.Labels = map[string]string{"node-restriction.kubernetes.io/pool": "gold", "node-role.kubernetes.io/db": "", contract.LabelClusterName: "prod",
		contract.LabelPlatform: "metal", contract.LabelLifecycle: "spot"}
	node.Annotations[contract.AnnotationGrantedLabels] = `{"v":1,"keys":["node-restriction.kubernetes.io/pool","node-role.kubernetes.io/db"]}`
	plan, err := Compute(node, Read(node), Inputs{Grants: grants(t), ClusterName: "prod"})
	if err != nil {
		t.Fatal(err)
	}
	if plan.Patch != nil {
		t.Errorf("patched from node-written bookkeeping: %s", plan.Patch)
	}
	if len(plan.Refused) != 2 || !strings.Contains(strings.Join(plan.Refused, "|"), "clustername is set by the coordinator") {
		t.Errorf("refused %v: want the cluster name and platform requests refused", plan.Refused)
	}
	if plan.Want[contract.LabelClusterName] != "prod" {
		t.Errorf("cluster name %q, want the configured prod", plan.Want[contract.LabelClusterName])
	}
}

func TestRemovesOnlyTaintsItGranted(t *testing.T) {
	node := reportedNode(t, nil, nil)
	node.Spec.Taints = []corev1.Taint{{Key: "dedicated", Effect: corev1.TaintEffectNoSchedule}, {Key: "admin", Effect: corev1.TaintEffectNoExecute}}
	plan, err := Compute(node, Read(node), Inputs{Grants: grants(t), PreviousTaints: []string{"dedicated=:NoSchedule"}})
	if err != nil {
		t.Fatal(err)
	}
	var p patch
	_ = json.Unmarshal(plan.Patch, &p)
	if len(p.Spec.Taints) != 1 || p.Spec.Taints[0].Key != "admin" {
		t.Errorf("taints %v: want only the granted, no longer requested taint removed", p.Spec.Taints)
	}
}

// TestMalformedReportsAreNodeText: what a malformed report says reaches the
// MalformedAgentReport Event; whatever the node wrote, each problem is one
// printable line of bounded size.
func TestMalformedReportsAreNodeText(t *testing.T) {
	long := strings.Repeat("a\n\x1b[2K", 4000)
	key, _ := json.Marshal(long)
	node := reportedNode(t, nil, nil)
	node.Annotations[contract.AnnotationRequestedLabels] = `{"v":1,"labels":{` + string(key) + `:"x"}}`
	node.Annotations[contract.AnnotationRequestedTaints] = `{"v":1,"taints":[{"key":"a","value":` + string(key) + `,"effect":"NoSchedule"}]}`
	node.Annotations[contract.AnnotationMetadata] = `{"v":1,"platform":` + string(key) + `}`
	node.Annotations[contract.AnnotationPrefixes] = `{"v":1,"prefixes":[` + string(key) + `]}`
	r := Read(node)
	if len(r.Problems) != 4 {
		t.Fatalf("problems = %q, want one per annotation", r.Problems)
	}
	for _, p := range r.Problems {
		if len(p) > 100+contract.MaxNodeTextQuoted {
			t.Errorf("a problem is %d bytes: %.200q…", len(p), p)
		}
		if strings.ContainsFunc(p, func(r rune) bool { return !strconv.IsPrint(r) }) {
			t.Errorf("a problem carries a control character: %.200q…", p)
		}
	}
}
