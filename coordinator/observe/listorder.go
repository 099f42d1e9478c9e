package observe

import (
	"context"
	"slices"
	"sync"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
)

// ListOrder tells which of the Node informer's events come from a list rather than its watch:
// a watch delivers changes in commit order; a list (the first, or a relist after a gap such as
// an API server restart) in an order that says nothing about who listed an address first.
//
// One list is every page of a paginated LIST, or a watch-list stream's initial events up to
// their bookmark. It wraps the informer's ListerWatcher and notes each object a list returns,
// unless the store holds that version already or the watch delivered it (then it is the
// watch's, even if handed over after the list). The handler asks which list returned an
// object (Take). A list that never completes is dropped when the next begins: none is handed over.
type ListOrder struct {
	inner cache.ListerWatcherWithContext
	// stored is the version the informer's store holds of a Node ("": none); nil until StoreOf.
	stored func(name string) string
	// listed is told of each object noted, before the informer hands over any of its list (the
	// observer's Pend); dropped, of each list that never completed.
	listed  func(obj runtime.Object, list uint32)
	dropped func(list uint32)

	mu      sync.Mutex
	lists   uint32                 // lists begun so far; the first is 1
	open    uint32                 // the list being read (0: none)
	first   uint32                 // the first list that completed: the informer's first
	items   map[string][]fromList  // Node name → versions lists returned, until handed over
	watched map[string]seenVersion // Node name → the version the watch last delivered, until handed over
}

type seenVersion struct {
	uid types.UID
	rv  string
}

type fromList struct {
	uid  types.UID
	rv   string
	list uint32
}

// NewListOrder wraps inner; listed and dropped are told of each list's objects and of lists never
// completed (the Observer's Pend and DropList).
func NewListOrder(inner cache.ListerWatcherWithContext, listed func(runtime.Object, uint32), dropped func(uint32)) *ListOrder {
	return &ListOrder{inner: inner, listed: listed, dropped: dropped, items: map[string][]fromList{}, watched: map[string]seenVersion{}}
}

// StoreOf makes stored read the informer's store.
func (l *ListOrder) StoreOf(s cache.Store) {
	l.stored = func(name string) string {
		obj, ok, _ := s.GetByKey(name)
		if !ok {
			return ""
		}
		m, err := meta.Accessor(obj)
		if err != nil {
			return ""
		}
		return m.GetResourceVersion()
	}
}

// begin starts a list, dropping the one still open (it never completed).
func (l *ListOrder) begin() uint32 {
	l.mu.Lock()
	incomplete := l.open
	if incomplete != 0 {
		for name, its := range l.items {
			if its = slices.DeleteFunc(its, func(f fromList) bool { return f.list == incomplete }); len(its) == 0 {
				delete(l.items, name)
			} else {
				l.items[name] = its
			}
		}
	}
	l.lists++
	l.open = l.lists
	list := l.lists
	l.mu.Unlock()
	if incomplete != 0 && l.dropped != nil {
		l.dropped(incomplete)
	}
	return list
}

// current is the list being read, or a new one when none is.
func (l *ListOrder) current() uint32 {
	l.mu.Lock()
	list := l.open
	l.mu.Unlock()
	if list == 0 {
		return l.begin()
	}
	return list
}

func (l *ListOrder) complete(list uint32) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.open == list {
		l.open = 0
		if l.first == 0 {
			l.first = list
		}
	}
}

// FirstList is the list that populated the informer (1 until one has).
func (l *ListOrder) FirstList() uint32 {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.first == 0 {
		return 1
	}
	return l.first
}

// note notes what list returned and tells the observer, under l.mu; a version the store holds
// or the watch delivered is not the list's, nor is anything of a list no longer open.
func (l *ListOrder) note(list uint32, obj runtime.Object) {
	m, err := meta.Accessor(obj)
	if err != nil {
		return
	}
	name, rv := m.GetName(), m.GetResourceVersion()
	l.mu.Lock()
	defer l.mu.Unlock()
	if list != l.open || l.stored != nil && l.stored(name) == rv || l.watched[name] == (seenVersion{m.GetUID(), rv}) {
		return
	}
	l.items[name] = append(l.items[name], fromList{uid: m.GetUID(), rv: rv, list: list})
	if l.listed != nil {
		l.listed(obj, list)
	}
}

