package controller

import (
	"log/slog"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"github.com/talos-nodeinit/talos-nodeinit/pkg/kubecreds"
)

// The agent reads its own writes: a Node a patch returned is what the next
// sync sees until the watch delivers it or something newer, so it never
// sends the same patch twice; a Node the watch says is gone stays gone.
func TestReadsItsOwnWrites(t *testing.T) {
	n := newNodeInformer(&cache.ListWatch{}, "self", func() {}) // never run: the store is filled by hand
	node := func(rv, zone string) *corev1.Node {
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "self", ResourceVersion: rv, Labels: map[string]string{"zone": zone}}}
	}
	store := n.inf.GetStore()
	if err := store.Add(node("10", "watched")); err != nil {
		t.Fatal(err)
	}
	n.wrote(node("12", "patched"))
	if got := n.get(); got == nil || got.Labels["zone"] != "patched" {
		t.Fatalf("after a patch the watch has not delivered: %+v, want the patch's response", got)
	}
	if err := store.Update(node("13", "watched later")); err != nil {
		t.Fatal(err)
	}
	if got := n.get(); got == nil || got.Labels["zone"] != "watched later" {
		t.Fatalf("after a newer watch event: %+v, want the watched Node", got)
	}
	n.wrote(node("11", "stale response"))
	if got := n.get(); got == nil || got.Labels["zone"] != "watched later" {
		t.Fatalf("an older patch response won over the watch: %+v", got)
	}
	if err := store.Delete(node("13", "")); err != nil {
		t.Fatal(err)
	}
	n.wrote(node("14", "patched before the delete reached us"))
	if got := n.get(); got != nil {
		t.Fatalf("a deleted Node came back from a patch response: %+v", got)
	}
}

// Its own writes outlive a restarted watch (new credentials, or the safety
// net's restart). client-go starts a watch with a streaming list, which
// the API server answers at least as fresh as etcd; where it falls back
// to a plain list (an API server that refuses streaming lists), it lists
// at resourceVersion 0, from the API server's watch cache, which may be
// older than the agent's last patch, and a sync reading that list would
// send the patch's removals again, over whatever someone set since. The
// stand-in list here is such a stale answer; a real API server gives one
// only while its watch cache lags, which a test cannot bring about at will.
func TestOwnWritesOutliveARestartedWatch(t *testing.T) {
	node := func(rv, zone string) *corev1.Node {
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "self", ResourceVersion: rv, Labels: map[string]string{"zone": zone}}}
	}
	a := &Agent{nodeName: "self"}
	a.adopt(newNodeInformer(&cache.ListWatch{}, "self", func() {}))
	if err := a.informer.inf.GetStore().Add(node("10", "watched")); err != nil {
		t.Fatal(err)
	}
	a.wrote(node("12", "patched"))

	// The watch restarts; its first list is older than the patch.
	a.informer = nil
	a.adopt(newNodeInformer(&cache.ListWatch{}, "self", func() {}))
	if err := a.informer.inf.GetStore().Add(node("10", "watched")); err != nil {
		t.Fatal(err)
	}
	if got := a.informer.get(); got == nil || got.Labels["zone"] != "patched" {
		t.Fatalf("after the watch restarted with a stale list: %+v, want the patch's response", got)
	}
	// Anything newer the new watch delivers wins, as before.
	if err := a.informer.inf.GetStore().Update(node("13", "watched later")); err != nil {
		t.Fatal(err)
	}
	if got := a.informer.get(); got == nil || got.Labels["zone"] != "watched later" {
		t.Fatalf("after a newer watch event: %+v, want the watched Node", got)
	}
}

// New credentials for the same API server keep the last patch for the next
// watch; credentials for another API server (another cluster, or one whose
// resource versions start over) do not: that patch's version says nothing
// there, and kept, it would read as newer than every Node listed.
func TestOwnWritesStayWithTheirAPIServer(t *testing.T) {
	a := &Agent{nodeName: "self", log: slog.New(slog.DiscardHandler)}
	creds := func(host string) kubecreds.Loaded {
		return kubecreds.Loaded{Config: &rest.Config{Host: host, TLSClientConfig: rest.TLSClientConfig{Insecure: true}}}
	}
	patched := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "self", ResourceVersion: "12", Labels: map[string]string{"zone": "patched"}}}
	a.useCredentials(creds("https://one.example:6443"))
	if a.client == nil {
		t.Fatal("no client from the credentials")
	}
	a.wrote(patched)
	a.useCredentials(creds("https://one.example:6443")) // a rotated client certificate
	if a.lastWrite != patched {
		t.Fatalf("new credentials for the same API server dropped the last patch")
	}
	a.useCredentials(creds("https://two.example:6443"))
	if a.lastWrite != nil {
		t.Fatalf("credentials for another API server kept the last patch: %+v", a.lastWrite)
	}
}
