package observe

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
)

// scripted is a ListerWatcher that answers with what a test gives it: the
// pages of a list (keyed by the continue token asked for), and a watch.
type scripted struct {
	pages map[string]*corev1.NodeList
	watch *watch.FakeWatcher
}

func (s *scripted) ListWithContext(_ context.Context, o metav1.ListOptions) (runtime.Object, error) {
	p, ok := s.pages[o.Continue]
	if !ok {
		return nil, fmt.Errorf("no page %q", o.Continue)
	}
	return p, nil
}

func (s *scripted) WatchWithContext(context.Context, metav1.ListOptions) (watch.Interface, error) {
	return s.watch, nil
}

func nodeAt(name, rv string) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, ResourceVersion: rv, UID: types.UID("uid-" + name)}}
}

func page(cont string, nodes ...*corev1.Node) *corev1.NodeList {
	l := &corev1.NodeList{ListMeta: metav1.ListMeta{Continue: cont}}
	for _, n := range nodes {
		l.Items = append(l.Items, *n)
	}
	return l
}

type takeCase struct {
	name, rv string
	want     uint32
}

func takeAll(t *testing.T, l *ListOrder, step string, cases []takeCase) {
	t.Helper()
	for _, tc := range cases {
		if got := l.Take(tc.name, tc.rv); got != tc.want {
			t.Errorf("%s: take(%s, %s) = %d, want %d", step, tc.name, tc.rv, got, tc.want)
		}
	}
}

