package main

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/talos-nodeinit/talos-nodeinit/coordinator/records"
	"github.com/talos-nodeinit/talos-nodeinit/pkg/contract"
	"github.com/talos-nodeinit/talos-nodeinit/pkg/csrcheck"
	"github.com/talos-nodeinit/talos-nodeinit/pkg/csrcheck/csrtest"
	"github.com/talos-nodeinit/talos-nodeinit/pkg/harness/kubeletsim"
	"github.com/talos-nodeinit/talos-nodeinit/pkg/harness/testcluster"
)

// The trust model, attacked. Every attack uses a real node identity (a
// kubelet client certificate issued by the cluster CA, user
// system:node:<name>) against the real kube-apiserver (Node,RBAC +
// NodeRestriction) and the real nodeinit-coordinator binary running as its
// ServiceAccount with the shipped RBAC. The attacker holds one node's
// kubelet credential, not its agent's key (a stolen credential), and writes
// whatever NodeRestriction lets it: its status, its annotations, its CSRs.
// Each attack asserts the CSR is denied or left pending with a reason and
// an Event, and that what the coordinator owns is untouched. Honest nodes
// keep working throughout.

const attackConfig = `
clusterName: prod
nodeNetworks: [10.0.0.0/8, "2001:db8::/32"]
ipam:
  families: [ipv4, ipv6] # IPv6 only from nodes' own prefixes (no ipv6Pool)
  ipv4Pool: 10.244.0.0/16
  serviceCIDRs: [10.96.0.0/16]
  firstClaimPrefixes: ["2001:db8:66::/48", "2001:db8:67::/48"] # class 3: first claim, the admin's opt-in
inventory:
- nodes: ["bound-*"]
  networks: [10.0.9.0/24, "2001:db8:99::/48"]
grants:
  labels:
    allow: ["node.cloudprovider.kubernetes.io/*", "node-role.kubernetes.io/*"]
    deny: ["node-role.kubernetes.io/control-plane"]
csr:
  attestationTimeout: 20s
  minAddressAge: 1s
  allowedDNSNames: ["{node}.nodes.example.com", "*.lb.example.com"]
  reservedAddresses: [10.0.7.201]
  reservedNames: [vault.example.com]
`

// actor is one node: its kubelet credential (self), and the key its agent
// holds (nil for an attacker who stole only the credential).
type actor struct {
	t    *testing.T
	name string
	self *kubernetes.Clientset
	key  ed25519.PrivateKey
}

func newActor(t *testing.T, name, ip string, withKey bool) *actor {
	t.Helper()
	id, err := cluster.NodeIdentity(name)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kubeletsim.Register(t.Context(), kubeletsim.Config{NodeName: name, NodeIPs: []netip.Addr{netip.MustParseAddr(ip)}, Identity: id.Config()}); err != nil {
		t.Fatal(err)
	}
	a := &actor{t: t, name: name, self: kubernetes.NewForConfigOrDie(id.Config())}
	if withKey {
		_, a.key, _ = ed25519.GenerateKey(rand.Reader)
	}
	return a
}

func (a *actor) patch(body any, sub ...string) {
	a.t.Helper()
	data, _ := json.Marshal(body)
	if _, err := a.self.CoreV1().Nodes().Patch(a.t.Context(), a.name, types.MergePatchType, data, metav1.PatchOptions{}, sub...); err != nil {
		a.t.Fatalf("%s patching itself: %v", a.name, err)
	}
}

// status writes the node's status.addresses directly, as NodeRestriction allows.
func (a *actor) status(addrs ...corev1.NodeAddress) {
	a.t.Helper()
	a.patch(map[string]any{"status": map[string]any{"addresses": addrs}}, "status")
}

// report publishes what an agent would: metadata (with its key), requests.
func (a *actor) report(labels map[string]string, key ed25519.PublicKey) {
	a.t.Helper()
	md := contract.Metadata{Platform: "metal", Hostname: a.name}
	if key != nil {
		md.AgentKey = contract.EncodeAgentKey(key)
	}
	m, _ := contract.EncodeMetadata(md)
	rl, _ := contract.EncodeRequestedLabels(labels)
	a.annotate(map[string]string{contract.AnnotationMetadata: m, contract.AnnotationRequestedLabels: rl})
}

