package desired

import (
	"encoding/json"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/talos-nodeinit/talos-nodeinit/pkg/contract"
	"github.com/talos-nodeinit/talos-nodeinit/pkg/facts"
	"github.com/talos-nodeinit/talos-nodeinit/pkg/netaddr"
	"github.com/talos-nodeinit/talos-nodeinit/pkg/rules"
	"github.com/talos-nodeinit/talos-nodeinit/pkg/talos"
)

func inputs(t *testing.T, ruleDoc string) Inputs {
	t.Helper()
	r, err := rules.Load([]byte(ruleDoc))
	if err != nil {
		t.Fatal(err)
	}
	return Inputs{
		NodeName: "web-1",
		Talos: facts.Talos{
			Metadata: &facts.Platform{Platform: "metal", Hostname: "web-1", Region: "eu", Zone: "eu-1a"},
			NodeIPs:  []netip.Addr{netip.MustParseAddr("10.0.0.5")}, ExternalIPs: []netip.Addr{netip.MustParseAddr("198.51.100.1")},
		},
		Addresses: []netaddr.Address{
			{Prefix: netip.MustParsePrefix("10.0.0.5/24"), Link: "eth0", LinkUp: true, Permanent: true},
			{Prefix: netip.MustParsePrefix("2001:db8:1:2::5/64"), Link: "eth0", LinkUp: true, Permanent: true},
		},
		Classifier: netaddr.NewClassifier(), Rules: r, Policy: ProviderIDFromMetadata, AgentVersion: "v0.0.0-test",
		AgentKey: "ed25519:AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=",
	}
}

const webRules = `
transformations:
- name: web
  nodeSelector:
  - matchExpressions:
    - {key: hostname, operator: Regexp, values: ["^web-"]}
  labels:
    node-role.kubernetes.io/web: ""
    example.com/tier: frontend
`

func TestComputeJoin(t *testing.T) {
	st, ok, err := Compute(inputs(t, webRules))
	if err != nil || !ok {
		t.Fatalf("compute: %v %v", ok, err)
	}
	if st.Labels["topology.kubernetes.io/zone"] != "eu-1a" || st.Labels["topology.kubernetes.io/region"] != "eu" || st.Labels["example.com/tier"] != "frontend" || len(st.Labels) != 3 {
		t.Fatalf("labels %v", st.Labels)
	}
	if _, forbidden := st.Labels["node-role.kubernetes.io/web"]; forbidden {
		t.Fatal("a label the node may not set is in Labels")
	}
	req, _ := contract.DecodeRequestedLabels(st.Annotations[contract.AnnotationRequestedLabels])
	if _, ok := req["node-role.kubernetes.io/web"]; !ok {
		t.Fatalf("requested labels %v", req)
	}
	prefixes, _ := contract.DecodePrefixes(st.Annotations[contract.AnnotationPrefixes])
	if len(prefixes) != 1 || prefixes[0] != netip.MustParsePrefix("2001:db8:1:2::/64") {
		t.Fatalf("prefixes %v", prefixes)
	}
	want := []corev1.NodeAddress{
		{Type: corev1.NodeInternalIP, Address: "10.0.0.5"}, {Type: corev1.NodeExternalIP, Address: "2001:db8:1:2::5"},
		{Type: corev1.NodeExternalIP, Address: "198.51.100.1"}, {Type: corev1.NodeHostName, Address: "web-1"},
	}
	if len(st.Addresses) != len(want) {
		t.Fatalf("addresses %v", st.Addresses)
	}
	for i := range want {
		if st.Addresses[i] != want[i] {
			t.Fatalf("addresses %v, want %v", st.Addresses, want)
		}
	}
	if st.ProviderID != "" {
		t.Fatalf("metal without a provider ID got %q under the metadata policy", st.ProviderID)
	}
	md, err := contract.DecodeMetadata(st.Annotations[contract.AnnotationMetadata])
	if err != nil || md.AgentKey != "ed25519:AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=" {
		t.Fatalf("metadata %+v (%v): the agent's public key must be published for the coordinator to enrol", md, err)
	}
}

