package nodestate_test

import (
	"crypto/ed25519"
	"encoding/json"
	"fmt"
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/talos-nodeinit/talos-nodeinit/coordinator/config"
	"github.com/talos-nodeinit/talos-nodeinit/coordinator/finalize"
	"github.com/talos-nodeinit/talos-nodeinit/coordinator/nodestate"
	"github.com/talos-nodeinit/talos-nodeinit/coordinator/records"
	"github.com/talos-nodeinit/talos-nodeinit/pkg/contract"
)

var now = time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)

func settings(t *testing.T, extra string) nodestate.Settings {
	t.Helper()
	if !strings.Contains(extra, "ipam:") {
		extra += "ipam: {ipv4Pool: 10.244.0.0/16, ipv4MaskSize: 24}\n"
	}
	cfg, err := config.Parse([]byte("clusterName: prod\nnodeNetworks: [\"10.0.0.0/8\", \"2001:db8::/32\"]\n" + extra))
	if err != nil {
		t.Fatal(err)
	}
	return nodestate.NewSettings(cfg)
}

func agentKey(seed byte) string {
	return contract.EncodeAgentKey(ed25519.NewKeyFromSeed(make32(seed)).Public().(ed25519.PublicKey))
}

func make32(b byte) []byte {
	s := make([]byte, 32)
	for i := range s {
		s[i] = b
	}
	return s
}

// joined is a Node as the agent leaves it: registered, reported, waiting
// for the coordinator.
func joined(name, uid, ip string, key string) *corev1.Node {
	md, _ := contract.EncodeMetadata(contract.Metadata{Platform: "metal", AgentKey: key})
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID(uid), ResourceVersion: "7", Annotations: map[string]string{
			contract.AnnotationMetadata: md, contract.AnnotationProvidedNodeIP: ip,
		}},
		Spec:   corev1.NodeSpec{Taints: []corev1.Taint{{Key: contract.TaintUninitialized, Value: "true", Effect: corev1.TaintEffectNoSchedule}}},
		Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: ip}}},
	}
}

type patch struct {
	Metadata struct {
		Labels      map[string]any `json:"labels"`
		Annotations map[string]any `json:"annotations"`
	} `json:"metadata"`
	Spec *struct {
		PodCIDRs []string       `json:"podCIDRs"`
		Taints   []corev1.Taint `json:"taints"`
	} `json:"spec"`
}

func decode(t *testing.T, b []byte) patch {
	t.Helper()
	var p patch
	if err := json.Unmarshal(b, &p); err != nil {
		t.Fatal(err)
	}
	return p
}

// decide runs Decide as the controller does: once, and again with the
// allocator's answer when it asks for one.
func decide(t *testing.T, s nodestate.Settings, in nodestate.Input, cidrs ...string) nodestate.Desired {
	t.Helper()
	d, err := nodestate.Decide(s, in)
	if err != nil {
		t.Fatal(err)
	}
	if !d.Allocate {
		return d
	}
	in.Allocated = []netip.Prefix{}
	for _, c := range cidrs {
		in.Allocated = append(in.Allocated, netip.MustParsePrefix(c))
	}
	if d, err = nodestate.Decide(s, in); err != nil {
		t.Fatal(err)
	}
	if d.Allocate {
		t.Fatal("Decide asks for an allocation again after getting one")
	}
	return d
}

