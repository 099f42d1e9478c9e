package main

import (
	"crypto/ed25519"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"

	"github.com/talos-nodeinit/talos-nodeinit/coordinator/records"
	"github.com/talos-nodeinit/talos-nodeinit/pkg/contract"
	"github.com/talos-nodeinit/talos-nodeinit/pkg/csrcheck/csrtest"
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
		thief.csr("legacy-1-serving", []string{"legacy-1"}, "10.0.8.30")
		thief.attest("legacy-1-serving", thief.key)
		t.Logf("legacy-1-serving: %s", heldWith(t, "legacy-1-serving", "NoEnrolledAgentKey"))
		rec := nodeRecord(t, "legacy-1")
		if rec.Spec.AgentKey != "" || rec.Spec.PendingAgentKey != contract.EncodeAgentKey(thief.key.Public().(ed25519.PublicKey)) {
			t.Fatalf("record: agentKey %q (want none), pendingAgentKey %q (want the published key)", rec.Spec.AgentKey, rec.Spec.PendingAgentKey)
		}
		// The admin's one command, copying from where only the coordinator
		// writes the key the admin checked (approval.EnrolCommand).
		copyKey := []byte(`[{"op":"test","path":"/spec/pendingAgentKey","value":"` + rec.Spec.PendingAgentKey + `"},{"op":"copy","from":"/spec/pendingAgentKey","path":"/spec/agentKey"}]`)
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
		n.certified("renewer-1", []string{"renewer"}, "10.0.8.20")
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

	// Class 6 again: the renewal rule knows the certificate it approved by
	// the CSR object (its UID), not by the name the requester chose.
	// kube-controller-manager's cleaner deletes an issued CSR after an
	// hour, while its certificate stays valid: root on the node (credential
	// and agent key) may then use the name again.
	t.Run("renewal memory across a CSR name used again", func(t *testing.T) {
		n := honestJoin(t, "reuser", "10.0.8.60", nil)
		n.certified("reuser-1", []string{"reuser"}, "10.0.8.60")
		more := []string{"reuser", "reuser.nodes.example.com"}
		deleteCSR(t, "reuser-1") // as kube-controller-manager's cleaner does
		// The recorded name, another request with other names.
		n.csr("reuser-1", more, "10.0.8.60")
		n.attest("reuser-1", n.key)
		t.Logf("reuser-1 again: %s", heldWith(t, "reuser-1", "RenewalNamesChanged"))
		// While that one is pending under the recorded name, another name.
		n.csr("reuser-2", more, "10.0.8.60")
		n.attest("reuser-2", n.key)
		t.Logf("reuser-2: %s", heldWith(t, "reuser-2", "RenewalNamesChanged"))
		// A request under the recorded name that is denied does not clear
		// what the record keeps of the issued certificate.
		deleteCSR(t, "reuser-1")
		n.csr("reuser-1", []string{"reuser", "elsewhere.example.com"}, "10.0.8.60")
		n.attest("reuser-1", n.key)
		until(t, 20*time.Second, "reuser-1 (bad names) denied", func() bool {
			c, _ := csrCondition(t, "reuser-1")
			return c.Type == certificatesv1.CertificateDenied
		})
		n.csr("reuser-3", more, "10.0.8.60")
		n.attest("reuser-3", n.key)
		t.Logf("reuser-3: %s", heldWith(t, "reuser-3", "RenewalNamesChanged"))
		if s := nodeRecord(t, "reuser").Spec.Serving; s == nil || s.CSR != "reuser-1" || len(s.SANs) != 2 || !slices.Contains(s.SANs, "dns:reuser") || !slices.Contains(s.SANs, "ip:10.0.8.60") {
			t.Fatalf("the record keeps %+v of the issued certificate, want its SANs", s)
		}
	})

	// Class 6 again: the certificate's validity the rule goes by is the
	// node's longest with the same names, not the last one's: a request
	// for ten minutes (spec.expirationSeconds is the requester's) does
	// not end the rule while the year-long certificate is valid.
	t.Run("a short certificate does not end the renewal rule", func(t *testing.T) {
		n := honestJoin(t, "shorty", "10.0.8.74", nil)
		n.certified("shorty-1", []string{"shorty"}, "10.0.8.74")
		long := nodeRecord(t, "shorty").Spec.Serving.ValidUntil
		ten := int32(600)
		if _, err := n.self.CertificatesV1().CertificateSigningRequests().Create(t.Context(), &certificatesv1.CertificateSigningRequest{
			ObjectMeta: metav1.ObjectMeta{Name: "shorty-2"},
			Spec: certificatesv1.CertificateSigningRequestSpec{Request: csrtest.PEM(t, nil, "shorty", []string{"shorty"}, "10.0.8.74"),
				SignerName: certificatesv1.KubeletServingSignerName, ExpirationSeconds: &ten,
				Usages: []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageServerAuth}},
		}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		n.attest("shorty-2", n.key)
		issued(t, "shorty-2")
		until(t, 20*time.Second, "the record names shorty-2", func() bool { return nodeRecord(t, "shorty").Spec.Serving.CSR == "shorty-2" })
		if got := nodeRecord(t, "shorty").Spec.Serving.ValidUntil; got.Before(long) {
			t.Fatalf("the record's certificate is valid until %v after a ten-minute one, was %v: the renewal rule would end then", got, long)
		}
	})

	// The record follows decisions taken by hand: a certificate an admin
	// approves is the one the renewal rule and the names' ownership go
	// by; a request the record names at the join and that an admin denies,
	// or that is deleted unapproved (kube-controller-manager's cleaner
	// deletes a pending CSR after a day), is no certificate.
	t.Run("the record follows decisions taken by hand", func(t *testing.T) {
		handy := honestJoin(t, "handy", "10.0.8.71", nil)
		handy.certified("handy-1", []string{"handy"}, "10.0.8.71")
		more := []string{"handy", "handy.nodes.example.com"}
		// A certificate approved by hand replaces the recorded one only
		// when its request is newer, and creation times have whole
		// seconds (a kubelet asks again months later, not within one).
		time.Sleep(1100 * time.Millisecond)
		handy.csr("handy-2", more, "10.0.8.71")
		handy.attest("handy-2", handy.key)
		heldWith(t, "handy-2", "RenewalNamesChanged")
		approveByHand(t, "handy-2")
		issued(t, "handy-2")
		until(t, 20*time.Second, "the record names the certificate approved by hand", func() bool {
			s := nodeRecord(t, "handy").Spec.Serving
			return s != nil && s.CSR == "handy-2"
		})
		handy.csr("handy-3", more, "10.0.8.71")
		handy.attest("handy-3", handy.key)
		issued(t, "handy-3") // the same names as the certificate the node has

		// A CSR's name is the requester's, ':' and all: none names a
		// queue key of the coordinator's own (root on handy would clear
		// its record's certificate, and escape the renewal rule).
		until(t, 20*time.Second, "the record names handy-3", func() bool {
			s := nodeRecord(t, "handy").Spec.Serving
			return s != nil && s.CSR == "handy-3"
		})
		kept := nodeRecord(t, "handy").Spec.Serving
		for _, forged := range []string{"gone:handy:" + kept.UID, "serving:handy-3"} {
			handy.csr(forged, []string{"handy"}, "10.0.8.71")
		}
		// The coordinator's own keys hold a '/', which the API server
		// refuses in a name.
		for _, forged := range []string{"gone/handy/" + kept.UID, "serving/handy-3"} {
			if _, err := handy.self.CertificatesV1().CertificateSigningRequests().Create(t.Context(), &certificatesv1.CertificateSigningRequest{
				ObjectMeta: metav1.ObjectMeta{Name: forged},
				Spec: certificatesv1.CertificateSigningRequestSpec{Request: csrtest.PEM(t, nil, "handy", []string{"handy"}, "10.0.8.71"),
					SignerName: certificatesv1.KubeletServingSignerName, Usages: []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageServerAuth}},
			}, metav1.CreateOptions{}); err == nil {
				t.Fatalf("a CSR named %q was created: the coordinator's queue keys would not be its own", forged)
			}
		}
		leader.lookedAgain(t, "handy")
		if s := nodeRecord(t, "handy").Spec.Serving; s == nil || s.UID != kept.UID {
			t.Fatalf("a CSR named like a queue key changed the record's certificate: %+v, was %+v", s, kept)
		}

		for i, how := range []string{"denied", "deleted"} {
			name := "byhand-" + how
			ip := fmt.Sprintf("10.0.8.%d", 72+i)
			a := newActor(t, name, ip, true)
			a.csr(name+"-1", []string{name}, ip)
			a.status(internal(ip), hostname(name))
			a.report(nil, a.key.Public().(ed25519.PublicKey))
			until(t, 20*time.Second, name+" initialized with its request under review", func() bool {
				r := recordOrNil(t, name)
				return r != nil && r.Spec.Serving != nil && r.Spec.Serving.CSR == name+"-1"
			})
			if how == "denied" {
				denyByHand(t, name+"-1")
			} else {
				deleteCSR(t, name+"-1")
			}
			until(t, 20*time.Second, "the record of "+name+" keeps no certificate", func() bool {
				r := recordOrNil(t, name)
				return r != nil && r.Spec.Serving == nil
			})
		}
	})

	// Class 5 (names): a name a pattern gives out is never a Node's own
	// name. A "{node}" pattern's name is the derived Node's alone, whatever
	// registers or is certified first: a Node named after it is denied it,
	// never left waiting, and the derived Node never waits for it. A "*"
	// name is nobody's: a Node named like one another Node was certified
	// for gets it too, and the holder's renewal goes on. The attacker joins
	// with the bootstrap token and its own agent key.
	t.Run("names a pattern gives out", func(t *testing.T) {
		victim := honestJoin(t, "twin", "10.0.8.61", nil)
		squat := honestJoin(t, "twin.nodes.example.com", "10.0.8.62", nil)
		squat.csr("twin-squat", []string{"twin.nodes.example.com"}, "10.0.8.62")
		squat.attest("twin-squat", squat.key)
		if why := refused(t, "twin-squat"); !strings.HasPrefix(why, "denied") || !strings.Contains(why, "Node twin") {
			t.Fatalf("the squatter's own name: %s; want it denied, naming twin", why)
		}
		victim.certified("twin-own", []string{"twin", "twin.nodes.example.com"}, "10.0.8.61")

		// Registered and certified-first orders: the Node named after the
		// pattern's name first, the derived Node later, or while a request
		// is recorded at the squatter's join.
		early := honestJoin(t, "pre9.nodes.example.com", "10.0.8.65", nil)
		early.csr("pre9-squat", []string{"pre9.nodes.example.com"}, "10.0.8.65")
		early.attest("pre9-squat", early.key)
		t.Logf("registered first: %s", refused(t, "pre9-squat"))
		late := honestJoin(t, "pre9", "10.0.8.66", nil)
		late.certified("pre9-own", []string{"pre9", "pre9.nodes.example.com"}, "10.0.8.66")

		rec9 := newActor(t, "rec9.nodes.example.com", "10.0.8.67", true)
		rec9.csr("rec9-squat", []string{"rec9.nodes.example.com"}, "10.0.8.67")
		rec9.status(internal("10.0.8.67"), hostname("rec9.nodes.example.com"))
		rec9.report(nil, rec9.key.Public().(ed25519.PublicKey))
		until(t, 20*time.Second, "rec9.nodes.example.com initialized", func() bool { return !contract.Uninitialized(getNode(t, "rec9.nodes.example.com")) })
		rec9.attest("rec9-squat", rec9.key)
		t.Logf("a request recorded at the join: %s", refused(t, "rec9-squat"))
		honestJoin(t, "rec9", "10.0.8.68", nil).certified("rec9-own", []string{"rec9", "rec9.nodes.example.com"}, "10.0.8.68")

		// Case variants of the name change nothing.
		caseSquat := honestJoin(t, "case9.nodes.example.com", "10.0.8.71", nil)
		caseSquat.csr("case9-squat", []string{"CASE9.Nodes.Example.COM"}, "10.0.8.71")
		caseSquat.attest("case9-squat", caseSquat.key)
		t.Logf("in another case: %s", refused(t, "case9-squat"))

		// A "*" name: certified to its first holder; a Node named like it
		// gets its own name, never waiting, and from then on the name is
		// that Node's: the holder's renewal naming it is denied, and no
		// other Node is certified for an existing Node's name through "*".
		star := honestJoin(t, "starv", "10.0.8.69", nil)
		star.certified("starv-1", []string{"starv", "Web9.lb.example.com"}, "10.0.8.69")
		named9 := honestJoin(t, "web9.lb.example.com", "10.0.8.70", nil)
		named9.certified("web9-own", []string{"web9.lb.example.com"}, "10.0.8.70")
		star.csr("starv-2", []string{"starv", "Web9.lb.example.com"}, "10.0.8.69")
		star.attest("starv-2", star.key)
		if why := refused(t, "starv-2"); !strings.HasPrefix(why, "denied") {
			t.Fatalf("the holder's renewal naming a Node's own name: %s; want it denied", why)
		}
		other := honestJoin(t, "starw", "10.0.8.72", nil)
		other.csr("starw-1", []string{"starw", "web9.lb.example.com"}, "10.0.8.72")
		other.attest("starw-1", other.key)
		if why := refused(t, "starw-1"); !strings.HasPrefix(why, "denied") {
			t.Fatalf("another Node's name through \"*\": %s; want it denied", why)
		}
	})

	// Class 3: a node prefix is carved for one Node, and no segment is
	// carved around an address recorded for another. The attacker (root on
	// a node it joined) lists an unused address of the victim's /64 before
	// the victim joins, and reports that /64 as its own prefix.
	t.Run("IPv6 segments from a prefix the node does not own", func(t *testing.T) {
		const victimNet = "2001:db8:66:1::/64"
		sq := v6Join(t, "v6-squatter", "10.0.8.40", "2001:db8:66:1:2::99", victimNet)
		sqCIDR := v6PodCIDR(t, "v6-squatter")
		t.Logf("the first claimant carves the /64: %s (first claim is trust on first use; the inventory below overrides it)", sqCIDR)

		// The victim joins on its own /64 with an address inside the
		// squatter's segment, and one outside it.
		inSegment := sqCIDR.Addr().Next().String()
		victim := v6Join(t, "v6-victim", "10.0.8.41", inSegment, victimNet)
		if p, ok := v6PodCIDROk(t, "v6-victim"); ok && netip.MustParsePrefix(victimNet).Overlaps(p) {
			t.Fatalf("the victim got %s from a /64 another Node carves from", p)
		}
		ev := eventWith(t, "v6-victim", "AddressHeldByOtherNode")
		if !strings.Contains(ev, "v6-squatter") {
			t.Fatalf("the victim's Event does not name the holder: %s", ev)
		}
		t.Logf("on the victim: %s", ev)
		// Its CSR for that address is denied with the fix, never approved,
		// never left waiting for a pod CIDR that does not change.
		victim.csr("v6-victim-serving", []string{"v6-victim"}, "10.0.8.41", inSegment)
		victim.attest("v6-victim-serving", victim.key)
		why := refused(t, "v6-victim-serving")
		if !strings.HasPrefix(why, "denied") || !strings.Contains(why, "kubectl delete node v6-squatter") {
			t.Fatalf("the victim's CSR: %s; want it denied with the fix", why)
		}
		t.Logf("v6-victim-serving: %s", why)
		// And the squatter never gets the victim's address certified.
		sq.csr("v6-squatter-victims", []string{"v6-squatter"}, inSegment)
		sq.attest("v6-squatter-victims", sq.key)
		t.Logf("v6-squatter-victims: %s", refused(t, "v6-squatter-victims"))

		// The other order: the honest Node carves first, then another lists
		// an address in its /64, outside its segment. That address is not
		// recorded for the latecomer, and no segment of the /64 is its.
		owner := v6Join(t, "v6-owner", "10.0.8.42", "2001:db8:67:1::10", "2001:db8:67:1::/64")
		_ = owner
		late := v6Join(t, "v6-late", "10.0.8.43", "2001:db8:67:1:ffff::1", "2001:db8:67:1::/64")
		if p, ok := v6PodCIDROk(t, "v6-late"); ok {
			t.Fatalf("the latecomer got an IPv6 pod CIDR %s", p)
		}
		if rec := nodeRecord(t, "v6-late"); slices.ContainsFunc(rec.Spec.Addresses, func(c records.Claim) bool { return c.IP == "2001:db8:67:1:ffff::1" }) || rec.Spec.Prefix != "" {
			t.Fatalf("the latecomer's record holds %v, prefix %q", rec.Spec.Addresses, rec.Spec.Prefix)
		}
		if got := nodeRecord(t, "v6-owner").Spec.Prefix; got != "2001:db8:67:1::/64" {
			t.Fatalf("the owner's record holds prefix %q", got)
		}
		late.csr("v6-late-serving", []string{"v6-late"}, "2001:db8:67:1:ffff::1")
		late.attest("v6-late-serving", late.key)
		t.Logf("v6-late-serving: %s", refused(t, "v6-late-serving"))
	})

	// Class 8: pre-claims lose against the admin's inventory. A squatter
	// lists addresses of a network bound to "bound-*" before the entitled
	// Node joins: they are never recorded for it, the entitled Node gets
	// them and its certificate, and the squatter's request for them is
	// refused. (Without an inventory first claim wins; then the victim's
	// Node carries an Event naming the holder, as class 3 shows.)
	t.Run("pre-claims against the inventory", func(t *testing.T) {
		sq := newActor(t, "squatter-9", "10.0.9.5", true)
		sq.status(internal("10.0.9.5"), internal("10.0.8.50"), hostname("squatter-9"))
		sq.report(nil, sq.key.Public().(ed25519.PublicKey))
		until(t, 20*time.Second, "squatter-9 recorded", func() bool {
			u, err := dynamic.NewForConfigOrDie(cluster.Admin()).Resource(records.GVR).Get(t.Context(), "squatter-9", metav1.GetOptions{})
			return err == nil && u != nil
		})
		if rec := nodeRecord(t, "squatter-9"); slices.ContainsFunc(rec.Spec.Addresses, func(c records.Claim) bool { return c.IP == "10.0.9.5" }) {
			t.Fatalf("the inventory's address was recorded for the squatter: %v", rec.Spec.Addresses)
		}
		bound := honestJoin(t, "bound-1", "10.0.9.5", nil)
		bound.certified("bound-1-serving", []string{"bound-1"}, "10.0.9.5")
		sq.csr("squatter-9-serving", []string{"squatter-9"}, "10.0.9.5")
		sq.attest("squatter-9-serving", sq.key)
		t.Logf("squatter-9-serving: %s", refused(t, "squatter-9-serving"))
	})
}