func TestNothingBeforeMetadata(t *testing.T) {
	in := inputs(t, "")
	in.Talos.Metadata = nil
	if _, ok, err := Compute(in); ok || err != nil {
		t.Fatalf("computed a Node without metadata: %v %v", ok, err)
	}
}

func TestProviderIDPolicy(t *testing.T) {
	cases := []struct {
		name     string
		policy   ProviderIDPolicy
		fromMD   string
		degraded bool
		want     string
	}{
		{"metadata has one", ProviderIDFromMetadata, "aws:///eu-1a/i-1", false, "aws:///eu-1a/i-1"},
		{"metal, metadata policy", ProviderIDFromMetadata, "", false, ""},
		{"metal, fallback policy", ProviderIDTalosFallback, "", false, "talos://metal/10.0.0.5"},
		{"never", ProviderIDNever, "aws:///x", false, ""},
		{"degraded facts never set it", ProviderIDTalosFallback, "", true, ""},
	}
	for _, c := range cases {
		in := inputs(t, "")
		in.Policy = c.policy
		in.Talos.Metadata.ProviderID = c.fromMD
		if c.degraded {
			in.Talos.Degraded = talos.DegradedCmdline
		}
		st, _, _ := Compute(in)
		if st.ProviderID != c.want {
			t.Errorf("%s: providerID %q, want %q", c.name, st.ProviderID, c.want)
		}
	}
	if _, err := ParseProviderIDPolicy("sometimes"); err == nil {
		t.Error("a bad policy was accepted")
	}
}

// observedAfter applies a desired state to a Node as the API server would.
func observedAfter(st State, base *corev1.Node) *corev1.Node {
	n := base.DeepCopy()
	if n.Labels == nil {
		n.Labels = map[string]string{}
	}
	if n.Annotations == nil {
		n.Annotations = map[string]string{}
	}
	for k, v := range st.Labels {
		n.Labels[k] = v
	}
	for k, v := range st.Annotations {
		n.Annotations[k] = v
	}
	if n.Spec.ProviderID == "" {
		n.Spec.ProviderID = st.ProviderID
	}
	n.Status.Addresses = st.Addresses
	return n
}

func TestDiffSteadyStateIsEmpty(t *testing.T) {
	st, _, _ := Compute(inputs(t, webRules))
	node := observedAfter(st, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "web-1"}})
	again, _, _ := Compute(inputs(t, webRules))
	p, err := Diff(node, again)
	if err != nil || p.Status != nil || p.Spec != nil {
		t.Fatalf("steady state patches: status %s spec %s %v", p.Status, p.Spec, err)
	}
}

func TestDiffRemovesOnlyOwnedLabels(t *testing.T) {
	st, _, _ := Compute(inputs(t, webRules))
	node := observedAfter(st, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "web-1",
		Labels: map[string]string{"someone.else/label": "keep", "kubernetes.io/hostname": "web-1"}}})
	next, _, _ := Compute(inputs(t, "")) // the rules no longer set example.com/tier
	p, err := Diff(node, next)
	if err != nil || p.Status == nil {
		t.Fatalf("no patch: %v", err)
	}
	var got struct {
		Metadata struct {
			Labels map[string]*string `json:"labels"`
		} `json:"metadata"`
	}
	if err := json.Unmarshal(p.Status, &got); err != nil {
		t.Fatal(err)
	}
	if v, ok := got.Metadata.Labels["example.com/tier"]; !ok || v != nil {
		t.Fatalf("owned label not removed: %s", p.Status)
	}
	for _, k := range []string{"someone.else/label", "kubernetes.io/hostname", "topology.kubernetes.io/zone"} {
		if _, touched := got.Metadata.Labels[k]; touched {
			t.Fatalf("patch touches %s: %s", k, p.Status)
		}
	}
	if p.Spec != nil || strings.Contains(string(p.Status), "addresses") || strings.Contains(string(p.Status), "taints") || strings.Contains(string(p.Status), "podCIDR") {
		t.Fatalf("unexpected patch content: %s / %s", p.Status, p.Spec)
	}
}