func TestJoin(t *testing.T) {
	s := settings(t, "")
	node := joined("n1", "uid-1", "10.0.0.1", agentKey(1))
	in := nodestate.Input{Node: node, Now: now, HasV4: true,
		Review: nodestate.Review{Ask: contract.Review{CSR: "csr-1"}, Serving: &records.Serving{CSR: "csr-1", SANs: []string{"n1"}, ValidUntil: now.Add(time.Hour)}}}

	first, err := nodestate.Decide(s, in)
	if err != nil {
		t.Fatal(err)
	}
	if !first.Allocate || !first.Request.IPv4 || first.Patch != nil || first.Record != nil {
		t.Fatalf("first Decide: want an IPv4 allocation asked and nothing else, got %+v", first)
	}
	d := decide(t, s, in, "10.244.3.0/24")
	p := decode(t, d.Patch)
	if p.Spec == nil || !reflect.DeepEqual(p.Spec.PodCIDRs, []string{"10.244.3.0/24"}) {
		t.Errorf("patch pod CIDRs %+v", p.Spec)
	}
	if p.Spec != nil && len(p.Spec.Taints) != 0 {
		t.Errorf("the uninitialized taint stays: %+v", p.Spec.Taints)
	}
	if p.Metadata.Labels[contract.LabelClusterName] != "prod" || p.Metadata.Annotations[contract.AnnotationCSRReview] != "csr-1" {
		t.Errorf("patch metadata %+v", p.Metadata)
	}
	r := d.Record
	switch {
	case r == nil:
		t.Fatal("no record written before the initializing patch")
	case r.NodeUID != "uid-1" || r.EnrolUID != "uid-1" || r.AgentKey != agentKey(1) || !d.Enrolled:
		t.Errorf("record %+v: want the key enrolled on first use by this object", r)
	case len(r.Addresses) != 1 || r.Addresses[0].IP != "10.0.0.1":
		t.Errorf("claims %+v", r.Addresses)
	case r.Serving == nil || r.Serving.CSR != "csr-1":
		t.Errorf("the CSR under review is not recorded with the initializing write: %+v", r.Serving)
	case !contains(r.GrantedLabels, contract.LabelClusterName+"=prod"):
		t.Errorf("granted labels %v", r.GrantedLabels)
	}
	if !d.Initialize || d.After != nil {
		t.Errorf("Initialize %v, After %+v", d.Initialize, d.After)
	}
}

func TestNothingWrittenWhile(t *testing.T) {
	s := settings(t, "requireProviderID: true\n")
	noReport := joined("n1", "uid-1", "10.0.0.1", "")
	delete(noReport.Annotations, contract.AnnotationMetadata)
	noProviderID := joined("n1", "uid-1", "10.0.0.1", agentKey(1))
	wrongAddress := joined("n1", "uid-1", "10.0.0.1", agentKey(1))
	wrongAddress.Spec.ProviderID = "talos://metal/x"
	wrongAddress.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "10.0.0.2"}}
	for name, node := range map[string]*corev1.Node{"no report": noReport, "no providerID": noProviderID, "provided-node-ip not in status": wrongAddress} {
		t.Run(name, func(t *testing.T) {
			d := decide(t, s, nodestate.Input{Node: node, Now: now, HasV4: true})
			if len(d.Waiting) == 0 || d.Patch != nil || d.Record != nil || d.Allocate {
				t.Fatalf("want waiting and nothing written, got waiting %v, patch %s, record %+v, allocate %v", d.Waiting, d.Patch, d.Record, d.Allocate)
			}
		})
	}
}

func TestMalformedReportOnlyReleasesWithdrawnAddresses(t *testing.T) {
	s := settings(t, "")
	node := joined("n1", "uid-1", "10.0.0.1", agentKey(1))
	node.Annotations[contract.AnnotationRequestedLabels] = "{not json"
	rec := &records.Record{Name: "n1", Spec: records.Spec{NodeUID: "uid-1", AgentKey: agentKey(1),
		Addresses: []records.Claim{{IP: "10.0.0.1", Since: now}, {IP: "10.0.0.9", Since: now}}}}
	d := decide(t, s, nodestate.Input{Node: node, Record: rec, Now: now, HasV4: true})
	if len(d.Malformed) == 0 || d.Patch != nil {
		t.Fatalf("malformed %v patch %s", d.Malformed, d.Patch)
	}
	want := rec.Spec
	want.Addresses = want.Addresses[:1]
	if d.Record == nil || !d.Record.Equal(want) {
		t.Fatalf("record %+v, want only 10.0.0.9 released: %+v", d.Record, want)
	}
}

func TestLeftAloneWithoutAdoption(t *testing.T) {
	s := settings(t, "")
	node := joined("n1", "uid-1", "10.0.0.1", agentKey(1))
	node.Spec.Taints = nil // initialized before the coordinator kept records
	d := decide(t, s, nodestate.Input{Node: node, Now: now, HasV4: true})
	if !d.NotAdopted || d.Patch != nil || d.Record == nil || !d.Record.NotAdopted || d.Record.AgentKey != "" {
		t.Fatalf("want only the name remembered, got %+v", d)
	}
	// Remembered once: the next sync writes nothing.
	d = decide(t, s, nodestate.Input{Node: node, Record: &records.Record{Name: "n1", Spec: *d.Record}, Now: now, HasV4: true})
	if !d.NotAdopted || d.Record != nil || d.Patch != nil {
		t.Fatalf("second sync wrote %+v", d)
	}
}

