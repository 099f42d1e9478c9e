package main

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
)

// overlapWatch is an admin watch on every Node: each update's pod CIDRs are
// checked against every other Node's, so an overlap that exists for one
// moment (and is repaired later) is still caught.
type overlapWatch struct {
	mu         sync.Mutex
	cidrs      map[string][]netip.Prefix
	violations []string
}

func watchOverlaps(t *testing.T) *overlapWatch {
	t.Helper()
	w := &overlapWatch{cidrs: map[string][]netip.Prefix{}}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	list, err := shared.admin.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range list.Items {
		w.see(&list.Items[i])
	}
	watcher, err := shared.admin.CoreV1().Nodes().Watch(ctx, metav1.ListOptions{ResourceVersion: list.ResourceVersion})
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		for ev := range watcher.ResultChan() {
			node, ok := ev.Object.(*corev1.Node)
			if !ok {
				continue
			}
			if ev.Type == watch.Deleted {
				w.mu.Lock()
				delete(w.cidrs, node.Name)
				w.mu.Unlock()
				continue
			}
			w.see(node)
		}
	}()
	return w
}

func (w *overlapWatch) see(node *corev1.Node) {
	var mine []netip.Prefix
	for _, s := range node.Spec.PodCIDRs {
		if p, err := netip.ParsePrefix(s); err == nil {
			mine = append(mine, p)
		}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.cidrs[node.Name] = mine
	for other, theirs := range w.cidrs {
		if other == node.Name {
			continue
		}
		for _, a := range mine {
			for _, b := range theirs {
				if a.Overlaps(b) {
					w.violations = append(w.violations, fmt.Sprintf("%s %s overlaps %s %s", node.Name, a, other, b))
				}
			}
		}
	}
}

func (w *overlapWatch) check(t *testing.T) {
	t.Helper()
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, v := range w.violations {
		t.Error("pod CIDRs overlapped:", v)
	}
}

// handoffRounds is how many graceful handoffs and how many kill -9s run,
// each during its own storm (HANDOFF_ROUNDS, default 2 of each).
func handoffRounds() int {
	if n, err := strconv.Atoi(os.Getenv("HANDOFF_ROUNDS")); err == nil && n > 0 {
		return n
	}
	return 2
}

// Leader handoffs during 500-node join storms, several in a row: a graceful
// one (SIGTERM, as a rolling update does) and a kill -9, alternately. An
// admin watch sees every Node update and asserts that no two Nodes ever
// hold overlapping pod CIDRs; every node must finish.
func TestHandoffsDuringStorms(t *testing.T) {
	overlaps := watchOverlaps(t)
	a := coordinatorFor(t, "handoff-a", fastLease...)
	waitLeading(t, a)
	b := coordinatorFor(t, "handoff-b", fastLease...)
	const n = 500
	for round := range 2 * handoffRounds() {
		graceful := round%2 == 0
		nodes := nodesFor(t, fmt.Sprintf("handoff%d", round), 5000+round*n, n)
		var leader *supervised
		eventually(t, 30*time.Second, "a leader", func() bool {
			switch shared.holder(t.Context()) {
			case a.id:
				leader = a
			case b.id:
				leader = b
			}
			return leader != nil
		})
		storm := make(chan error, 1)
		go func() { storm <- shared.storm(t.Context(), nodes) }()
		underWay(t, nodes)
		at := time.Now()
		how := "kill -9"
		if graceful {
			how = "SIGTERM"
			leader.current().stop()
		} else {
			leader.current().kill()
		}
		if err := <-storm; err != nil {
			t.Fatal(err)
		}
		converge(t, nodes, 4*time.Minute)
		t.Logf("round %d: %s of leader %s during a %d-node storm; every node initialized %v and certified %v after it",
			round+1, how, leader.id, n, sinceOrZero(lastInitialized(nodes), at), sinceOrZero(lastCertified(nodes), at))
		overlaps.check(t)
		if t.Failed() {
			return
		}
	}
}