// TestDiffRemovesOnlyOwnedAnnotations: an annotation a rule no longer
// produces is removed (owned-annotations says the agent set it); others'
// annotations and the contract's own are never touched; all of it goes in
// the one metadata patch.
func TestDiffRemovesOnlyOwnedAnnotations(t *testing.T) {
	const annotating = `
transformations:
- name: notes
  annotations: {example.com/owner: team-web, example.com/kept: "yes"}
`
	const fewer = `
transformations:
- name: notes
  annotations: {example.com/kept: "yes"}
`
	st, _, err := Compute(inputs(t, annotating))
	if err != nil {
		t.Fatal(err)
	}
	owned, err := contract.DecodeKeys(contract.AnnotationOwnedAnnotations, st.Annotations[contract.AnnotationOwnedAnnotations])
	if err != nil || !slices.Equal(owned, []string{"example.com/kept", "example.com/owner"}) {
		t.Errorf("owned-annotations = %v (%v), want exactly the rules' annotations", owned, err)
	}
	node := observedAfter(st, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "web-1",
		Annotations: map[string]string{"someone.else/note": "keep", contract.AnnotationCSRReview: "csr-1"}}})

	next, _, _ := Compute(inputs(t, fewer))
	p, err := Diff(node, next)
	if err != nil || p.Status == nil {
		t.Fatalf("no patch: %v", err)
	}
	var got struct {
		Metadata struct {
			Annotations map[string]*string `json:"annotations"`
		} `json:"metadata"`
	}
	if err := json.Unmarshal(p.Status, &got); err != nil {
		t.Fatal(err)
	}
	if v, ok := got.Metadata.Annotations["example.com/owner"]; !ok || v != nil {
		t.Fatalf("an annotation the rules no longer produce was not removed: %s", p.Status)
	}
	for _, k := range []string{"someone.else/note", contract.AnnotationCSRReview, "example.com/kept", contract.AnnotationMetadata} {
		if _, touched := got.Metadata.Annotations[k]; touched {
			t.Fatalf("patch touches %s: %s", k, p.Status)
		}
	}
	if strings.Contains(string(p.Status), "addresses") {
		t.Fatalf("a rules change patched the addresses: %s", p.Status)
	}

	// Once applied, the state is steady: nothing left to remove or write.
	after := observedAfter(next, node)
	delete(after.Annotations, "example.com/owner")
	if p, err := Diff(after, next); err != nil || p.Status != nil {
		t.Fatalf("after removal: meta %s (%v)", p.Status, err)
	}

	// Without owned-annotations (an older agent, or someone removed it),
	// nothing is removed: better a stale annotation than one the agent did
	// not set deleted.
	delete(node.Annotations, contract.AnnotationOwnedAnnotations)
	p, _ = Diff(node, next)
	if strings.Contains(string(p.Status), `"example.com/owner":null`) {
		t.Fatalf("removed an annotation with no record of setting it: %s", p.Status)
	}
}

func TestDiffProviderIDNeverChanges(t *testing.T) {
	in := inputs(t, "")
	in.Talos.Metadata.ProviderID = "aws:///new"
	st, _, _ := Compute(in)
	node := observedAfter(st, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "web-1"}, Spec: corev1.NodeSpec{ProviderID: "aws:///old"}})
	p, _ := Diff(node, st)
	if p.ProviderIDConflict != "aws:///old" || p.Spec != nil || strings.Contains(string(p.Status), "providerID") {
		t.Fatalf("conflict %q, status %s, spec %s", p.ProviderIDConflict, p.Status, p.Spec)
	}
}