func TestRecreatedNodeEnrolsNothing(t *testing.T) {
	s := settings(t, "")
	old := records.Spec{NodeUID: "uid-old", EnrolUID: "uid-old", AgentKey: agentKey(1),
		Addresses: []records.Claim{{IP: "10.0.0.1", Since: now.Add(-time.Hour)}}, GrantedLabels: []string{"example.com/x=y"}}
	node := joined("n1", "uid-new", "10.0.0.1", agentKey(2))
	d := decide(t, s, nodestate.Input{Node: node, Record: &records.Record{Name: "n1", ResourceVersion: "3", Spec: old}, Now: now, HasV4: true}, "10.244.3.0/24")
	r := d.Record
	if r == nil || r.AgentKey != agentKey(1) || r.PendingAgentKey != agentKey(2) || d.Enrolled || !d.PendingKey {
		t.Fatalf("a re-created Node must not replace the enrolled key: %+v", r)
	}
	if len(r.Addresses) != 1 || !r.Addresses[0].Since.Equal(now) {
		t.Errorf("claims start over for the new object: %+v", r.Addresses)
	}
	if contains(r.GrantedLabels, "example.com/x=y") {
		t.Errorf("the old object's grants carried over: %v", r.GrantedLabels)
	}
}

func TestAddressHeldByAnotherNode(t *testing.T) {
	s := settings(t, "")
	node := joined("n1", "uid-1", "10.0.0.1", agentKey(1))
	others := map[netip.Addr]string{netip.MustParseAddr("10.0.0.1"): "n0"}
	d := decide(t, s, nodestate.Input{Node: node, Others: others, Now: now, HasV4: true}, "10.244.3.0/24")
	if len(d.Claims) != 0 || !strings.Contains(d.Contested, "10.0.0.1: Node n0") || !d.RecheckClaims {
		t.Fatalf("claims %+v contested %q recheck %v", d.Claims, d.Contested, d.RecheckClaims)
	}
}

// dualStack is settings with both families and a fallback IPv6 pool, and
// a joined Node n1 with 10.0.0.1 and 2001:db8:1:2::10, reporting the /64
// holding the latter.
func dualStack(t *testing.T) (nodestate.Settings, *corev1.Node) {
	t.Helper()
	s := settings(t, "ipam: {families: [ipv4, ipv6], ipv4Pool: 10.244.0.0/16, ipv4MaskSize: 24, ipv6Pool: 'fd00:10:244::/64', ipv6MaskSize: 80, firstClaimPrefixes: ['2001:db8::/32']}\n")
	node := joined("n1", "uid-1", "10.0.0.1", agentKey(1))
	node.Status.Addresses = append(node.Status.Addresses, corev1.NodeAddress{Type: corev1.NodeExternalIP, Address: "2001:db8:1:2::10"})
	pf, _ := contract.EncodePrefixes([]netip.Prefix{netip.MustParsePrefix("2001:db8:1:2::/64")})
	node.Annotations[contract.AnnotationPrefixes] = pf
	return s, node
}

func TestPrefixHeldByAnotherNode(t *testing.T) {
	s, node := dualStack(t)
	base := nodestate.Input{Node: node, Now: now, HasV4: true, HasV6: true}

	free, err := nodestate.Decide(s, base)
	if err != nil {
		t.Fatal(err)
	}
	if !free.Request.IPv6Prefix.IsValid() || free.PrefixHolder != "" {
		t.Fatalf("a free node prefix: request %+v holder %q", free.Request, free.PrefixHolder)
	}
	held := base
	held.Near = func(netip.Prefix) []records.Holding {
		return []records.Holding{{Node: "n0", Prefix: netip.MustParsePrefix("2001:db8:1:2::/64")}}
	}
	d, err := nodestate.Decide(s, held)
	if err != nil {
		t.Fatal(err)
	}
	if d.PrefixHolder != "n0" || d.Request.IPv6Prefix.IsValid() || !d.Request.IPv6 {
		t.Fatalf("a prefix n0 carves from: holder %q, request %+v (want the IPv6 pool instead)", d.PrefixHolder, d.Request)
	}
}