// v6Join is a node joining with an IPv4 and an IPv6 address, reporting
// prefix as its own, with its own agent key; it waits for initialization.
func v6Join(t *testing.T, name, ip4, ip6, prefix string) *actor {
	t.Helper()
	a := registered(t, name, ip4, ip6, prefix)
	a.report(nil, a.key.Public().(ed25519.PublicKey))
	until(t, 20*time.Second, name+" initialized", func() bool {
		return !slices.ContainsFunc(getNode(t, name).Spec.Taints, func(t corev1.Taint) bool { return t.Key == contract.TaintUninitialized })
	})
	return a
}

func v6PodCIDROk(t *testing.T, name string) (netip.Prefix, bool) {
	t.Helper()
	for _, s := range getNode(t, name).Spec.PodCIDRs {
		if p := netip.MustParsePrefix(s); p.Addr().Is6() {
			return p, true
		}
	}
	return netip.Prefix{}, false
}

func v6PodCIDR(t *testing.T, name string) netip.Prefix {
	t.Helper()
	p, ok := v6PodCIDROk(t, name)
	if !ok {
		t.Fatalf("%s has no IPv6 pod CIDR: %v", name, getNode(t, name).Spec.PodCIDRs)
	}
	return p
}

// eventWith waits for a Warning Event with reason on the named object and
// returns its message.
func eventWith(t *testing.T, name, reason string) string {
	t.Helper()
	var msg string
	until(t, 20*time.Second, reason+" Event on "+name, func() bool {
		for _, e := range eventsFor(t, name) {
			if e.Reason == reason {
				msg = e.Message
				return true
			}
		}
		return false
	})
	return msg
}