func TestDiffAddressChangeIsStatusOnly(t *testing.T) {
	in := inputs(t, "")
	st, _, _ := Compute(in)
	node := observedAfter(st, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "web-1"}})
	in.Talos.ExternalIPs = nil
	next, _, _ := Compute(in)
	p, _ := Diff(node, next)
	if p.Spec != nil || p.Status == nil || strings.Contains(string(p.Status), "metadata") || strings.Contains(string(p.Status), "198.51.100.1") {
		t.Fatalf("status %s spec %s", p.Status, p.Spec)
	}
}

// TestBetaTopologyLabels: with global.betaTopologyLabels the node also sets
// the deprecated labels Talos CCM sets, from the same effective metadata;
// they are owned, so turning the option off removes them.
func TestBetaTopologyLabels(t *testing.T) {
	cases := []struct {
		name, rules string
		want        map[string]string
	}{
		{"off by default", webRules, map[string]string{}},
		{"on", "global: {betaTopologyLabels: true}\n" + webRules, map[string]string{
			"failure-domain.beta.kubernetes.io/region": "eu", "failure-domain.beta.kubernetes.io/zone": "eu-1a", "beta.kubernetes.io/instance-type": "c5",
		}},
		{"follows overrides", "global: {betaTopologyLabels: true}\ntransformations:\n- platformMetadata: {zone: rack-7}\n", map[string]string{
			"failure-domain.beta.kubernetes.io/region": "eu", "failure-domain.beta.kubernetes.io/zone": "rack-7", "beta.kubernetes.io/instance-type": "c5",
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			in := inputs(t, c.rules)
			in.Talos.Metadata.InstanceType = "c5"
			st, ok, err := Compute(in)
			if err != nil || !ok {
				t.Fatalf("compute: %v %v", ok, err)
			}
			got := map[string]string{}
			for k, v := range st.Labels {
				if strings.Contains(k, "beta.kubernetes.io") {
					got[k] = v
				}
			}
			if !maps.Equal(got, c.want) {
				t.Fatalf("beta labels %v, want %v", got, c.want)
			}
			owned, _ := contract.DecodeKeys(contract.AnnotationOwnedLabels, st.Annotations[contract.AnnotationOwnedLabels])
			for k := range c.want {
				if !slices.Contains(owned, k) {
					t.Errorf("%s not in owned-labels %v: turning the option off would leave it behind", k, owned)
				}
			}
		})
	}
}

// TestPreferIPv6 orders status.addresses as Talos CCM's global.preferIPv6:
// unset keeps the kubelet's order; true puts IPv6 first, false IPv4 first.
func TestPreferIPv6(t *testing.T) {
	cases := []struct {
		global string
		want   []string
	}{
		{"", []string{"InternalIP fd00::5", "InternalIP 10.0.0.5", "ExternalIP 198.51.100.1", "ExternalIP 2001:db8:1:2::5"}},
		{"global: {preferIPv6: true}\n", []string{"InternalIP fd00::5", "InternalIP 10.0.0.5", "ExternalIP 2001:db8:1:2::5", "ExternalIP 198.51.100.1"}},
		{"global: {preferIPv6: false}\n", []string{"InternalIP 10.0.0.5", "InternalIP fd00::5", "ExternalIP 198.51.100.1", "ExternalIP 2001:db8:1:2::5"}},
	}
	for _, c := range cases {
		in := inputs(t, c.global+webRules)
		// The kubelet's node IPs and the kernel's addresses, IPv6 first.
		in.Talos.NodeIPs = []netip.Addr{netip.MustParseAddr("fd00::5"), netip.MustParseAddr("10.0.0.5")}
		in.Talos.ExternalIPs = nil
		in.Addresses = append(in.Addresses, netaddr.Address{Prefix: netip.MustParsePrefix("198.51.100.1/24"), Link: "eth1", LinkUp: true, Permanent: true})
		st, _, err := Compute(in)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, a := range st.Addresses {
			if a.Type == corev1.NodeInternalIP || a.Type == corev1.NodeExternalIP {
				got = append(got, string(a.Type)+" "+a.Address)
			}
		}
		if !slices.Equal(got, c.want) {
			t.Errorf("%q: addresses %v, want %v", c.global, got, c.want)
		}
	}
}