// TestPrefixNeedsTheInventory: by default a listing alone gives no node
// prefix; the inventory's binding does, and the request then avoids the
// ranges it binds to other Nodes, whatever their size.
func TestPrefixNeedsTheInventory(t *testing.T) {
	_, node := dualStack(t)
	const pools = "ipam: {families: [ipv4, ipv6], ipv4Pool: 10.244.0.0/16, ipv6Pool: 'fd00:10:244::/64'}\n"
	base := nodestate.Input{Node: node, Now: now, HasV4: true, HasV6: true}
	d, err := nodestate.Decide(settings(t, pools), base)
	if err != nil {
		t.Fatal(err)
	}
	if d.Request.IPv6Prefix.IsValid() || !d.Request.IPv6 || !strings.Contains(d.PrefixRefused, "inventory") {
		t.Fatalf("no inventory: request %+v, refused %q; want the IPv6 pool and a reason", d.Request, d.PrefixRefused)
	}
	s := settings(t, pools+"inventory: [{nodes: [n1], networks: ['2001:db8:1:2::/64']}, {nodes: [n9], networks: ['2001:db8:1:2:ffff::/112', '10.244.7.0/24']}]\n")
	d, err = nodestate.Decide(s, base)
	if err != nil {
		t.Fatal(err)
	}
	want := []netip.Prefix{netip.MustParsePrefix("2001:db8:1:2:ffff::/112")} // not the pool's 10.244.7.0/24: no Node address is there
	if !d.Request.IPv6Prefix.IsValid() || d.PrefixRefused != "" || !reflect.DeepEqual(d.Request.AvoidRanges, want) {
		t.Fatalf("bound: request %+v, refused %q; want the node prefix, avoiding %v", d.Request, d.PrefixRefused, want)
	}
}

func TestSteadyStateWritesNothing(t *testing.T) {
	s := settings(t, "")
	in := nodestate.Input{Node: joined("n1", "uid-1", "10.0.0.1", agentKey(1)), Now: now, HasV4: true}
	d := decide(t, s, in, "10.244.3.0/24")
	// Apply what was decided: the record, then the patch, as the API server would.
	node := in.Node.DeepCopy()
	node.Spec.Taints = nil
	node.Spec.PodCIDR, node.Spec.PodCIDRs = "10.244.3.0/24", []string{"10.244.3.0/24"}
	node.Labels = map[string]string{}
	for k, v := range decode(t, d.Patch).Metadata.Labels {
		node.Labels[k] = v.(string)
	}
	again := decide(t, s, nodestate.Input{Node: node, Record: &records.Record{Name: "n1", ResourceVersion: "2", Spec: *d.Record}, Now: now.Add(time.Minute), HasV4: true})
	if again.Patch != nil || again.Record != nil || again.Allocate {
		t.Fatalf("a Node already as wanted: patch %s record %+v allocate %v", again.Patch, again.Record, again.Allocate)
	}
}

// TestDecideIsPure: the same input gives the same answer, and the input is
// left as it was.
func TestDecideIsPure(t *testing.T) {
	s := settings(t, "")
	node := joined("n1", "uid-1", "10.0.0.1", agentKey(1))
	rec := &records.Record{Name: "n1", ResourceVersion: "1", Spec: records.Spec{NodeUID: "uid-1", Addresses: []records.Claim{{IP: "10.0.0.1", Since: now}}}}
	in := nodestate.Input{Node: node, Record: rec, Now: now, HasV4: true, Allocated: []netip.Prefix{netip.MustParsePrefix("10.244.3.0/24")}}
	nodeBefore, recBefore := node.DeepCopy(), *rec
	a, errA := nodestate.Decide(s, in)
	b, errB := nodestate.Decide(s, in)
	if errA != nil || errB != nil || !reflect.DeepEqual(a, b) {
		t.Fatalf("two answers to one input:\n%+v\n%+v", a, b)
	}
	if !reflect.DeepEqual(node, nodeBefore) || !reflect.DeepEqual(*rec, recBefore) {
		t.Fatal("Decide changed its input")
	}
}

func contains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// A new claim dates from when this replica first saw the Node list the
// address continuously (no other Node held or listed it first, or it would
// be contested): the address has been the Node's alone since then, so the
// serving certificate need not wait csr.minAddressAge again from the
// initializing write.
func TestClaimDatesFromTheFirstObservation(t *testing.T) {
	s := settings(t, "")
	listed := now.Add(-5 * time.Second)
	in := nodestate.Input{Node: joined("n1", "uid-1", "10.0.0.1", agentKey(1)), Now: now, HasV4: true,
		FirstSeen: map[netip.Addr]time.Time{netip.MustParseAddr("10.0.0.1"): listed}}
	d := decide(t, s, in, "10.244.3.0/24")
	if len(d.Claims) != 1 || !d.Claims[0].Since.Equal(listed) {
		t.Fatalf("claims %+v, want 10.0.0.1 since %v", d.Claims, listed)
	}
	// Never later than now, whatever an observation says.
	in.FirstSeen[netip.MustParseAddr("10.0.0.1")] = now.Add(time.Hour)
	if d = decide(t, s, in, "10.244.3.0/24"); !d.Claims[0].Since.Equal(now) {
		t.Fatalf("claim since %v, want now", d.Claims[0].Since)
	}
}