func (a *actor) annotate(ann map[string]string) {
	a.t.Helper()
	a.patch(map[string]any{"metadata": map[string]any{"annotations": ann}})
}

func (a *actor) csr(name string, dns []string, ips ...string) {
	a.t.Helper()
	_, err := a.self.CertificatesV1().CertificateSigningRequests().Create(a.t.Context(), &certificatesv1.CertificateSigningRequest{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: certificatesv1.CertificateSigningRequestSpec{Request: csrtest.PEM(a.t, nil, a.name, dns, ips...), SignerName: certificatesv1.KubeletServingSignerName,
			Usages: []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageServerAuth}},
	}, metav1.CreateOptions{})
	if err != nil {
		a.t.Fatal(err)
	}
}

// attest writes an approving attestation of csrName on its Node, signed
// by key (nil: unsigned, as the kubelet credential alone can write it).
func (a *actor) attest(csrName string, key ed25519.PrivateKey) {
	a.t.Helper()
	csr, err := a.self.CertificatesV1().CertificateSigningRequests().Get(a.t.Context(), csrName, metav1.GetOptions{})
	if err != nil {
		a.t.Fatal(err)
	}
	parsed, err := csrcheck.Parse(csr.Spec.Request)
	if err != nil {
		a.t.Fatal(err)
	}
	att := contract.Attestation{CSR: csrName, RequestSHA256: contract.RequestDigest(csr.Spec.Request), Verdict: contract.VerdictApprove,
		Reason: "every SAN is this node's", SANs: contract.RequestSANs(parsed)}
	if key != nil {
		att = att.Sign(a.name, key)
	}
	v, err := contract.EncodeAttestation(att)
	if err != nil {
		a.t.Fatal(err)
	}
	a.annotate(map[string]string{contract.AnnotationCSRAttestation: v})
}

// agentAttests plays the honest agent: waits for the review request and attests with its key.
func (a *actor) agentAttests(csrName string) {
	a.t.Helper()
	until(a.t, 20*time.Second, "review request for "+csrName, func() bool {
		n, err := a.self.CoreV1().Nodes().Get(a.t.Context(), a.name, metav1.GetOptions{})
		return err == nil && n.Annotations[contract.AnnotationCSRReview] == csrName
	})
	a.attest(csrName, a.key)
}