// TestInvalidTopologyValueIsReported: metadata that is no valid label value
// leaves the label unset, and says so (run logs it, explain shows it and
// exits 1) instead of dropping it silently.
func TestInvalidTopologyValueIsReported(t *testing.T) {
	in := inputs(t, "global: {betaTopologyLabels: true}\n")
	in.Talos.Metadata.Zone = "rack 1"
	st, _, err := Compute(in)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := st.Labels["topology.kubernetes.io/zone"]; ok {
		t.Fatalf("an invalid zone was set: %v", st.Labels)
	}
	got := strings.Join(st.Rules.Errors, "\n")
	for _, want := range []string{`topology.kubernetes.io/zone: metadata zone "rack 1" is not a valid label value`, "failure-domain.beta.kubernetes.io/zone", "platformMetadata"} {
		if !strings.Contains(got, want) {
			t.Errorf("errors lack %q:\n%s", want, got)
		}
	}
}

// A join is one write: the labels, the annotations (the report) and the
// addresses go to nodes/<self>/status in one merge patch (NodeRestriction
// checks labels there as on the Node). The providerID is the coordinator's
// to set in its initializing patch while the Node waits for it (the
// report's setProviderId); the agent sets it itself only on a Node that
// waits for no initialization.
func TestDiffJoinIsOneStatusWrite(t *testing.T) {
	in := inputs(t, webRules)
	in.Policy = ProviderIDTalosFallback
	st, _, err := Compute(in)
	if err != nil || st.ProviderID == "" {
		t.Fatalf("no providerID to set (%v)", err)
	}
	m, err := contract.DecodeMetadata(st.Annotations[contract.AnnotationMetadata])
	if err != nil || m.SetProviderID != st.ProviderID {
		t.Fatalf("the report asks for providerID %q, want %q (%v)", m.SetProviderID, st.ProviderID, err)
	}
	joining := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "web-1"}, Spec: corev1.NodeSpec{
		Taints: []corev1.Taint{{Key: contract.TaintUninitialized, Value: "true", Effect: corev1.TaintEffectNoSchedule}}}}
	p, err := Diff(joining, st)
	if err != nil || p.Status == nil || p.Spec != nil {
		t.Fatalf("join: status %s spec %s (%v); want one status patch", p.Status, p.Spec, err)
	}
	var got struct {
		Metadata struct {
			Labels      map[string]string `json:"labels"`
			Annotations map[string]string `json:"annotations"`
		} `json:"metadata"`
		Spec   map[string]any `json:"spec"`
		Status struct {
			Addresses []corev1.NodeAddress `json:"addresses"`
		} `json:"status"`
	}
	if err := json.Unmarshal(p.Status, &got); err != nil {
		t.Fatal(err)
	}
	if got.Metadata.Labels["example.com/tier"] != "frontend" || got.Metadata.Annotations[contract.AnnotationMetadata] == "" ||
		len(got.Status.Addresses) == 0 || got.Spec != nil {
		t.Fatalf("the status patch lacks part of the report: %s", p.Status)
	}
	// Initialized without a providerID (no coordinator initializes it, or
	// an older one did): the agent sets it on the Node itself.
	initialized := observedAfter(st, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "web-1"}})
	initialized.Spec.ProviderID = ""
	p, err = Diff(initialized, st)
	if err != nil || p.Status != nil || string(p.Spec) != `{"spec":{"providerID":"`+st.ProviderID+`"}}` {
		t.Fatalf("initialized: status %s spec %s (%v)", p.Status, p.Spec, err)
	}
}