// sawWatch notes a version the watch delivers (or, !delivered, takes the
// note back: the watch stopped before the informer read it).
func (l *ListOrder) sawWatch(obj runtime.Object, delivered bool) {
	m, err := meta.Accessor(obj)
	if err != nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	switch v := (seenVersion{m.GetUID(), m.GetResourceVersion()}); {
	case delivered:
		l.watched[m.GetName()] = v
	case l.watched[m.GetName()] == v:
		delete(l.watched, m.GetName())
	}
}

// Take says which list returned this version of the Node (0: the watch did), and forgets it.
func (l *ListOrder) Take(name, rv string) uint32 {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.watched[name].rv == rv {
		delete(l.watched, name)
		return 0
	}
	// The first list that returned this version (two may have).
	var list uint32
	its := slices.DeleteFunc(l.items[name], func(f fromList) bool {
		if f.rv != rv {
			return false
		}
		if list == 0 || f.list < list {
			list = f.list
		}
		return true
	})
	if len(its) == 0 {
		delete(l.items, name)
	} else {
		l.items[name] = its
	}
	return list
}

// Forget drops what was noted of a deleted Node object (uid; "": whichever), not a later one's.
func (l *ListOrder) Forget(name string, uid types.UID) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if uid == "" || l.watched[name].uid == uid {
		delete(l.watched, name)
	}
	if its := slices.DeleteFunc(l.items[name], func(f fromList) bool { return uid == "" || f.uid == uid }); len(its) == 0 {
		delete(l.items, name)
	} else {
		l.items[name] = its
	}
}

func (l *ListOrder) ListWithContext(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
	obj, err := l.inner.ListWithContext(ctx, opts)
	if err != nil {
		return obj, err
	}
	// A page after the first carries a continue token: the same list.
	var list uint32
	if opts.Continue == "" {
		list = l.begin()
	} else {
		list = l.current()
	}
	_ = meta.EachListItem(obj, func(o runtime.Object) error { l.note(list, o); return nil })
	if m, err := meta.ListAccessor(obj); err == nil && m.GetContinue() == "" {
		l.complete(list)
	}
	return obj, nil
}

func (l *ListOrder) WatchWithContext(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	w, err := l.inner.WatchWithContext(ctx, opts)
	if err != nil {
		return w, err
	}
	var list uint32
	if opts.SendInitialEvents != nil && *opts.SendInitialEvents {
		list = l.begin()
	}
	return l.noting(w, list), nil
}

// List and Watch complete the ListerWatcher the informer takes; it calls the context methods.
func (l *ListOrder) List(opts metav1.ListOptions) (runtime.Object, error) {
	return l.ListWithContext(context.Background(), opts)
}

func (l *ListOrder) Watch(opts metav1.ListOptions) (watch.Interface, error) {
	return l.WatchWithContext(context.Background(), opts)
}

// IsWatchListSemanticsUnSupported passes on the wrapped ListerWatcher's answer to client-go.
func (l *ListOrder) IsWatchListSemanticsUnSupported() bool {
	u, ok := l.inner.(interface{ IsWatchListSemanticsUnSupported() bool })
	return ok && u.IsWatchListSemanticsUnSupported()
}

// noting passes w's events on: a stream's initial events (list is not 0) as list's until their
// bookmark, the rest as the watch's. It stops at Stop without waiting for a reader.
func (l *ListOrder) noting(w watch.Interface, list uint32) watch.Interface {
	n := &notingWatch{in: w, out: make(chan watch.Event), done: make(chan struct{})}
	go func() {
		defer close(n.out)
		initial := list != 0
		for {
			select {
			case <-n.done:
				return
			case e, ok := <-w.ResultChan():
				if !ok {
					return
				}
				switch {
				case initial && (e.Type == watch.Added || e.Type == watch.Modified):
					l.note(list, e.Object)
				case initial && e.Type == watch.Bookmark:
					if m, err := meta.Accessor(e.Object); err == nil && m.GetAnnotations()[metav1.InitialEventsAnnotationKey] == "true" {
						initial = false
						l.complete(list)
					}
				case !initial && (e.Type == watch.Added || e.Type == watch.Modified):
					l.sawWatch(e.Object, true)
				}
				select {
				case n.out <- e:
				case <-n.done:
					if !initial && (e.Type == watch.Added || e.Type == watch.Modified) {
						l.sawWatch(e.Object, false) // never delivered
					}
					return
				}
			}
		}
	}()
	return n
}

type notingWatch struct {
	in   watch.Interface
	out  chan watch.Event
	done chan struct{}
	once sync.Once
}

func (n *notingWatch) ResultChan() <-chan watch.Event { return n.out }

func (n *notingWatch) Stop() {
	n.once.Do(func() {
		close(n.done)
		n.in.Stop()
	})
}
