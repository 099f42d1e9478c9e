package records

import (
	"fmt"
	"net/netip"
	"slices"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	ktesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
)

// informerAt is an informer whose indexer runs catchUp right after a read
// of it returns: the informer adding an object and its handler running
// between a reader's look at the cache and its look at the store's own
// writes, the interleaving a busy coordinator meets.
type informerAt struct {
	cache.SharedIndexInformer
	idx cache.Indexer
}

func (i informerAt) GetIndexer() cache.Indexer { return i.idx }

type indexerThen struct {
	cache.Indexer
	after func()
}

func (x *indexerThen) GetByKey(key string) (any, bool, error) {
	obj, ok, err := x.Indexer.GetByKey(key)
	if f := x.after; f != nil {
		x.after = nil
		f()
	}
	return obj, ok, err
}

// A record the store wrote is read back by every later Get, whenever the
// informer catches up with it: never nil (a second create, answered
// AlreadyExists, as make bench saw once), never the cache's older version
// (an update answered Conflict). The informer's add and handler run right
// after Get has read the cache; the handler gets a moment to finish, as it
// does on a busy node.
func TestOwnWriteIsReadWhileTheInformerCatchesUp(t *testing.T) {
	for _, tc := range []struct {
		name   string
		before *Record // in the cache before the write, nil when none
	}{
		{"created", nil},
		{"updated", &Record{Name: "n", ResourceVersion: "7", Spec: Spec{NodeUID: "old"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			inner := cache.NewIndexer(cache.MetaNamespaceKeyFunc, (&Store{}).indexers())
			if tc.before != nil {
				u, err := tc.before.ToUnstructured()
				if err != nil {
					t.Fatal(err)
				}
				u.SetResourceVersion(tc.before.ResourceVersion)
				obj, _ := cached(u)
				if err := inner.Add(obj); err != nil {
					t.Fatal(err)
				}
			}
			idx := &indexerThen{Indexer: inner}
			s := &Store{informer: informerAt{idx: idx}, own: overlay(idx)}
			mine := &Record{Name: "n", ResourceVersion: "9", Spec: Spec{NodeUID: "new"}}
			s.keep(mine) // as Put leaves it

			u, err := mine.ToUnstructured()
			if err != nil {
				t.Fatal(err)
			}
			u.SetResourceVersion(mine.ResourceVersion)
			delivered, _ := cached(u)
			handled := make(chan struct{})
			idx.after = func() {
				if err := inner.Update(delivered); err != nil {
					t.Error(err)
				}
				go func() { s.caughtUp(delivered); close(handled) }()
				select {
				case <-handled:
				case <-time.After(200 * time.Millisecond): // the handler waits for the reader
				}
			}
			got, err := s.Get("n")
			<-handled
			if err != nil {
				t.Fatal(err)
			}
			if got == nil || got.Spec.NodeUID != "new" {
				t.Fatalf("Get after the store's own write = %+v, want the written record (NodeUID new)", got)
			}
			if got, _ := s.Get("n"); got == nil || got.Spec.NodeUID != "new" {
				t.Fatalf("Get once the informer caught up = %+v, want NodeUID new", got)
			}
		})
	}
}

// A record this replica created is read back, by name and by each of its
// keys, however often, until the informer has it: every sync of its Node
// and of Nodes near it reads it, and one that found nothing would create
// it again (AlreadyExists) or claim its addresses for another Node.
func TestACreatedRecordIsReadUntilTheInformerHasIt(t *testing.T) {
	s := storeWith(t, cachedAt(t, "other", "5", "u", "10.1.0.1"))
	s.wrote(cachedAt(t, "n", "9", "u", "10.2.1.7").Record.withVersion("9"))
	for i := range 3 {
		if got, _ := s.Get("n"); got == nil || got.Spec.NodeUID != "u" {
			t.Fatalf("read %d: Get = %+v, want the created record", i+1, got)
		}
		if got := s.Owner(netip.MustParseAddr("10.2.1.7")); got != "n" {
			t.Fatalf("read %d: Owner(10.2.1.7) = %q, want n", i+1, got)
		}
	}
}

// cachedAt is rec as the informer would hold it at resource version rv.
func cachedAt(t testing.TB, name, rv, uid string, claims ...string) *Cached {
	t.Helper()
	rec := &Record{Name: name, Spec: Spec{NodeUID: uid}}
	for _, ip := range claims {
		rec.Spec.Addresses = append(rec.Spec.Addresses, Claim{IP: ip, Since: time.Date(2026, 11, 28, 0, 0, 0, 0, time.UTC)})
	}
	u, err := rec.ToUnstructured()
	if err != nil {
		t.Fatal(err)
	}
	u.SetResourceVersion(rv)
	obj, _ := cached(u)
	return obj.(*Cached)
}

func storeWith(t testing.TB, objs ...*Cached) *Store {
	t.Helper()
	s := &Store{}
	s.informer = cache.NewSharedIndexInformer(nil, &Cached{}, 0, s.indexers())
	s.own = overlay(s.informer.GetIndexer())
	for _, o := range objs {
		if err := s.informer.GetIndexer().Add(o); err != nil {
			t.Fatal(err)
		}
	}
	return s
}

// What the store reads back for a record is always the newest version it
// knows of, its own writes and the informer's, in whatever order they
// arrive: two workers' writes of one record returning out of order, a
// version written elsewhere reaching the cache, a record deleted and
// written again before the informer delivers the deletion, and an own
// write of a record deleted meanwhile (its update answered NotFound).
func TestTheNewestVersionIsRead(t *testing.T) {
	t.Run("writes returning out of order", func(t *testing.T) {
		s := storeWith(t)
		s.wrote(cachedAt(t, "n", "12", "b").Record.withVersion("12"))
		s.wrote(cachedAt(t, "n", "9", "a").Record.withVersion("9"))
		if got, _ := s.Get("n"); got == nil || got.Spec.NodeUID != "b" {
			t.Fatalf("Get = %+v, want version 12 (NodeUID b)", got)
		}
	})
	t.Run("a newer version in the cache", func(t *testing.T) {
		// Written by this replica at 9 claiming 10.0.0.1; the cache then
		// holds 12, which claims 10.0.0.2 instead (written elsewhere).
		s := storeWith(t, cachedAt(t, "n", "12", "u", "10.0.0.2"))
		s.keep(cachedAt(t, "n", "9", "u", "10.0.0.1").Record.withVersion("9"))
		if got := s.Owner(netip.MustParseAddr("10.0.0.2")); got != "n" {
			t.Errorf("Owner(10.0.0.2) = %q, want n (version 12 claims it)", got)
		}
		if got := s.Owner(netip.MustParseAddr("10.0.0.1")); got != "" {
			t.Errorf("Owner(10.0.0.1) = %q, want none (version 12 released it)", got)
		}
	})
	t.Run("deleted, then written again before the deletion is delivered", func(t *testing.T) {
		s := storeWith(t, withUIDCached(cachedAt(t, "n", "8", "old"), "rec-1"))
		s.wrote(withUID(cachedAt(t, "n", "12", "new").Record.withVersion("12"), "rec-2"))
		gone := withUIDCached(cachedAt(t, "n", "10", "old"), "rec-1") // a watch's deletion carries the deletion's version
		if err := s.informer.GetIndexer().Delete(gone); err != nil {
			t.Fatal(err)
		}
		s.deleted(gone)
		if got, _ := s.Get("n"); got == nil || got.Spec.NodeUID != "new" {
			t.Fatalf("Get = %+v, want the record written after the deletion (NodeUID new)", got)
		}
	})
	t.Run("an own write of a record deleted meanwhile", func(t *testing.T) {
		s := NewStore(dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), map[schema.GroupVersionResource]string{GVR: "NodeRecordList"}))
		// Put's write landed after the informer delivered the deletion.
		s.wrote(cachedAt(t, "n", "9", "u").Record.withVersion("9"))
		if _, err := s.Put(t.Context(), &Record{Name: "n", ResourceVersion: "9", Spec: Spec{NodeUID: "u"}}); !apierrors.IsNotFound(err) {
			t.Fatalf("Put over a deleted record: %v, want NotFound", err)
		}
		if got, _ := s.Get("n"); got != nil {
			t.Fatalf("Get after NotFound = %+v, want none: the next write creates it", got)
		}
	})
}

