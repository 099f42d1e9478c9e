package records

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"runtime"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/tools/cache"
)

// The NodeRecord cache keeps each record decoded once (Cached): its name,
// resourceVersion and UID, and the record, without managed fields or
// anything else of the object; one that is not a record keeps the reason.
func TestCachedKeepsTheRecordOnly(t *testing.T) {
	until := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": GVR.Group + "/" + GVR.Version, "kind": "NodeRecord",
		"metadata": map[string]any{"name": "n", "resourceVersion": "7", "uid": "rec-uid",
			"managedFields": []any{map[string]any{"manager": "nodeinit-coordinator"}},
			"annotations":   map[string]any{"kubectl.kubernetes.io/last-applied-configuration": "{}"}},
		"spec": map[string]any{"nodeUID": "u", "addresses": []any{map[string]any{"ip": "10.0.0.1", "since": "2026-11-27T08:00:00Z"}},
			"serving": map[string]any{"csr": "c", "sans": []any{"dns:n"}, "validUntil": until.Format(time.RFC3339)}},
	}}
	out, err := cached(u)
	if err != nil {
		t.Fatal(err)
	}
	c, ok := out.(*Cached)
	if !ok {
		t.Fatalf("cached as %T", out)
	}
	if c.Name != "n" || c.ResourceVersion != "7" || c.UID != "rec-uid" || c.ManagedFields != nil || c.Annotations != nil {
		t.Errorf("metadata kept: %+v", c.ObjectMeta)
	}
	if c.Err != nil || c.Record == nil || c.Record.Spec.NodeUID != "u" || len(c.Record.Spec.Addresses) != 1 || !c.Record.Spec.Serving.ValidUntil.Equal(until) {
		t.Errorf("record: %+v, %v", c.Record, c.Err)
	}
	if key, err := cache.MetaNamespaceKeyFunc(c); err != nil || key != "n" {
		t.Errorf("informer key %q, %v", key, err)
	}
	for _, obj := range []any{c, cache.DeletedFinalStateUnknown{Key: "n", Obj: c}, u} {
		if r, err := Decoded(obj); err != nil || r.Spec.NodeUID != "u" {
			t.Errorf("Decoded(%T) = %+v, %v", obj, r, err)
		}
	}
	// A copy shares nothing with the cache.
	cp := c.DeepCopyObject().(*Cached)
	cp.Record.Spec.Addresses[0].IP = "10.0.0.2"
	if c.Record.Spec.Addresses[0].IP != "10.0.0.1" {
		t.Error("DeepCopyObject shares the record's addresses")
	}
	// Already cached (a transform called again) or not a record at all.
	if again, err := cached(c); err != nil || again != c {
		t.Errorf("cached twice: %v, %v", again, err)
	}
	if out, err := cached("not a record"); err != nil || out != "not a record" {
		t.Errorf("another object: %v, %v", out, err)
	}
	if _, err := Decoded("not a record"); err == nil {
		t.Error("Decoded a string")
	}
	// A record this version cannot read is kept with the reason, not
	// refused to the informer (which would stop syncing every record).
	bad := u.DeepCopy()
	bad.Object["spec"] = map[string]any{"addresses": "not a list"}
	out, err = cached(bad)
	if err != nil {
		t.Fatal(err)
	}
	if r, err := Decoded(out); err == nil || r != nil {
		t.Errorf("an unreadable record decoded: %+v", r)
	}
	// One the API server accepts (its date-time check lower-cases first)
	// still holds its addresses and node prefix, as earliest.
	lower := u.DeepCopy()
	lower.Object["spec"].(map[string]any)["addresses"] = []any{map[string]any{"ip": "2001:db8:5:1::a", "since": "2026-11-27t08:00:00z"}}
	lower.Object["spec"].(map[string]any)["prefix"] = "2001:db8:5:1::/64"
	out, _ = cached(lower)
	if _, err := Decoded(out); err == nil {
		t.Fatal("a lower-case date read: the case tests nothing")
	}
	if h := held(out); h == nil || h.Prefix != "2001:db8:5:1::/64" || len(h.Addresses) != 1 || !h.Addresses[0].Since.Equal(time.Date(2026, 11, 27, 8, 0, 0, 0, time.UTC)) {
		t.Errorf("an unreadable record holds %+v (its claim keeps its date, read in upper case)", h)
	}
	// A date that does not read even so: the claim is the earliest.
	lower.Object["spec"].(map[string]any)["addresses"] = []any{map[string]any{"ip": "2001:db8:5:1::a", "since": "yesterday"}}
	lower.Object["spec"].(map[string]any)["agentKeyEnrolled"] = "soon"
	out, _ = cached(lower)
	if h := held(out); h == nil || len(h.Addresses) != 1 || !h.Addresses[0].Since.IsZero() {
		t.Errorf("an unreadable date: holds %+v, want the claim as the earliest", h)
	}
	if got := Claimed(cache.DeletedFinalStateUnknown{Key: "n", Obj: out}); len(got) != 1 || got[0] != "2001:db8:5:1::a" {
		t.Errorf("Claimed = %v", got)
	}
	if cp := out.(*Cached).DeepCopyObject().(*Cached); cp.Holds == nil || cp.Holds.Prefix != "2001:db8:5:1::/64" {
		t.Errorf("DeepCopyObject dropped Holds: %+v", cp)
	}
}

