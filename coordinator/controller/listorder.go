package controller

import (
	"context"
	"sync"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
)

// listOrder tells which of the Node informer's events come from a list
// rather than from its watch. A watch delivers changes in the order the API
// server committed them; a list (the informer's first, or the one it makes
// when a watch cannot resume after a gap: an API server restart, a
// partition) delivers what changed meanwhile in the list's order, by name,
// which says nothing about which Node began to list an address first.
//
// It wraps the informer's ListerWatcher and notes the resource version of
// each object a list returns: a plain list, or the initial events of a
// watch-list stream (client-go's WatchListClient) up to the bookmark that
// ends them. The handler then asks which list, if any, delivered the object
// it got (take). An object a list returns unchanged from the informer's
// store is not noted: the informer hands it to no handler.
type listOrder struct {
	inner cache.ListerWatcherWithContext
	// stored is the resource version the informer's store holds for a
	// Node ("" when none); set once the informer exists.
	stored func(name string) string
	// listed is told of each object noted, when noted: before the informer
	// hands over any object of that list (the observer's pend).
	listed func(obj runtime.Object, list uint32)

	mu    sync.Mutex
	lists uint32              // lists begun so far; the first is 1
	items map[string]fromList // Node name → what a list returned, until delivered
}

type fromList struct {
	rv   string
	list uint32
}

func newListOrder(inner cache.ListerWatcherWithContext, listed func(runtime.Object, uint32)) *listOrder {
	return &listOrder{inner: inner, listed: listed, items: map[string]fromList{}}
}

// storeOf makes stored read the informer's store.
func (l *listOrder) storeOf(s cache.Store) {
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

func (l *listOrder) begin() uint32 {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lists++
	return l.lists
}

func (l *listOrder) note(list uint32, obj runtime.Object) {
	m, err := meta.Accessor(obj)
	if err != nil {
		return
	}
	name, rv := m.GetName(), m.GetResourceVersion()
	if l.stored != nil && l.stored(name) == rv {
		return
	}
	l.mu.Lock()
	l.items[name] = fromList{rv: rv, list: list}
	l.mu.Unlock()
	if l.listed != nil {
		l.listed(obj, list)
	}
}

// take says which list delivered this version of the Node (0: the watch),
// and forgets it.
func (l *listOrder) take(name, rv string) uint32 {
	l.mu.Lock()
	defer l.mu.Unlock()
	it, ok := l.items[name]
	if !ok || it.rv != rv {
		return 0
	}
	delete(l.items, name)
	return it.list
}

// forget drops what a list noted for a deleted Node.
func (l *listOrder) forget(name string) {
	l.mu.Lock()
	delete(l.items, name)
	l.mu.Unlock()
}

func (l *listOrder) ListWithContext(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
	obj, err := l.inner.ListWithContext(ctx, opts)
	if err != nil {
		return obj, err
	}
	list := l.begin()
	_ = meta.EachListItem(obj, func(o runtime.Object) error { l.note(list, o); return nil })
	return obj, nil
}

func (l *listOrder) WatchWithContext(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	w, err := l.inner.WatchWithContext(ctx, opts)
	if err != nil || opts.SendInitialEvents == nil || !*opts.SendInitialEvents {
		return w, err
	}
	return l.noting(w, l.begin()), nil
}

// List and Watch are the ListerWatcher the informer takes; it calls the
// methods with a context.
func (l *listOrder) List(opts metav1.ListOptions) (runtime.Object, error) {
	return l.ListWithContext(context.Background(), opts)
}

func (l *listOrder) Watch(opts metav1.ListOptions) (watch.Interface, error) {
	return l.WatchWithContext(context.Background(), opts)
}

// IsWatchListSemanticsUnSupported passes on what the wrapped ListerWatcher
// says (client-go asks before it streams a list).
func (l *listOrder) IsWatchListSemanticsUnSupported() bool {
	u, ok := l.inner.(interface{ IsWatchListSemanticsUnSupported() bool })
	return ok && u.IsWatchListSemanticsUnSupported()
}

// noting passes w's events on, noting the objects of its initial events.
// It stops at Stop without waiting for a reader.
func (l *listOrder) noting(w watch.Interface, list uint32) watch.Interface {
	n := &notingWatch{in: w, out: make(chan watch.Event), done: make(chan struct{})}
	go func() {
		defer close(n.out)
		initial := true
		for {
			select {
			case <-n.done:
				return
			case e, ok := <-w.ResultChan():
				if !ok {
					return
				}
				if initial {
					switch e.Type {
					case watch.Added:
						l.note(list, e.Object)
					case watch.Bookmark:
						if m, err := meta.Accessor(e.Object); err == nil && m.GetAnnotations()[metav1.InitialEventsAnnotationKey] == "true" {
							initial = false
						}
					default:
						initial = false
					}
				}
				select {
				case n.out <- e:
				case <-n.done:
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
