package controller_test

import (
	"crypto/ed25519"
	"crypto/rand"
	"slices"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"

	"github.com/talos-nodeinit/talos-nodeinit/coordinator/records"
	"github.com/talos-nodeinit/talos-nodeinit/pkg/contract"
)

// enrolledKey is a key in its one spelling, as the records' schema wants.
var enrolledKey = contract.EncodeAgentKey(make(ed25519.PublicKey, ed25519.PublicKeySize))

// TestRecordsReconciledAtLeaderStart: Nodes deleted (or deleted and
// registered again) while no coordinator ran leave records that still
// claim their addresses. The next leader releases them before it decides
// anything, keeping what survives the object, so another Node can have
// the address recorded.
func TestRecordsReconciledAtLeaderStart(t *testing.T) {
	cfg := coordinatorIdentity(t) // the NodeRecord resource exists
	recs := dynamic.NewForConfigOrDie(cluster.Admin()).Resource(records.GVR)
	since := time.Now().Add(-time.Hour).UTC().Truncate(time.Second)
	put := func(name, uid, ip string) {
		t.Helper()
		u, err := (&records.Record{Name: name, Spec: records.Spec{
			NodeUID: uid, EnrolUID: uid, AgentKey: enrolledKey, Addresses: []records.Claim{{IP: ip, Since: since}},
			GrantedLabels: []string{"node-role.kubernetes.io/web="},
		}}).ToUnstructured()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := recs.Create(t.Context(), u, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// Deleted while no coordinator ran: no Node of the name.
	put("orphan-gone", "uid-of-a-deleted-node", "10.0.13.1")
	// Deleted and registered again: the Node is another object, still
	// waiting for its agent (its sync writes nothing).
	register(t, "orphan-recreated", "10.0.13.9")
	put("orphan-recreated", "uid-of-the-old-object", "10.0.13.2")

	c := startCoordinatorAs(t, "reconcile", ipamSettings, cfg)
	read := func(name string) records.Spec {
		t.Helper()
		u, err := recs.Get(t.Context(), name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		r, err := records.FromUnstructured(u)
		if err != nil {
			t.Fatal(err)
		}
		return r.Spec
	}
	waitFor(t, 10*time.Second, "the coordinator leads", func() bool { return c.Ready() == nil && c.Waiting("orphan-recreated") })
	for _, name := range []string{"orphan-gone", "orphan-recreated"} {
		s := read(name)
		if len(s.Addresses) > 0 || len(s.GrantedLabels) > 0 {
			t.Fatalf("%s: the record still claims %v and grants %v after the leader started", name, s.Addresses, s.GrantedLabels)
		}
		if s.AgentKey != enrolledKey || s.NodeUID == "" {
			t.Errorf("%s: released more than the object's claims: %+v", name, s)
		}
	}

	// The released address is another Node's to claim.
	other := register(t, "orphan-other", "10.0.13.1")
	other.publish(t, report{providerID: "talos://metal/10.0.13.1"})
	waitFor(t, 10*time.Second, "orphan-other initialized", func() bool { return initialized(get(t, "orphan-other")) })
	if s := read("orphan-other"); !slices.ContainsFunc(s.Addresses, func(c records.Claim) bool { return c.IP == "10.0.13.1" }) {
		t.Errorf("orphan-other's record claims %v, want 10.0.13.1", s.Addresses)
	}
	if e := events(t, "orphan-other", "AddressHeldByOtherNode"); len(e) > 0 {
		t.Errorf("the released address is still held: %s", e[0].Message)
	}
}

// TestRecordsRefuseAKeyInAnotherSpelling: an agent key has one spelling
// (contract.DecodeAgentKey), and the NodeRecord's schema says so, so a key
// pasted by hand with a line break or other unused bits is refused when
// written, with the API server's reason, instead of leaving the node's CSRs
// held as if no key were enrolled.
func TestRecordsRefuseAKeyInAnotherSpelling(t *testing.T) {
	recs := dynamic.NewForConfigOrDie(cluster.Admin()).Resource(records.GVR)
	pub, _, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	canonical := contract.EncodeAgentKey(pub)
	b64 := strings.TrimPrefix(canonical, "ed25519:")
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
	other := alphabet[strings.IndexByte(alphabet, b64[42])^1]
	create := func(name, field, key string) error {
		spec := records.Spec{NodeUID: "uid-" + name}
		if field == "agentKey" {
			spec.AgentKey = key
		} else {
			spec.PendingAgentKey = key
		}
		u, err := (&records.Record{Name: name, Spec: spec}).ToUnstructured()
		if err != nil {
			t.Fatal(err)
		}
		_, err = recs.Create(t.Context(), u, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return err
	}
	for _, field := range []string{"agentKey", "pendingAgentKey"} {
		if err := create("spelling-ok", field, canonical); err != nil {
			t.Errorf("%s %q refused: %v", field, canonical, err)
		}
		for _, bad := range []string{"ed25519:" + b64[:20] + "\n" + b64[20:], "ed25519:" + b64[:42] + string(other) + "=", "enrolled-key", "ed25519:AAAA"} {
			if err := create("spelling-bad", field, bad); !apierrors.IsInvalid(err) {
				t.Errorf("%s %q: %v, want refused as invalid", field, bad, err)
			}
		}
	}
}