// The initializing patch sets the providerID the report asks for, so the
// agent's join is one write; it never rewrites one the Node has, a
// requireProviderID cluster waits only while none is asked for, and a
// setProviderId that is no providerID is refused (said, never written):
// the Node is initialized without one, or waits with requireProviderID.
func TestJoinSetsTheReportedProviderID(t *testing.T) {
	asking := func(id, have string) *corev1.Node {
		n := joined("n1", "uid-1", "10.0.0.1", agentKey(1))
		md, _ := contract.EncodeMetadata(contract.Metadata{Platform: "metal", AgentKey: agentKey(1), SetProviderID: id})
		n.Annotations[contract.AnnotationMetadata] = md
		n.Spec.ProviderID = have
		return n
	}
	type spec struct {
		Spec map[string]any `json:"spec"`
	}
	for _, tc := range []struct {
		name, ask, have, want string
		written, refused      bool
	}{
		{name: "asked", ask: "talos://metal/10.0.0.1", want: "talos://metal/10.0.0.1", written: true},
		{name: "asked, the Node has one", ask: "talos://metal/10.0.0.1", have: "aws:///eu-1a/i-1", written: true},
		{name: "none asked", written: true},
		{name: "no provider name", ask: "i-1", written: true, refused: true},
		{name: "a space", ask: "aws:///eu 1a/i-1", written: true, refused: true},
		{name: "a slash in the provider name", ask: "a/b://i-1", written: true, refused: true},
		{name: "a control character", ask: "aws:///i-1\n", written: true, refused: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, require := range []bool{false, true} {
				s := settings(t, fmt.Sprintf("requireProviderID: %v\n", require))
				d := decide(t, s, nodestate.Input{Node: asking(tc.ask, tc.have), Now: now, HasV4: true}, "10.244.3.0/24")
				if !tc.written {
					if d.Patch != nil || d.Record != nil {
						t.Fatalf("requireProviderID %v: setProviderId %q written: %s", require, tc.ask, d.Patch)
					}
					continue
				}
				refused := slices.ContainsFunc(d.Plan.Refused, func(r string) bool { return strings.HasPrefix(r, "providerID: ") })
				if refused != (tc.refused && d.Patch != nil) {
					t.Fatalf("requireProviderID %v: refused %v (%v), want %v", require, refused, d.Plan.Refused, tc.refused)
				}
				if require && (tc.ask == "" || tc.refused) && tc.have == "" {
					if d.Patch != nil || len(d.Waiting) == 0 {
						t.Fatalf("requireProviderID with none asked: patch %s, waiting %v", d.Patch, d.Waiting)
					}
					continue
				}
				var p spec
				if err := json.Unmarshal(d.Patch, &p); err != nil {
					t.Fatalf("requireProviderID %v: %v (%s, waiting %v)", require, err, d.Patch, d.Waiting)
				}
				got, _ := p.Spec["providerID"].(string)
				if got != tc.want {
					t.Fatalf("requireProviderID %v: the initializing patch sets providerID %q, want %q: %s", require, got, tc.want, d.Patch)
				}
			}
		})
	}
}