// deleteCSR deletes a CSR as an admin (or kube-controller-manager's
// cleaner) does, and waits until it is gone.
func deleteCSR(t *testing.T, name string) {
	t.Helper()
	if err := adminClient().CertificatesV1().CertificateSigningRequests().Delete(t.Context(), name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	until(t, 10*time.Second, name+" gone", func() bool {
		_, err := adminClient().CertificatesV1().CertificateSigningRequests().Get(t.Context(), name, metav1.GetOptions{})
		return err != nil
	})
}

// deleteNode deletes a Node as an admin does, and waits until it is gone.
func deleteNode(t *testing.T, name string) {
	t.Helper()
	if err := adminClient().CoreV1().Nodes().Delete(t.Context(), name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	until(t, 10*time.Second, "Node "+name+" gone", func() bool {
		_, err := adminClient().CoreV1().Nodes().Get(t.Context(), name, metav1.GetOptions{})
		return err != nil
	})
}

// recordOrNil is Node name's record, nil while none can be read.
func recordOrNil(t *testing.T, name string) *records.Record {
	u, err := dynamic.NewForConfigOrDie(cluster.Admin()).Resource(records.GVR).Get(t.Context(), name, metav1.GetOptions{})
	if err != nil {
		return nil
	}
	r, err := records.FromUnstructured(u)
	if err != nil {
		return nil
	}
	return r
}

// approveByHand and denyByHand decide a CSR as an admin does with
// kubectl certificate approve|deny.
func approveByHand(t *testing.T, name string) {
	decideByHand(t, name, certificatesv1.CertificateApproved)
}
func denyByHand(t *testing.T, name string) { decideByHand(t, name, certificatesv1.CertificateDenied) }

func decideByHand(t *testing.T, name string, typ certificatesv1.RequestConditionType) {
	t.Helper()
	csr, err := adminClient().CertificatesV1().CertificateSigningRequests().Get(t.Context(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	csr.Status.Conditions = append(csr.Status.Conditions, certificatesv1.CertificateSigningRequestCondition{
		Type: typ, Status: corev1.ConditionTrue, Reason: "KubectlByHand", Message: "decided by an admin", LastUpdateTime: metav1.Now()})
	if _, err := adminClient().CertificatesV1().CertificateSigningRequests().UpdateApproval(t.Context(), name, csr, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// certified files a serving CSR, attests it when the coordinator asks, as
// the node's honest agent, and waits for its certificate.
func (a *actor) certified(csrName string, dns []string, ip string) {
	a.t.Helper()
	a.csr(csrName, dns, ip)
	a.agentAttests(csrName)
	issued(a.t, csrName)
}