// A claim spelled otherwise than netip.Addr.String (an admin's edit) is
// looked up, released and held under the one spelling, readable record
// or not.
func TestClaimsInAnotherSpellingHold(t *testing.T) {
	for spelled, want := range map[string]string{"2001:DB8:5::A": "2001:db8:5::a", "2001:0db8:0005:0000:0000:0000:0000:000a": "2001:db8:5::a", "::ffff:10.0.5.9": "10.0.5.9", "2001:db8:5::a": "2001:db8:5::a"} {
		for _, since := range []string{"2026-11-27T08:00:00Z", "2026-11-27t08:00:00z"} {
			u := &unstructured.Unstructured{Object: map[string]any{
				"metadata": map[string]any{"name": "n", "resourceVersion": "1"},
				"spec":     map[string]any{"addresses": []any{map[string]any{"ip": spelled, "since": since}}},
			}}
			obj, _ := cached(u)
			if got := Claimed(obj); len(got) != 1 || got[0] != want {
				t.Errorf("%s since %s: Claimed = %v, want [%s]", spelled, since, got, want)
			}
			s := &Store{}
			s.informer = cache.NewSharedIndexInformer(nil, &Cached{}, 0, s.indexers())
			s.own = overlay(s.informer.GetIndexer())
			if err := s.informer.GetIndexer().Add(obj); err != nil {
				t.Fatal(err)
			}
			if got := s.Owner(netip.MustParseAddr(want)); got != "n" {
				t.Errorf("%s since %s: Owner(%s) = %q, want n", spelled, since, want, got)
			}
		}
	}
}

// BenchmarkCachedRecordHeld is what the informer holds per NodeRecord,
// 5,000 records of initialized Nodes: as the dynamic client lists them
// (unstructured, without managed fields: the store before Cached) and as
// Cached.
func BenchmarkCachedRecordHeld(b *testing.B) {
	const n = 5000
	raw := make([][]byte, n)
	for i := range raw {
		rec := &Record{Name: fmt.Sprintf("node-%05d", i), Spec: Spec{NodeUID: fmt.Sprintf("uid-%05d", i), AgentKey: "ed25519:pcsrNyk/eXe7HBB04omD6Rkkx9cWKDkHOA17ULp6ER4=",
			GrantedLabels: []string{"node.cloudprovider.kubernetes.io/platform=metal"},
			Addresses:     []Claim{{IP: fmt.Sprintf("10.%d.%d.%d", i>>16, (i>>8)&255, i&255), Since: time.Now()}, {IP: fmt.Sprintf("2001:db8:%x::1", i), Since: time.Now()}},
			Prefix:        fmt.Sprintf("2001:db8:%x::/64", i)}}
		u, err := rec.ToUnstructured()
		if err != nil {
			b.Fatal(err)
		}
		u.SetResourceVersion(fmt.Sprint(1000 + i))
		u.SetUID("rec-uid")
		if raw[i], err = json.Marshal(u.Object); err != nil {
			b.Fatal(err)
		}
	}
	listed := func() []*unstructured.Unstructured {
		out := make([]*unstructured.Unstructured, n)
		for i, r := range raw {
			out[i] = &unstructured.Unstructured{}
			if err := out[i].UnmarshalJSON(r); err != nil {
				b.Fatal(err)
			}
		}
		return out
	}
	held := func(keep func([]*unstructured.Unstructured) any) float64 {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		kept := keep(listed())
		runtime.GC()
		runtime.ReadMemStats(&after)
		runtime.KeepAlive(kept)
		return float64(int64(after.HeapAlloc)-int64(before.HeapAlloc)) / n
	}
	var asListed, asCached float64
	for b.Loop() {
		asListed = held(func(us []*unstructured.Unstructured) any { return us })
		asCached = held(func(us []*unstructured.Unstructured) any {
			out := make([]any, len(us))
			for i, u := range us {
				out[i], _ = cached(u)
			}
			return out
		})
	}
	b.ReportMetric(asListed, "unstructured-B/record")
	b.ReportMetric(asCached, "cached-B/record")
}