// A providerID the API server refused (an admin's admission policy) is
// left out of the next patch while the report asks for that one, and
// said; the rest of the join goes on, or, with requireProviderID, waits.
// Another providerID asked for, or another Node object, is tried.
func TestRefusedProviderID(t *testing.T) {
	asking := func(id string) *corev1.Node {
		node := joined("n1", "uid-1", "10.0.0.1", agentKey(1))
		md, _ := contract.EncodeMetadata(contract.Metadata{Platform: "metal", AgentKey: agentKey(1), SetProviderID: id})
		node.Annotations[contract.AnnotationMetadata] = md
		return node
	}
	refused := nodestate.RefusedProviderID{ID: "talos://metal/a", Reason: `"denied: this cluster sets providerIDs itself"`}
	for _, tc := range []struct {
		name       string
		extra      string
		asked      string
		refused    nodestate.RefusedProviderID
		wantID     string
		wantInit   bool
		wantReason string
	}{
		{"not refused", "", "talos://metal/a", nodestate.RefusedProviderID{}, "talos://metal/a", true, ""},
		{"refused", "", "talos://metal/a", refused, "", true, "initializes the Node without it"},
		{"refused, another asked for", "", "talos://metal/b", refused, "talos://metal/b", true, ""},
		{"refused, required", "requireProviderID: true\n", "talos://metal/a", refused, "", false, "waits for one"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := decide(t, settings(t, tc.extra), nodestate.Input{Node: asking(tc.asked), Now: now, HasV4: true, RefusedProviderID: tc.refused}, "10.244.3.0/24")
			if d.Initialize != tc.wantInit || d.Plan.ProviderID != tc.wantID {
				t.Errorf("Initialize %v, providerID %q; want %v, %q", d.Initialize, d.Plan.ProviderID, tc.wantInit, tc.wantID)
			}
			if got := strings.Contains(string(d.Patch), "providerID"); got != (tc.wantID != "") {
				t.Errorf("patch %s: providerID in it %v", d.Patch, got)
			}
			said := strings.Join(d.Plan.Refused, "; ")
			if tc.wantReason == "" && said != "" || tc.wantReason != "" && (!strings.Contains(said, tc.wantReason) || !strings.Contains(said, "sets providerIDs itself")) {
				t.Errorf("refused %q, want it to say %q and the API server's reason", said, tc.wantReason)
			}
		})
	}
}

// In a cluster whose kubelets ask for serving certificates, a join waits
// for its kubelet's CSR up to csr.initWait after registration, so the
// initializing patch asks for the review; it never waits where that saves
// nothing or longer than the setting says, whatever the clocks.
func TestInitializationWaitsForTheKubeletsCSR(t *testing.T) {
	s := settings(t, "")
	registered := now.Add(-time.Second)
	valid := &records.Record{Name: "n1", Spec: records.Spec{NodeUID: "uid-0", Serving: &records.Serving{CSR: "old", SANs: []string{"n1"}, ValidUntil: now.Add(time.Hour)}}}
	expired := &records.Record{Name: "n1", Spec: records.Spec{NodeUID: "uid-0", Serving: &records.Serving{CSR: "old", SANs: []string{"n1"}, ValidUntil: now.Add(-time.Hour)}}}
	for _, tc := range []struct {
		name     string
		settings string
		created  time.Time
		seen     time.Time // the coordinator's first sight of its address
		serving  bool      // the cluster's kubelets ask
		asked    bool
		review   string
		rec      *records.Record
		want     time.Duration // 0: initializes now
	}{
		{name: "kubelets ask, this one not yet", created: registered, serving: true, want: 2 * time.Second},
		{name: "no kubelet asks (Talos's default)", created: registered},
		{name: "its CSR is under review", created: registered, serving: true, review: "csr-1"},
		{name: "its CSR was decided without a review", created: registered, serving: true, asked: true},
		{name: "registered longer ago than the wait", created: now.Add(-3 * time.Second), serving: true},
		{name: "registered in the future (clocks apart)", created: now.Add(time.Hour), serving: true, want: 3 * time.Second},
		{name: "registered in the future, first seen 2s ago", created: now.Add(time.Hour), seen: now.Add(-2 * time.Second), serving: true, want: time.Second},
		{name: "registered in the future, first seen 4s ago", created: now.Add(time.Hour), seen: now.Add(-4 * time.Second), serving: true},
		{name: "first seen after its registration", created: registered, seen: now, serving: true, want: 2 * time.Second},
		{name: "csr.initWait 0 never waits", settings: "csr: {initWait: 0s}\n", created: registered, serving: true},
		{name: "csr.initWait 10s", settings: "csr: {initWait: 10s}\n", created: registered, serving: true, want: 9 * time.Second},
		{name: "the name holds a valid certificate", created: registered, serving: true, rec: valid},
		{name: "the name's certificate expired", created: registered, serving: true, rec: expired, want: 2 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			node := joined("n1", "uid-1", "10.0.0.1", agentKey(1))
			node.CreationTimestamp = metav1.NewTime(tc.created)
			in := nodestate.Input{Node: node, Record: tc.rec, Now: now, HasV4: true, ServingCSRs: tc.serving, Asked: tc.asked,
				Review: nodestate.Review{Ask: contract.Review{CSR: tc.review}}}
			if !tc.seen.IsZero() {
				in.FirstSeen = map[netip.Addr]time.Time{netip.MustParseAddr("10.0.0.1"): tc.seen}
			}
			st := s
			if tc.settings != "" {
				st = settings(t, tc.settings)
			}
			d := decide(t, st, in, "10.244.3.0/24")
			if tc.want == 0 {
				if !d.Initialize || d.Patch == nil || d.RecheckAfter != 0 {
					t.Fatalf("want initialized now, got waiting %v (recheck %v), initialize %v", d.Waiting, d.RecheckAfter, d.Initialize)
				}
				return
			}
			if d.RecheckAfter != tc.want || d.Patch != nil || d.Record != nil || d.Allocate || len(d.Waiting) != 1 {
				t.Fatalf("want a wait of %v with nothing written, got recheck %v, waiting %v, patch %s, record %+v, allocate %v",
					tc.want, d.RecheckAfter, d.Waiting, d.Patch, d.Record, d.Allocate)
			}
		})
	}
}