func (r *Record) withVersion(rv string) *Record { c := clone(r); c.ResourceVersion = rv; return c }

func withUID(r *Record, uid types.UID) *Record { r.UID = uid; return r }

func withUIDCached(c *Cached, uid types.UID) *Cached {
	c.UID, c.Record.UID = uid, uid
	return c
}

// An own write answered Conflict (someone else wrote the record since)
// is still the newest version this replica knows, whatever the cache
// says: its claims hold until the informer delivers the newer one. A
// deletion the informer delivers before the write's response returns,
// or finds by a relist, leaves nothing of that write behind.
func TestOwnWritesAgainstConflictsAndDeletions(t *testing.T) {
	t.Run("an update answered Conflict", func(t *testing.T) {
		client := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), map[schema.GroupVersionResource]string{GVR: "NodeRecordList"})
		client.PrependReactor("update", "noderecords", func(ktesting.Action) (bool, runtime.Object, error) {
			return true, nil, apierrors.NewConflict(GVR.GroupResource(), "n", nil)
		})
		s := NewStore(client)
		if err := s.informer.GetIndexer().Add(cachedAt(t, "n", "8", "u")); err != nil {
			t.Fatal(err)
		}
		s.wrote(cachedAt(t, "n", "9", "u", "10.0.0.1").Record.withVersion("9"))
		if _, err := s.Put(t.Context(), &Record{Name: "n", ResourceVersion: "9", Spec: Spec{NodeUID: "u"}}); !apierrors.IsConflict(err) {
			t.Fatalf("Put: %v, want Conflict", err)
		}
		if got := s.Owner(netip.MustParseAddr("10.0.0.1")); got != "n" {
			t.Fatalf("Owner(10.0.0.1) after a Conflict = %q, want n: version 9 claimed it, and the cache's 8 is older", got)
		}
	})
	t.Run("deleted before the write's response returns", func(t *testing.T) {
		s := storeWith(t)
		s.deleted(withUIDCached(cachedAt(t, "n", "10", "u"), "rec-1")) // 9 was delivered and deleted at 10
		s.wrote(withUID(cachedAt(t, "n", "9", "u", "10.0.0.1").Record.withVersion("9"), "rec-1"))
		if got, _ := s.Get("n"); got != nil {
			t.Errorf("Get = %+v, want none: the record was deleted after the write", got)
		}
		if got := s.Owner(netip.MustParseAddr("10.0.0.1")); got != "" {
			t.Errorf("Owner(10.0.0.1) = %q, want none", got)
		}
		s.wrote(withUID(cachedAt(t, "n", "12", "u2").Record.withVersion("12"), "rec-2")) // created again
		if got, _ := s.Get("n"); got == nil || got.Spec.NodeUID != "u2" {
			t.Errorf("Get after a create past the deletion = %+v, want NodeUID u2", got)
		}
	})
	t.Run("a deletion a relist finds", func(t *testing.T) {
		s := storeWith(t)
		s.wrote(withUID(cachedAt(t, "n", "9", "u", "10.0.0.1").Record.withVersion("9"), "rec-1"))
		s.deleted(cache.DeletedFinalStateUnknown{Key: "n", Obj: withUIDCached(cachedAt(t, "n", "8", "u"), "rec-1")}) // last seen at 8
		if got, _ := s.Get("n"); got != nil {
			t.Errorf("Get = %+v, want none: the relist found the object it wrote gone", got)
		}
		// A late response of a write of that object is not kept either.
		s.wrote(withUID(cachedAt(t, "n", "10", "u").Record.withVersion("10"), "rec-1"))
		if got, _ := s.Get("n"); got != nil {
			t.Errorf("Get after a late write of the deleted object = %+v, want none", got)
		}
	})
	t.Run("a relist's deletion of an earlier object", func(t *testing.T) {
		// The record was deleted by hand and created again (a new
		// object, at 12) before the relist that finds the first gone
		// ran.
		s := storeWith(t)
		s.wrote(withUID(cachedAt(t, "n", "12", "again").Record.withVersion("12"), "rec-2"))
		s.deleted(cache.DeletedFinalStateUnknown{Key: "n", Obj: withUIDCached(cachedAt(t, "n", "8", "first"), "rec-1")})
		if got, _ := s.Get("n"); got == nil || got.Spec.NodeUID != "again" {
			t.Errorf("Get = %+v, want the record created again (its create would be answered AlreadyExists)", got)
		}
	})
}

