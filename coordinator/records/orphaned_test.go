package records

import (
	"slices"
	"testing"
	"time"
)

// Records of Nodes deleted (or deleted and re-created) while no coordinator
// led keep no claims, prefix or grants: a new leader reduces them to what
// survives the object. Everything else is left alone.
func TestOrphaned(t *testing.T) {
	enrolled := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	live := func(uid string) Spec {
		return Spec{NodeUID: uid, EnrolUID: uid, AgentKey: "key", AgentKeyEnrolled: &enrolled,
			Addresses: []Claim{{IP: "10.0.0.1", Since: enrolled}}, Prefix: "2001:db8:1::/64",
			GrantedLabels: []string{"node-role.kubernetes.io/web="}, GrantedTaints: []string{"dedicated=db:NoSchedule"},
			Serving: &Serving{CSR: "csr-1", SANs: []string{"n"}, ValidUntil: enrolled.AddDate(1, 0, 0)}}
	}
	nodes := map[string]string{"present": "uid-1", "recreated": "uid-new", "unrecorded-uid": "uid-3", "left-alone": "uid-4"}
	recs := []*Record{
		{Name: "present", Spec: live("uid-1")},
		{Name: "gone", Spec: live("uid-2")},
		{Name: "recreated", Spec: live("uid-old")},
		{Name: "unrecorded-uid", Spec: Spec{Addresses: []Claim{{IP: "10.0.0.3", Since: enrolled}}}},
		{Name: "gone-without-uid", Spec: Spec{Addresses: []Claim{{IP: "10.0.0.5", Since: enrolled}}}},
		{Name: "already-released", Spec: Released(live("uid-6"))},
		{Name: "left-alone", Spec: Spec{NodeUID: "uid-4", NotAdopted: true}},
		{Name: "left-alone-gone", Spec: Spec{NodeUID: "uid-7", NotAdopted: true}},
		{Name: "prefix-only", Spec: Spec{NodeUID: "uid-8", Prefix: "2001:db8:8::/64"}},
	}
	var got []string
	for _, r := range Orphaned(recs, nodes) {
		got = append(got, r.Name)
	}
	want := []string{"gone", "recreated", "gone-without-uid", "left-alone-gone", "prefix-only"}
	if !slices.Equal(got, want) {
		t.Fatalf("Orphaned = %v, want %v", got, want)
	}

	// What a released record keeps: the machine's and the name's, never a
	// claim, a prefix or a grant.
	r := Released(live("uid-2"))
	if len(r.Addresses) != 0 || r.Prefix != "" || len(r.GrantedLabels) != 0 || len(r.GrantedTaints) != 0 {
		t.Errorf("Released kept claims or grants: %+v", r)
	}
	if r.NodeUID != "uid-2" || r.AgentKey != "key" || r.EnrolUID != "uid-2" || r.Serving == nil {
		t.Errorf("Released lost what survives the object: %+v", r)
	}
	if Released(Spec{}).Equal(Spec{}) == false {
		t.Error("an empty record is not already released")
	}
	if len(Orphaned(nil, nodes)) != 0 || len(Orphaned(recs[:1], nil)) != 1 {
		t.Error("no Nodes at all: every record with something to release is orphaned")
	}
}