// TestRequestNamesTheNodesOwnAddresses: the pod CIDR request carries every
// address the Node lists (up to maxNodeAddresses), whichever pool serves it,
// so the allocator keeps them out of its segments even before the Node's
// event has reserved them.
func TestRequestNamesTheNodesOwnAddresses(t *testing.T) {
	s, node := dualStack(t)
	want := []netip.Addr{netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("2001:db8:1:2::10")}
	for _, near := range []func(netip.Prefix) []records.Holding{nil, func(netip.Prefix) []records.Holding {
		return []records.Holding{{Node: "n0", Prefix: netip.MustParsePrefix("2001:db8:1:2::/64")}}
	}} {
		d, err := nodestate.Decide(s, nodestate.Input{Node: node, Now: now, HasV4: true, HasV6: true, Near: near})
		if err != nil {
			t.Fatal(err)
		}
		if !d.Allocate || !reflect.DeepEqual(d.Request.Avoid, want) {
			t.Fatalf("prefix held by another: %t; allocate %t, request's own addresses %v, want %v", near != nil, d.Allocate, d.Request.Avoid, want)
		}
	}
}

// TestAddressInOwnPodCIDR finds a Node whose pod CIDRs hold one of its own
// addresses (given before the allocation avoided them): its kubelet's
// serving CSRs naming it are refused for good, so the coordinator says so.
func TestAddressInOwnPodCIDR(t *testing.T) {
	for _, tc := range []struct {
		name  string
		cidrs []string
		ips   []string
		want  string
	}{
		{"none", []string{"10.244.1.0/24", "2001:db8:1:2::/80"}, []string{"10.0.0.1", "2001:db8:1:2:1::1"}, ""},
		{"the IPv6 segment holds its ::1", []string{"10.244.1.0/24", "2001:db8:1:2::/80"}, []string{"10.0.0.1", "2001:db8:1:2::1"}, "2001:db8:1:2::1 in 2001:db8:1:2::/80"},
		{"the IPv4 segment", []string{"10.244.1.0/24"}, []string{"10.244.1.7"}, "10.244.1.7 in 10.244.1.0/24"},
		{"no pod CIDRs yet", nil, []string{"10.244.1.7"}, ""},
		{"spec.podCIDR alone", []string{""}, []string{"10.244.1.7"}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}
			for _, c := range tc.cidrs {
				if c != "" {
					n.Spec.PodCIDRs = append(n.Spec.PodCIDRs, c)
				}
			}
			for _, ip := range tc.ips {
				n.Status.Addresses = append(n.Status.Addresses, corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: ip})
			}
			cidrs, err := finalize.PodCIDRs(n)
			if err != nil {
				t.Fatal(err)
			}
			ip, cidr, ok := nodestate.AddressInOwnPodCIDR(cidrs, nodestate.Addresses(n, 16))
			got := ""
			if ok {
				got = ip.String() + " in " + cidr.String()
			}
			if got != tc.want {
				t.Fatalf("got %q, want %q", got, tc.want)
			}
		})
	}
}