// until polls cond until it holds, and fails the test after timeout; it
// returns how long that took.
func until(t *testing.T, timeout time.Duration, what string, cond func() bool) time.Duration {
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

func adminClient() *kubernetes.Clientset { return kubernetes.NewForConfigOrDie(cluster.Admin()) }

func getNode(t *testing.T, name string) *corev1.Node {
	t.Helper()
	n, err := adminClient().CoreV1().Nodes().Get(t.Context(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func csrCondition(t *testing.T, name string) (certificatesv1.CertificateSigningRequestCondition, *certificatesv1.CertificateSigningRequest) {
	t.Helper()
	csr, err := adminClient().CertificatesV1().CertificateSigningRequests().Get(t.Context(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range csr.Status.Conditions {
		if c.Type == certificatesv1.CertificateApproved || c.Type == certificatesv1.CertificateDenied {
			return c, csr
		}
	}
	return certificatesv1.CertificateSigningRequestCondition{}, csr
}

func eventsFor(t *testing.T, name string) []corev1.Event {
	t.Helper()
	list, err := adminClient().CoreV1().Events("").List(t.Context(), metav1.ListOptions{FieldSelector: fields.Set{"involvedObject.name": name}.String()})
	if err != nil {
		t.Fatal(err)
	}
	return list.Items
}

// refused waits until csrName is denied, or held pending with a Warning
// Event, and fails if it is ever approved. It returns the reason.
func refused(t *testing.T, csrName string) string {
	t.Helper()
	var why string
	until(t, 20*time.Second, csrName+" refused with a reason", func() bool {
		c, _ := csrCondition(t, csrName)
		switch c.Type {
		case certificatesv1.CertificateApproved:
			t.Fatalf("%s was APPROVED: %s", csrName, c.Message)
		case certificatesv1.CertificateDenied:
			why = "denied: " + c.Message
			return len(eventsFor(t, csrName)) > 0
		}
		for _, e := range eventsFor(t, csrName) {
			if e.Type == corev1.EventTypeWarning {
				why = "pending: " + e.Reason + ": " + e.Message
				return true
			}
		}
		return false
	})
	// Pending must stay pending: once the coordinator has looked again, it
	// has not changed its mind. (A requester without a Node is never
	// decided for: there is nothing to look at again.)
	if _, csr := csrCondition(t, csrName); csr != nil {
		if node := csrcheck.NodeName(csr.Spec.Username); node != "" {
			if _, err := adminClient().CoreV1().Nodes().Get(t.Context(), node, metav1.GetOptions{}); err == nil {
				leader.lookedAgain(t, node)
			}
		}
	}
	if c, _ := csrCondition(t, csrName); c.Type == certificatesv1.CertificateApproved {
		t.Fatalf("%s was approved after being held: %s", csrName, c.Message)
	}
	return why
}

// heldWith waits for a Warning Event with reason on csrName, and fails if
// the CSR is decided meanwhile. It returns the Event's message.
func heldWith(t *testing.T, csrName, reason string) string {
	t.Helper()
	var msg string
	until(t, 20*time.Second, csrName+" held with "+reason, func() bool {
		if c, _ := csrCondition(t, csrName); c.Type != "" {
			t.Fatalf("%s decided (%s): %s", csrName, c.Type, c.Message)
		}
		for _, e := range eventsFor(t, csrName) {
			if e.Type == corev1.EventTypeWarning && e.Reason == reason {
				msg = e.Message
				return true
			}
		}
		return false
	})
	return msg
}

// issued waits for csrName's certificate and returns it.
func issued(t *testing.T, csrName string) *x509.Certificate {
	t.Helper()
	var cert []byte
	until(t, 20*time.Second, csrName+" issued", func() bool {
		c, csr := csrCondition(t, csrName)
		if c.Type == certificatesv1.CertificateDenied {
			t.Fatalf("%s denied: %s", csrName, c.Message)
		}
		cert = csr.Status.Certificate
		return len(cert) > 0
	})
	block, _ := pem.Decode(cert)
	parsed, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return parsed
}

func nodeRecord(t *testing.T, name string) *records.Record {
	t.Helper()
	u, err := dynamic.NewForConfigOrDie(cluster.Admin()).Resource(records.GVR).Get(t.Context(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("NodeRecord %s: %v", name, err)
	}
	r, err := records.FromUnstructured(u)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func internal(ip string) corev1.NodeAddress {
	return corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: ip}
}
func hostname(n string) corev1.NodeAddress {
	return corev1.NodeAddress{Type: corev1.NodeHostName, Address: n}
}

// honestJoin is an honest node joining: its kubelet registers, its agent
// reports addresses and its key, the coordinator initializes it.
func honestJoin(t *testing.T, name, ip string, labels map[string]string) *actor {
	t.Helper()
	a := newActor(t, name, ip, true)
	a.status(internal(ip), hostname(name))
	a.report(labels, a.key.Public().(ed25519.PublicKey))
	until(t, 20*time.Second, name+" initialized", func() bool {
		for _, taint := range getNode(t, name).Spec.Taints {
			if taint.Key == contract.TaintUninitialized {
				return false
			}
		}
		return true
	})
	return a
}

// leader is the coordinator process the attack tests run against.
var leader *proc

func startAttackedCoordinator(t *testing.T) {
	t.Helper()
	kc := coordinatorKubeconfig(t, "coordinator-attacked")
	cfg := filepath.Join(t.TempDir(), "coordinator.yaml")
	if err := os.WriteFile(cfg, []byte(attackConfig), 0o600); err != nil {
		t.Fatal(err)
	}
	p := startProcess(t, "attacked", kc, cfg)
	t.Cleanup(func() {
		// SIGTERM: the lease is released, so the next test's replicas lead at once.
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		_ = p.cmd.Wait()
	})
	until(t, 30*time.Second, "the coordinator leads", func() bool { return holder(t, adminClient()) == "attacked" })
	leader = p
}

func TestAttacks(t *testing.T) {
	startAttackedCoordinator(t)
	ca := x509.NewCertPool()
	ca.AppendCertsFromPEM(cluster.CAPEM())

	// The victim: an honest node, initialized, with its serving certificate.
	victim := honestJoin(t, "victim", "10.0.7.1", map[string]string{"node-role.kubernetes.io/web": ""})
	// Its cloud metadata gives it a DNS name, which the kubelet puts in its CSR.
	victim.status(internal("10.0.7.1"), hostname("victim"), corev1.NodeAddress{Type: corev1.NodeInternalDNS, Address: "victim.nodes.example.com"})
	victim.csr("victim-serving", []string{"victim", "victim.nodes.example.com"}, "10.0.7.1")
	victim.agentAttests("victim-serving")
	cert := issued(t, "victim-serving")
	if _, err := cert.Verify(x509.VerifyOptions{Roots: ca, DNSName: "victim.nodes.example.com", KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
		t.Fatalf("the honest node's certificate: %v", err)
	}
	victimNode := getNode(t, "victim")

	// The attacker: node mallory's kubelet credential, stolen. Mallory's
	// own agent (and key) is honest; the thief does not have the key.
	mallory := honestJoin(t, "mallory", "10.0.7.2", map[string]string{"node-role.kubernetes.io/web": ""})
	thief := &actor{t: t, name: "mallory", self: mallory.self}
	_, thiefKey, _ := ed25519.GenerateKey(rand.Reader)

	inVictimsPodCIDR := func() string {
		p := netip.MustParsePrefix(victimNode.Spec.PodCIDRs[0])
		return p.Addr().Next().Next().Next().String()
	}()

	t.Run("certificates for names and IPs that are not the node's", func(t *testing.T) {
		thief.t = t
		for i, c := range []struct {
			addr corev1.NodeAddress
			dns  []string
			ip   string
		}{
			{internal("10.96.0.1"), []string{"mallory"}, "10.96.0.1"},
			{internal("10.96.0.10"), []string{"mallory"}, "10.96.0.10"},
			{internal(inVictimsPodCIDR), []string{"mallory"}, inVictimsPodCIDR},
			{internal("127.0.0.1"), []string{"mallory"}, "127.0.0.1"},
			{internal("169.254.169.254"), []string{"mallory"}, "169.254.169.254"},
			{internal("10.0.7.1"), []string{"mallory"}, "10.0.7.1"}, // the victim's
			{hostname("victim"), []string{"mallory", "victim"}, ""},
			{corev1.NodeAddress{Type: corev1.NodeInternalDNS, Address: "kubernetes.default.svc"}, []string{"mallory", "kubernetes.default.svc"}, ""},
			{corev1.NodeAddress{Type: corev1.NodeInternalDNS, Address: "kubernetes.default.svc.cluster.local"}, []string{"mallory", "kubernetes.default.svc.cluster.local"}, ""},
			{corev1.NodeAddress{Type: corev1.NodeExternalDNS, Address: "kubernetes"}, []string{"mallory", "kubernetes"}, ""},
			{corev1.NodeAddress{Type: corev1.NodeInternalDNS, Address: "victim.nodes.example.com"}, []string{"mallory", "victim.nodes.example.com"}, ""},
			{corev1.NodeAddress{Type: corev1.NodeInternalDNS, Address: "mail.example.org"}, []string{"mallory", "mail.example.org"}, ""},
			// The API server's certificate names a VIP and the cluster
			// endpoint (a "*.lb.example.com" pattern matches it); the admin
			// reserved a load balancer address.
			{internal(testcluster.APIServerVIP), []string{"mallory"}, testcluster.APIServerVIP},
			{corev1.NodeAddress{Type: corev1.NodeInternalDNS, Address: testcluster.APIServerName}, []string{"mallory", testcluster.APIServerName}, ""},
			{internal("10.0.7.201"), []string{"mallory"}, "10.0.7.201"},
		} {
			name := fmt.Sprintf("forged-%d", i)
			thief.status(internal("10.0.7.2"), hostname("mallory"), c.addr)
			var ips []string
			if c.ip != "" {
				ips = []string{c.ip}
			}
			thief.csr(name, c.dns, ips...)
			// The thief also attests it, with the credential it has, and
			// with a key of its own.
			thief.attest(name, nil)
			why := refused(t, name)
			thief.attest(name, thiefKey)
			t.Logf("%-38s %s", c.addr.Address, why)
			if c, _ := csrCondition(t, name); c.Type == certificatesv1.CertificateApproved {
				t.Fatalf("%s approved", name)
			}
		}
		thief.status(internal("10.0.7.2"), hostname("mallory"))
	})

	t.Run("racing the agent: re-forging in a loop while filing CSRs", func(t *testing.T) {
		thief.t = t
		stop := make(chan struct{})
		done := make(chan struct{})
		go func() { // the real agent reverts the forged status within tens of ms
			defer close(done)
			for {
				select {
				case <-stop:
					return
				case <-time.After(30 * time.Millisecond):
					data, _ := json.Marshal(map[string]any{"status": map[string]any{"addresses": []corev1.NodeAddress{internal("10.0.7.2"), hostname("mallory")}}})
					_, _ = mallory.self.CoreV1().Nodes().Patch(t.Context(), "mallory", types.MergePatchType, data, metav1.PatchOptions{}, "status")
				}
			}
		}()
		for i := range 10 {
			thief.status(internal("10.0.7.2"), internal("10.0.7.99"), hostname("mallory"))
			name := fmt.Sprintf("race-%d", i)
			thief.csr(name, []string{"mallory"}, "10.0.7.2", "10.0.7.99")
			thief.attest(name, nil)
		}
		close(stop)
		<-done
		// The real agent has the last word: its loop may have stopped
		// right after a forgery, which it would revert.
		data, _ := json.Marshal(map[string]any{"status": map[string]any{"addresses": []corev1.NodeAddress{internal("10.0.7.2"), hostname("mallory")}}})
		if _, err := mallory.self.CoreV1().Nodes().Patch(t.Context(), "mallory", types.MergePatchType, data, metav1.PatchOptions{}, "status"); err != nil {
			t.Fatal(err)
		}
		for i := range 10 {
			t.Logf("race-%d %s", i, refused(t, fmt.Sprintf("race-%d", i)))
		}
	})

	t.Run("the coordinator as a weapon: an admin's protected label", func(t *testing.T) {
		thief.t = t
		if _, err := adminClient().CoreV1().Nodes().Patch(t.Context(), "mallory", types.MergePatchType,
			[]byte(`{"metadata":{"labels":{"node-restriction.kubernetes.io/pool":"gold","node-role.kubernetes.io/db":""}}}`), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
		// The old bookkeeping annotation, forged to name the admin's labels;
		// and a request the policy grants, so the coordinator visibly acts.
		thief.annotate(map[string]string{contract.AnnotationGrantedLabels: `{"v":1,"keys":["node-restriction.kubernetes.io/pool","node-role.kubernetes.io/db"]}`})
		thief.report(map[string]string{"node-role.kubernetes.io/edge": ""}, mallory.key.Public().(ed25519.PublicKey))
		until(t, 20*time.Second, "the granted request", func() bool { _, ok := getNode(t, "mallory").Labels["node-role.kubernetes.io/edge"]; return ok })
		// web was granted by the coordinator and is no longer requested: removed.
		until(t, 20*time.Second, "the withdrawn grant removed", func() bool { _, ok := getNode(t, "mallory").Labels["node-role.kubernetes.io/web"]; return !ok })
		n := getNode(t, "mallory")
		if n.Labels["node-restriction.kubernetes.io/pool"] != "gold" {
			t.Errorf("the admin's node-restriction label was touched: %v", n.Labels)
		}
		if _, ok := n.Labels["node-role.kubernetes.io/db"]; !ok {
			t.Errorf("the admin's role label was removed: %v", n.Labels)
		}
		// And requesting the admin's label, then withdrawing it, does not make it the coordinator's.
		thief.report(map[string]string{"node-role.kubernetes.io/edge": "", "node-role.kubernetes.io/db": ""}, mallory.key.Public().(ed25519.PublicKey))
		until(t, 20*time.Second, "the record", func() bool { return len(nodeRecord(t, "mallory").Spec.GrantedLabels) > 0 })
		thief.report(map[string]string{"node-role.kubernetes.io/edge": ""}, mallory.key.Public().(ed25519.PublicKey))
		leader.lookedAgain(t, "mallory")
		if _, ok := getNode(t, "mallory").Labels["node-role.kubernetes.io/db"]; !ok {
			t.Error("requesting and withdrawing an admin's label removed it")
		}
	})

	t.Run("the cluster name is the coordinator's", func(t *testing.T) {
		thief.t = t
		thief.report(map[string]string{contract.LabelClusterName: "other", "node-role.kubernetes.io/edge": ""}, mallory.key.Public().(ed25519.PublicKey))
		until(t, 20*time.Second, "GrantRefused Event", func() bool {
			for _, e := range eventsFor(t, "mallory") {
				if e.Reason == "GrantRefused" && strings.Contains(e.Message, "clustername") {
					return true
				}
			}
			return false
		})
		if v := getNode(t, "mallory").Labels[contract.LabelClusterName]; v != "prod" {
			t.Errorf("cluster name %q, want prod", v)
		}
	})

	t.Run("a malformed or unknown-version report changes nothing", func(t *testing.T) {
		thief.t = t
		before := getNode(t, "mallory").Labels
		thief.annotate(map[string]string{contract.AnnotationRequestedLabels: `{"v":2,"labels":{}}`})
		until(t, 20*time.Second, "MalformedAgentReport Event", func() bool {
			for _, e := range eventsFor(t, "mallory") {
				if e.Reason == "MalformedAgentReport" {
					return true
				}
			}
			return false
		})
		after := getNode(t, "mallory").Labels
		for k, v := range before {
			if after[k] != v {
				t.Errorf("label %s changed from %q to %q on a report the coordinator cannot read", k, v, after[k])
			}
		}
		thief.report(map[string]string{"node-role.kubernetes.io/edge": ""}, mallory.key.Public().(ed25519.PublicKey))
	})

	t.Run("denial of service: the pool and another node's renewals", func(t *testing.T) {
		thief.t = t
		addrs := []corev1.NodeAddress{internal("10.0.7.2"), hostname("mallory")}
		for i := range 256 {
			addrs = append(addrs, internal(fmt.Sprintf("10.244.%d.9", i)))
		}
		addrs = append(addrs, internal("10.0.7.1")) // the victim's address, too
		thief.status(addrs...)
		late := honestJoin(t, "late", "10.0.7.3", nil)
		if len(getNode(t, "late").Spec.PodCIDRs) == 0 {
			t.Error("a node joining while another lists the whole pool got no pod CIDR")
		}
		if got := len(nodeRecord(t, "mallory").Spec.Addresses); got > 16 {
			t.Errorf("mallory has %d recorded addresses; the cap is 16", got)
		}
		for _, c := range nodeRecord(t, "mallory").Spec.Addresses {
			if strings.HasPrefix(c.IP, "10.244.") || c.IP == "10.0.7.1" {
				t.Errorf("recorded for mallory: %s", c.IP)
			}
		}
		// The victim renews with the same names while mallory claims its IP.
		victim.t = t
		victim.csr("victim-renewal", []string{"victim", "victim.nodes.example.com"}, "10.0.7.1")
		victim.agentAttests("victim-renewal")
		issued(t, "victim-renewal")
		thief.status(internal("10.0.7.2"), hostname("mallory"))
		_ = late
	})

	t.Run("claiming an address before the honest node joins", func(t *testing.T) {
		thief.t = t
		thief.status(internal("10.0.7.2"), internal("10.0.7.50"), hostname("mallory"))
		until(t, 20*time.Second, "mallory's claim", func() bool {
			for _, c := range nodeRecord(t, "mallory").Spec.Addresses {
				if c.IP == "10.0.7.50" {
					return true
				}
			}
			return false
		})
		early := honestJoin(t, "early", "10.0.7.50", nil)
		early.csr("early-serving", []string{"early"}, "10.0.7.50")
		why := refused(t, "early-serving")
		if !strings.Contains(why, "mallory") {
			t.Errorf("the held CSR does not name the claimant: %s", why)
		}
		// A transient conflict is a retry: once mallory withdraws, the honest node gets its certificate.
		thief.status(internal("10.0.7.2"), hostname("mallory"))
		early.t = t
		early.agentAttests("early-serving")
		issued(t, "early-serving")
	})

	t.Run("renewal with other names is held", func(t *testing.T) {
		victim.t = t
		victim.status(internal("10.0.7.1"), internal("10.0.7.11"), hostname("victim"), corev1.NodeAddress{Type: corev1.NodeInternalDNS, Address: "victim.nodes.example.com"})
		until(t, 20*time.Second, "the new address recorded", func() bool { return len(nodeRecord(t, "victim").Spec.Addresses) == 2 })
		victim.csr("victim-more-names", []string{"victim"}, "10.0.7.1", "10.0.7.11")
		heldWith(t, "victim-more-names", "RenewalNamesChanged")
		victim.status(internal("10.0.7.1"), hostname("victim"), corev1.NodeAddress{Type: corev1.NodeInternalDNS, Address: "victim.nodes.example.com"})
	})

	t.Run("a stolen credential cannot re-enrol a key, even when the Node is re-created", func(t *testing.T) {
		thief.t = t
		// A node may not delete its own Node; an admin does (a reinstall),
		// and the thief registers first with a key of its own.
		if err := thief.self.CoreV1().Nodes().Delete(t.Context(), "mallory", metav1.DeleteOptions{}); err == nil {
			t.Fatal("a node deleted its own Node object")
		}
		if err := adminClient().CoreV1().Nodes().Delete(t.Context(), "mallory", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		until(t, 20*time.Second, "mallory gone", func() bool {
			_, err := adminClient().CoreV1().Nodes().Get(t.Context(), "mallory", metav1.GetOptions{})
			return err != nil
		})
		id, _ := cluster.NodeIdentity("mallory")
		if _, err := kubeletsim.Register(t.Context(), kubeletsim.Config{NodeName: "mallory", NodeIPs: []netip.Addr{netip.MustParseAddr("10.0.7.2")}, Identity: id.Config()}); err != nil {
			t.Fatal(err)
		}
		thief.status(internal("10.0.7.2"), hostname("mallory"))
		thief.report(nil, thiefKey.Public().(ed25519.PublicKey))
		thief.csr("mallory-reinstalled", []string{"mallory"}, "10.0.7.2")
		// Held from the published key alone, before any attestation:
		// nothing signed with that key counts.
		if msg := heldWith(t, "mallory-reinstalled", "AgentKeyChanged"); !strings.Contains(msg, "kubectl patch noderecord mallory") {
			t.Errorf("AgentKeyChanged %q does not name the re-enrol command", msg)
		}
		if nodeRecord(t, "mallory").Spec.AgentKey != contract.EncodeAgentKey(mallory.key.Public().(ed25519.PublicKey)) {
			t.Error("the enrolled key changed")
		}
		// The admin's command, as the Event gives it, re-enrols; then the
		// agent is asked, and its attestation with that key approves.
		patch := fmt.Sprintf(`{"spec":{"agentKey":%q}}`, contract.EncodeAgentKey(thiefKey.Public().(ed25519.PublicKey)))
		if _, err := dynamic.NewForConfigOrDie(cluster.Admin()).Resource(records.GVR).Patch(t.Context(), "mallory", types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
		until(t, 20*time.Second, "review request", func() bool {
			return getNode(t, "mallory").Annotations[contract.AnnotationCSRReview] == "mallory-reinstalled"
		})
		thief.attest("mallory-reinstalled", thiefKey)
		issued(t, "mallory-reinstalled")
	})

	t.Run("a flood of CSRs from one node does not pause approval for others", func(t *testing.T) {
		thief.t = t
		for i := range 30 {
			thief.csr(fmt.Sprintf("flood-%d", i), []string{"mallory"}, "10.0.7.2") // each waits for an attestation that never comes
		}
		victim.t = t
		victim.csr("victim-after-flood", []string{"victim", "victim.nodes.example.com"}, "10.0.7.1")
		victim.agentAttests("victim-after-flood")
		issued(t, "victim-after-flood")
	})

	// And nothing the attacks did reached the honest node.
	v := getNode(t, "victim")
	if _, ok := v.Labels["node-role.kubernetes.io/web"]; !ok || v.Labels[contract.LabelClusterName] != "prod" {
		t.Errorf("the victim's labels changed: %v", v.Labels)
	}
	if got := nodeRecord(t, "victim").Spec.Addresses; len(got) != 1 || got[0].IP != "10.0.7.1" {
		t.Errorf("the victim's recorded addresses: %v", got)
	}
}