// BenchmarkOwnerBesideOwnWrites: a claim's owner looked up while 500 of
// the store's own writes wait for the informer, beside 500 records the
// cache holds: far more than a join storm leaves waiting (the informer
// drops each as it delivers it), and a lookup indexes each of them.
func BenchmarkOwnerBesideOwnWrites(b *testing.B) {
	var cachedObjs []*Cached
	for i := range 500 {
		cachedObjs = append(cachedObjs, cachedAt(b, fmt.Sprintf("c%d", i), "5", "u", fmt.Sprintf("10.1.%d.%d", i/250, i%250+1)))
	}
	s := storeWith(b, cachedObjs...)
	for i := range 500 {
		s.keep(cachedAt(b, fmt.Sprintf("w%d", i), "9", "u", fmt.Sprintf("10.2.%d.%d", i/250, i%250+1), fmt.Sprintf("fd00::%x", i+1)).Record.withVersion("9"))
	}
	ip := netip.MustParseAddr("10.2.1.7")
	b.ReportAllocs()
	for b.Loop() {
		if s.Owner(ip) != "w256" {
			b.Fatal("wrong owner")
		}
	}
}

// A certificate's DNS names are found by whoever asks, whatever the case
// of the name or of its "dns:" prefix (an admin's edit may carry "DNS:"),
// in the cache and among the store's own writes alike: the index and the
// readers match them by one rule (servingDNS).
func TestServingNamesWhateverTheirCase(t *testing.T) {
	withSANs := func(name, rv string, sans ...string) *Cached {
		c := cachedAt(t, name, rv, "u")
		c.Record.Spec.Serving = &Serving{CSR: "csr-" + name, SANs: sans, ValidUntil: time.Now().Add(time.Hour)}
		return withKeys(c) // its keys again, with the names
	}
	s := &Store{}
	s.informer = cache.NewSharedIndexInformer(nil, &Cached{}, 0, s.indexers())
	s.own = overlay(s.informer.GetIndexer())
	if err := s.informer.GetIndexer().Add(withSANs("cached", "5", "DNS:Web.Example.COM")); err != nil {
		t.Fatal(err)
	}
	s.keep(withSANs("written", "9", "Dns:WEB.example.com").Record.withVersion("9"))
	if got := s.ServingHolders("web.EXAMPLE.com"); !slices.Equal(got, []string{"cached", "written"}) {
		t.Errorf("ServingHolders = %v, want [cached written]", got)
	}
	if !(&Serving{SANs: []string{"DNS:Web.Example.COM"}}).NamesDNS("web.example.com") {
		t.Error("NamesDNS missed a name in another case")
	}
	if (&Serving{SANs: []string{"ip:10.0.0.1", "dns:web.example.com.evil"}}).NamesDNS("web.example.com") {
		t.Error("NamesDNS matched another name")
	}
}

// The store's two sides as the tests drive them: Put's record of its own
// write, and the informer's handlers.
func (s *Store) wrote(r *Record) {
	s.own.Mutation(withKeys(&Cached{ObjectMeta: metav1.ObjectMeta{Name: r.Name, ResourceVersion: r.ResourceVersion, UID: r.UID}, Record: r}))
}

func (s *Store) keep(r *Record) { s.wrote(r) }

func (s *Store) caughtUp(obj any) { s.own.OnAddOrUpdate(obj.(*Cached)) }

func (s *Store) deleted(obj any) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	s.own.OnDelete(obj.(*Cached))
}
