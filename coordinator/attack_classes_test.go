package main

import (
	"crypto/ed25519"
	"net/netip"
	"slices"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"

	"github.com/talos-nodeinit/talos-nodeinit/coordinator/records"
	"github.com/talos-nodeinit/talos-nodeinit/pkg/contract"
	"github.com/talos-nodeinit/talos-nodeinit/pkg/harness/kubeletsim"
	"github.com/talos-nodeinit/talos-nodeinit/pkg/harness/testcluster"
)

// The attack classes of SECURITY.md, each tried as an attacker would, with
// variants, through real node identities against the real coordinator
// binary. Here the attacker holds an agent key too: root on a node, or a
// node it joined itself with the bootstrap token every Talos worker
// carries (the harness mints system:node:<any name> as that path does).
// Replay against another build: NODEINIT_COORDINATOR_BINARY=… go test -run TestAttackClasses.
func TestAttackClasses(t *testing.T) {
	startAttackedCoordinator(t)

	// Class 1: a Node whose own name is a reserved name. The attacker joins
	// it (its own agent, its own key, enrolled on first use) and asks for
	// its own name, attested by that key.
	t.Run("reserved names through a node's own name", func(t *testing.T) {
		for i, name := range []string{testcluster.APIServerName, "vault.example.com", "kubernetes.default"} {
			ip := netip.AddrFrom4([4]byte{10, 0, 8, byte(1 + i)}).String()
			a := honestJoin(t, name, ip, nil)
			a.csr(name+"-own", []string{name}, ip)
			a.attest(name+"-own", a.key) // unasked: an attacker need not wait for a review request
			t.Logf("%s: %s", name, refused(t, name+"-own"))
		}
	})

	// Class 2: root on a control-plane node (its kubelet credential and
	// its agent key). Its own certificate is issued; the shared VIP and the
	// cluster endpoint's name, which the API server's certificate carries,
	// are not, whatever the node lists.
	t.Run("shared API-server addresses on a control-plane node", func(t *testing.T) {
		cp := honestJoin(t, "cp-attacked", "10.0.8.10", nil)
		label := []byte(`{"metadata":{"labels":{"node-role.kubernetes.io/control-plane":""}}}`)
		if _, err := adminClient().CoreV1().Nodes().Patch(t.Context(), "cp-attacked", types.MergePatchType, label, metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
		cp.status(internal("10.0.8.10"), internal(testcluster.APIServerVIP), hostname("cp-attacked"))
		time.Sleep(time.Second) // csr.minAddressAge: the listed addresses are settled
		// Before it holds any certificate (afterwards the renewal rule
		// would hold a request with other names anyway).
		for _, c := range []struct {
			name string
			dns  []string
			ips  []string
		}{
			{"cp-vip", []string{"cp-attacked"}, []string{testcluster.APIServerVIP}},
			{"cp-vip-and-own", []string{"cp-attacked"}, []string{"10.0.8.10", testcluster.APIServerVIP}},
			{"cp-endpoint-name", []string{"cp-attacked", testcluster.APIServerName}, []string{"10.0.8.10"}},
		} {
			cp.csr(c.name, c.dns, c.ips...)
			cp.attest(c.name, cp.key)
			t.Logf("%s: %s", c.name, refused(t, c.name))
		}
		cp.csr("cp-own", []string{"cp-attacked"}, "10.0.8.10")
		cp.agentAttests("cp-own")
		issued(t, "cp-own") // its own address and name: the exemption still holds
	})

	// Class 4: "first use" means first. A Node initialized before the
	// coordinator kept records (adoptExisting off: left alone) is deleted
	// by an admin, and its name registered again by a stolen credential
	// with the thief's own agent key. The key is not enrolled: it waits in
	// the record, written only by the coordinator, for an admin's one
	// command; its CSR is held, never approved, until then.
	t.Run("enrolment of a node the coordinator never adopted", func(t *testing.T) {
		legacy := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "legacy-1"}}
		if _, err := adminClient().CoreV1().Nodes().Create(t.Context(), legacy, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		until(t, 20*time.Second, "the coordinator remembers legacy-1", func() bool {
			u, err := dynamic.NewForConfigOrDie(cluster.Admin()).Resource(records.GVR).Get(t.Context(), "legacy-1", metav1.GetOptions{})
			return err == nil && u.Object["spec"].(map[string]any)["notAdopted"] == true
		})
		if err := adminClient().CoreV1().Nodes().Delete(t.Context(), "legacy-1", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		until(t, 10*time.Second, "legacy-1 is gone", func() bool {
			_, err := adminClient().CoreV1().Nodes().Get(t.Context(), "legacy-1", metav1.GetOptions{})
			return err != nil
		})
		thief := honestJoin(t, "legacy-1", "10.0.8.30", nil) // its kubelet registers, its agent (the thief's) reports its key
		time.Sleep(time.Second)
		thief.csr("legacy-1-serving", []string{"legacy-1"}, "10.0.8.30")
		thief.attest("legacy-1-serving", thief.key)
		t.Logf("legacy-1-serving: %s", heldWith(t, "legacy-1-serving", "NoEnrolledAgentKey"))
		rec := nodeRecord(t, "legacy-1")
		if rec.Spec.AgentKey != "" || rec.Spec.PendingAgentKey != contract.EncodeAgentKey(thief.key.Public().(ed25519.PublicKey)) {
			t.Fatalf("record: agentKey %q (want none), pendingAgentKey %q (want the published key)", rec.Spec.AgentKey, rec.Spec.PendingAgentKey)
		}
		// The admin's one command, copying from where only the coordinator writes.
		copyKey := []byte(`[{"op":"copy","from":"/spec/pendingAgentKey","path":"/spec/agentKey"}]`)
		if _, err := dynamic.NewForConfigOrDie(cluster.Admin()).Resource(records.GVR).Patch(t.Context(), "legacy-1", types.JSONPatchType, copyKey, metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
		thief.attest("legacy-1-serving", thief.key)
		issued(t, "legacy-1-serving")
	})

	// Class 6: renewal memory survives the Node object. A certificate is
	// issued; the Node is deleted and registers again (same machine, same
	// agent key); a request with other names while the first certificate
	// is valid is held, as it would have been without the re-creation.
	t.Run("renewal memory across re-creation", func(t *testing.T) {
		n := honestJoin(t, "renewer", "10.0.8.20", nil)
		n.csr("renewer-1", []string{"renewer"}, "10.0.8.20")
		n.agentAttests("renewer-1")
		issued(t, "renewer-1")
		old := getNode(t, "renewer").UID
		if err := adminClient().CoreV1().Nodes().Delete(t.Context(), "renewer", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		id, err := cluster.NodeIdentity("renewer")
		if err != nil {
			t.Fatal(err)
		}
		until(t, 10*time.Second, "the Node is gone", func() bool {
			_, err := adminClient().CoreV1().Nodes().Get(t.Context(), "renewer", metav1.GetOptions{})
			return err != nil
		})
		if _, err := kubeletsim.Register(t.Context(), kubeletsim.Config{NodeName: "renewer", NodeIPs: []netip.Addr{netip.MustParseAddr("10.0.8.20")}, Identity: id.Config()}); err != nil {
			t.Fatal(err)
		}
		if getNode(t, "renewer").UID == old {
			t.Fatal("the Node was not re-created")
		}
		n.status(internal("10.0.8.20"), hostname("renewer"))
		n.report(nil, n.key.Public().(ed25519.PublicKey))
		until(t, 20*time.Second, "renewer initialized again", func() bool {
			return !slices.ContainsFunc(getNode(t, "renewer").Spec.Taints, func(t corev1.Taint) bool { return t.Key == contract.TaintUninitialized })
		})
		n.csr("renewer-2", []string{"renewer", "renewer.nodes.example.com"}, "10.0.8.20")
		n.attest("renewer-2", n.key)
		t.Logf("renewer-2: %s", heldWith(t, "renewer-2", "RenewalNamesChanged"))
		if c, _ := csrCondition(t, "renewer-2"); c.Type == certificatesv1.CertificateApproved {
			t.Fatal("renewer-2 approved")
		}
	})
}