// TestARecreatedNodeReleasesTheOldObjectsClaims: a record describes one
// Node object (its NodeUID). When the coordinator first syncs another
// object of the name (the old one deleted, and registered again before
// the deletion was synced), the old object's claims, prefix and grants are
// released at once, whatever the new object is waiting for: they are
// nobody's, and other Nodes listing those addresses must not be held by
// a name that no longer lists them.
func TestARecreatedNodeReleasesTheOldObjectsClaims(t *testing.T) {
	s := settings(t, "")
	old := records.Spec{NodeUID: "uid-old", EnrolUID: "uid-old", AgentKey: agentKey(1), Prefix: "2001:db8:1::/64",
		Addresses:     []records.Claim{{IP: "10.0.0.1", Since: now.Add(-time.Hour)}, {IP: "2001:db8:1::1", Since: now.Add(-time.Hour)}},
		GrantedLabels: []string{"example.com/x=y"}}
	rec := &records.Record{Name: "n1", ResourceVersion: "3", Spec: old}
	waiting := joined("n1", "uid-new", "10.0.0.1", agentKey(1))
	delete(waiting.Annotations, contract.AnnotationMetadata) // no report yet
	malformed := joined("n1", "uid-new", "10.0.0.1", agentKey(1))
	malformed.Annotations[contract.AnnotationRequestedLabels] = "{not json"
	badCIDR := joined("n1", "uid-new", "10.0.0.1", agentKey(1))
	badCIDR.Spec.PodCIDRs = []string{"not a CIDR"}
	// Asking for an allocation, which may fail (an exhausted pool, a
	// prefix no segment can be carved from): released before it.
	ready := joined("n1", "uid-new", "10.0.0.1", agentKey(1))
	if d, err := nodestate.Decide(s, nodestate.Input{Node: ready, Record: rec, Now: now, HasV4: true}); err != nil || !d.Allocate || d.Record == nil || !d.Record.Equal(records.Released(old)) {
		t.Errorf("asking for an allocation: allocate %v, record %+v (%v), want the old object's claims released with the ask", d.Allocate, d.Record, err)
	}
	for name, node := range map[string]*corev1.Node{"waiting for its report": waiting, "a malformed report": malformed, "an invalid pod CIDR": badCIDR} {
		t.Run(name, func(t *testing.T) {
			d := decide(t, s, nodestate.Input{Node: node, Record: rec, Now: now, HasV4: true})
			want := records.Released(old)
			if d.Record == nil || !d.Record.Equal(want) {
				t.Fatalf("record %+v, want the old object's claims released: %+v", d.Record, want)
			}
			if d.Patch != nil {
				t.Errorf("patch %s", d.Patch)
			}
			// Released once: the next sync writes nothing more.
			again := decide(t, s, nodestate.Input{Node: node, Record: &records.Record{Name: "n1", Spec: *d.Record}, Now: now, HasV4: true})
			if again.Record != nil {
				t.Errorf("second sync writes %+v", again.Record)
			}
		})
	}
}

// TestSmallNodePrefixesAreNotCarved: a node prefix giving fewer than 16
// segments would have its lowest, where hosts have their addresses, carved
// (from a review): the pool serves instead, with the reason.
func TestSmallNodePrefixesAreNotCarved(t *testing.T) {
	s := settings(t, "ipam: {families: [ipv4, ipv6], ipv4Pool: 10.244.0.0/16, ipv6Pool: 'fd00:10:244::/64', firstClaimPrefixes: ['2001:db8::/32']}\n")
	for _, c := range []struct {
		prefix string
		carved bool
	}{{"2001:db8:1:2::/112", true}, {"2001:db8:1:2::/113", false}, {"2001:db8:1:2::/120", false}} {
		node := joined("n1", "uid-1", "10.0.0.1", agentKey(1))
		node.Status.Addresses = append(node.Status.Addresses, corev1.NodeAddress{Type: corev1.NodeExternalIP, Address: "2001:db8:1:2::10"})
		pf, _ := contract.EncodePrefixes([]netip.Prefix{netip.MustParsePrefix(c.prefix)})
		node.Annotations[contract.AnnotationPrefixes] = pf
		d, err := nodestate.Decide(s, nodestate.Input{Node: node, Now: now, HasV4: true, HasV6: true})
		if err != nil {
			t.Fatal(err)
		}
		if d.Request.IPv6Prefix.IsValid() != c.carved || !c.carved && !strings.Contains(d.PrefixRefused, "too few") {
			t.Errorf("%s: request %+v, refused %q; want carved %t", c.prefix, d.Request, d.PrefixRefused, c.carved)
		}
	}
}
