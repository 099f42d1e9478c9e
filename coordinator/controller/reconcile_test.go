package controller_test

import (
	"slices"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"

	"github.com/talos-nodeinit/talos-nodeinit/coordinator/records"
)

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
			NodeUID: uid, EnrolUID: uid, AgentKey: "enrolled-key", Addresses: []records.Claim{{IP: ip, Since: since}},
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
		if s.AgentKey != "enrolled-key" || s.NodeUID == "" {
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