// One informer list is one list, whatever its pages; what it returns that
// the store holds, or that the watch delivered, is not the list's; a list
// that never completes is dropped when the next begins; take hands each
// version out once.
func TestListOrderNotesWhatListsDeliver(t *testing.T) {
	store := cache.NewStore(cache.MetaNamespaceKeyFunc)
	_ = store.Add(nodeAt("same", "5"))
	_ = store.Add(nodeAt("changed", "5"))
	lw := &scripted{pages: map[string]*corev1.NodeList{
		"":   page("p2", nodeAt("same", "5"), nodeAt("changed", "9")),
		"p2": page("", nodeAt("new", "8")),
	}}
	var told []string
	var dropped []uint32
	l := NewListOrder(lw, func(obj runtime.Object, list uint32) {
		told = append(told, fmt.Sprintf("%s@%d", obj.(*corev1.Node).Name, list))
	}, func(list uint32) { dropped = append(dropped, list) })
	l.StoreOf(store)

	// Two pages, one list.
	for _, cont := range []string{"", "p2"} {
		if _, err := l.List(metav1.ListOptions{Continue: cont, Limit: 2}); err != nil {
			t.Fatal(err)
		}
	}
	if l.FirstList() != 1 {
		t.Errorf("the first list to complete is %d, want 1", l.FirstList())
	}
	takeAll(t, l, "a list of two pages", []takeCase{
		{"same", "5", 0},    // unchanged: the informer hands it to no handler
		{"changed", "8", 0}, // another version than the list's
		{"changed", "9", 1},
		{"changed", "9", 0}, // taken once
		{"new", "8", 1},     // the second page: the same list
	})

	// A list whose second page never comes is dropped by the next.
	lw.pages[""] = page("p2", nodeAt("lost", "20"))
	if _, err := l.List(metav1.ListOptions{Limit: 1}); err != nil {
		t.Fatal(err)
	}
	lw.pages[""] = page("", nodeAt("full", "21"))
	if _, err := l.List(metav1.ListOptions{}); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(dropped, []uint32{2}) {
		t.Errorf("dropped lists %v, want [2]", dropped)
	}
	takeAll(t, l, "after an incomplete list", []takeCase{{"lost", "20", 0}, {"full", "21", 3}})

	// The watch's versions are the watch's, even handed over after a list
	// returned them (its event was still queued in the informer).
	lw.watch = watch.NewFakeWithChanSize(4, false)
	w, err := l.Watch(metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	lw.watch.Modify(nodeAt("queued", "30"))
	<-w.ResultChan()
	lw.pages[""] = page("", nodeAt("queued", "30"), nodeAt("gap", "31"))
	if _, err := l.List(metav1.ListOptions{}); err != nil {
		t.Fatal(err)
	}
	takeAll(t, l, "a watch event handed over after the list", []takeCase{{"queued", "30", 0}, {"gap", "31", 4}})
	w.Stop()

	// A streamed list: its initial events, up to the bookmark that ends
	// them, are one list's; what follows is the watch's.
	lw.watch = watch.NewFakeWithChanSize(8, false)
	w, err = l.Watch(metav1.ListOptions{SendInitialEvents: ptr.To(true)})
	if err != nil {
		t.Fatal(err)
	}
	end := nodeAt("", "42")
	end.Annotations = map[string]string{metav1.InitialEventsAnnotationKey: "true"}
	lw.watch.Add(nodeAt("streamed", "40"))
	lw.watch.Add(nodeAt("same", "5"))
	lw.watch.Action(watch.Bookmark, end)
	lw.watch.Add(nodeAt("after", "43"))
	for range 4 {
		select {
		case <-w.ResultChan():
		case <-time.After(5 * time.Second):
			t.Fatal("the streamed list's events were not passed on")
		}
	}
	takeAll(t, l, "a streamed list", []takeCase{{"streamed", "40", 5}, {"same", "5", 0}, {"after", "43", 0}})

	// Stop ends the pass-through even with an event nobody reads; that
	// event was never delivered, so a list returning it notes it.
	watching := func(want bool) {
		t.Helper()
		for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
			l.mu.Lock()
			_, has := l.watched["unread"]
			l.mu.Unlock()
			if has == want {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("the pass-through's note of the unread event: %v, want %v", has, want)
			}
		}
	}
	lw.watch.Add(nodeAt("unread", "44"))
	watching(true) // the pass-through holds it, nobody reading
	w.Stop()
	watching(false) // taken back: never delivered
	for range w.ResultChan() {
	}
	lw.pages[""] = page("", nodeAt("unread", "44"))
	if _, err := l.List(metav1.ListOptions{}); err != nil {
		t.Fatal(err)
	}
	takeAll(t, l, "an event the watch never delivered", []takeCase{{"unread", "44", 6}})

	// A deleted object's versions go; a later object of the name keeps its.
	lw.pages[""] = page("", &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "again", ResourceVersion: "50", UID: "second"}})
	if _, err := l.List(metav1.ListOptions{}); err != nil {
		t.Fatal(err)
	}
	l.Forget("again", "first")
	takeAll(t, l, "a late delete of an earlier object", []takeCase{{"again", "50", 7}})

	// What a list no longer open returns (a stopped stream's pass-through,
	// late) is not noted; nor a version the watch delivered of the same
	// object, whatever a late delete of an earlier object says.
	l.note(7, nodeAt("late", "60"))
	lw.watch = watch.NewFakeWithChanSize(4, false)
	if w, err = l.Watch(metav1.ListOptions{}); err != nil {
		t.Fatal(err)
	}
	lw.watch.Modify(nodeAt("recreated", "61"))
	<-w.ResultChan()
	l.Forget("recreated", "an earlier object")
	lw.pages[""] = page("", nodeAt("recreated", "61"))
	if _, err := l.List(metav1.ListOptions{}); err != nil {
		t.Fatal(err)
	}
	w.Stop()
	takeAll(t, l, "late notes", []takeCase{{"late", "60", 0}, {"recreated", "61", 0}})

	if want := []string{"changed@1", "new@1", "lost@2", "full@3", "gap@4", "streamed@5", "unread@6", "again@7"}; !slices.Equal(told, want) {
		t.Errorf("told of %v, want %v", told, want)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.items) != 0 {
		t.Errorf("%d entries left after every listed version was taken or dropped: %v", len(l.items), l.items)
	}
}
