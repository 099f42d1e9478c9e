package controller

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
)

// scripted is a ListerWatcher that answers with what a test gives it.
type scripted struct {
	list  *corev1.NodeList
	watch *watch.FakeWatcher
}

func (s *scripted) ListWithContext(context.Context, metav1.ListOptions) (runtime.Object, error) {
	return s.list, nil
}

func (s *scripted) WatchWithContext(context.Context, metav1.ListOptions) (watch.Interface, error) {
	return s.watch, nil
}

func nodeAt(name, rv string) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, ResourceVersion: rv}}
}

// A list, plain or streamed, notes what it returns that the store does
// not hold already; take hands each noted version out once; the watch's
// own events are never taken for a list's.
func TestListOrderNotesWhatListsDeliver(t *testing.T) {
	store := cache.NewStore(cache.MetaNamespaceKeyFunc)
	_ = store.Add(nodeAt("same", "5"))
	_ = store.Add(nodeAt("changed", "5"))
	lw := &scripted{list: &corev1.NodeList{Items: []corev1.Node{*nodeAt("same", "5"), *nodeAt("changed", "9"), *nodeAt("new", "8")}}}
	var handed []string
	l := newListOrder(lw, func(obj runtime.Object, list uint32) {
		handed = append(handed, fmt.Sprintf("%s@%d", obj.(*corev1.Node).Name, list))
	})
	l.storeOf(store)

	if _, err := l.List(metav1.ListOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, rv string
		want     uint32
	}{
		{"same", "5", 0},    // unchanged: the informer hands it to no handler
		{"changed", "8", 0}, // another version than the list's
		{"changed", "9", 1},
		{"changed", "9", 0}, // taken once
		{"new", "8", 1},
	} {
		if got := l.take(tc.name, tc.rv); got != tc.want {
			t.Errorf("take(%s, %s) = %d, want %d", tc.name, tc.rv, got, tc.want)
		}
	}

	// A watch without initial events is the watch: nothing is noted.
	lw.watch = watch.NewFakeWithChanSize(4, false)
	w, err := l.Watch(metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if w != lw.watch {
		t.Error("a plain watch was wrapped")
	}

	// A streamed list: its initial events, up to the bookmark that ends
	// them, are list 2's; what follows is the watch's.
	lw.watch = watch.NewFakeWithChanSize(8, false)
	w, err = l.Watch(metav1.ListOptions{SendInitialEvents: ptr.To(true)})
	if err != nil {
		t.Fatal(err)
	}
	end := nodeAt("", "12")
	end.Annotations = map[string]string{metav1.InitialEventsAnnotationKey: "true"}
	lw.watch.Add(nodeAt("streamed", "10"))
	lw.watch.Add(nodeAt("same", "5"))
	lw.watch.Action(watch.Bookmark, end)
	lw.watch.Add(nodeAt("after", "13"))
	for range 4 {
		select {
		case <-w.ResultChan():
		case <-time.After(5 * time.Second):
			t.Fatal("the streamed list's events were not passed on")
		}
	}
	for _, tc := range []struct {
		name, rv string
		want     uint32
	}{
		{"streamed", "10", 2},
		{"same", "5", 0},
		{"after", "13", 0},
	} {
		if got := l.take(tc.name, tc.rv); got != tc.want {
			t.Errorf("take(%s, %s) = %d, want %d", tc.name, tc.rv, got, tc.want)
		}
	}

	// Stop ends the pass-through even with an event nobody reads.
	lw.watch.Add(nodeAt("unread", "14"))
	w.Stop()
	select {
	case _, ok := <-w.ResultChan():
		for ok {
			_, ok = <-w.ResultChan()
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the watch did not close after Stop")
	}

	if want := []string{"changed@1", "new@1", "streamed@2"}; !slices.Equal(handed, want) {
		t.Errorf("told of %v, want %v", handed, want)
	}
	l.forget("new")
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.items) != 0 {
		t.Errorf("%d entries left after every listed version was taken or forgotten: %v", len(l.items), l.items)
	}
}
