package records

import (
	"testing"
	"time"

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
			inner := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
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
			s := &Store{written: map[string]*Record{}, informer: informerAt{idx: idx}}
			mine := &Record{Name: "n", ResourceVersion: "9", Spec: Spec{NodeUID: "new"}}
			s.written["n"] = mine // as Put leaves it

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
