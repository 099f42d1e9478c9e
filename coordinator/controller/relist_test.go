package controller_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
)

// TestListersOfARelistAreContested: two Nodes that begin to list one
// address while the coordinator's watch of Nodes is cut, and that it then
// learns of from the list it makes when the watch cannot resume, hold the
// address against each other: the list's order (by name) says nothing
// about which began first.
//
// The API server is real. What the test stands in for is the cause of the
// gap and the API server's 410 at its end: a transport wrapper cuts the
// coordinator's Node watch and answers its next one with "too old resource
// version", as an API server does once the watch cache has moved past the
// coordinator's resource version (after a restart, or a long partition).
// The coordinator's informer then lists again, from the real API server.
func TestListersOfARelistAreContested(t *testing.T) {
	gap, _ := leadingBehindAGap(t, "relist", ipamSettings)

	gap.cut()
	gap.saw("the gap's writes begin")
	a := register(t, "relist-a", "10.0.5.61")
	// Nodes that sort between the two, so that the informer hands over
	// many others between them while the workers run: the first must not
	// be decided before the last is known.
	for i := range 60 {
		fillerNode(t, fmt.Sprintf("relist-m-%02d", i), fmt.Sprintf("10.0.9.%d", i+1))
	}
	b := register(t, "relist-z", "10.0.5.62")
	for _, n := range []*simNode{a, b} {
		n.publish(t, report{providerID: "talos://metal/" + n.ip.String(), externalIPs: []string{"10.0.5.63"}})
	}
	gap.saw("the gap's writes end")
	gap.end()

	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the coordinator's requests for Nodes, and the gap:\n%s", gap.requests())
		}
	})
	for self, other := range map[string]string{"relist-a": "relist-z", "relist-z": "relist-a"} {
		eventSays(t, 20*time.Second, self, "AddressHeldByOtherNode", "10.0.5.63: Node "+other)
		waitFor(t, 20*time.Second, self+" initialized", func() bool { return initialized(get(t, self)) })
		if claims := recordedClaims(t, self); slices.Contains(claims, "10.0.5.63") {
			t.Errorf("%s's record claims the contested address: %v", self, claims)
		}
	}
	if !gap.relisted() {
		t.Error("the coordinator never listed Nodes again after the gap: the test cut nothing")
	}
}

// fillerNode is a Node that lists an address and nothing more, deleted
// after the test.
func fillerNode(t *testing.T, name, ip string) {
	t.Helper()
	n, err := admin().CoreV1().Nodes().Create(t.Context(), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = admin().CoreV1().Nodes().Delete(context.Background(), name, metav1.DeleteOptions{}) })
	n.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: ip}}
	if _, err := admin().CoreV1().Nodes().UpdateStatus(t.Context(), n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// nodeWatchGap cuts the Node watches made through its transport and, until
// end, holds any new one; at the end it answers the held ones with 410
// Expired. Other requests pass untouched.
type nodeWatchGap struct {
	mu      sync.Mutex
	open    []io.Closer
	gapping bool
	ended   chan struct{}
	lists   int      // Node watches asking for initial events (lists) after the gap
	seen    []string // the Node requests, for a failure's message
}

func (g *nodeWatchGap) saw(format string, args ...any) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.seen = append(g.seen, time.Now().Format("15:04:05.000 ")+fmt.Sprintf(format, args...))
}

func (g *nodeWatchGap) requests() string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return strings.Join(g.seen, "\n")
}

func newNodeWatchGap() *nodeWatchGap { return &nodeWatchGap{ended: make(chan struct{})} }

// leadingBehindAGap starts a coordinator whose Node watches go through a
// nodeWatchGap, and returns the gap once it leads and watches Nodes.
func leadingBehindAGap(t *testing.T, id, settings string) (*nodeWatchGap, *running) {
	t.Helper()
	gap := newNodeWatchGap()
	cfg := rest.CopyConfig(coordinatorIdentity(t))
	cfg.Wrap(gap.wrap)
	c := startCoordinatorAs(t, id, settings, cfg)
	waitFor(t, 20*time.Second, "leading", func() bool { return c.Ready() == nil })
	waitFor(t, 10*time.Second, "the coordinator watching Nodes", gap.watching)
	return gap, c
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func (g *nodeWatchGap) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripFunc(func(req *http.Request) (*http.Response, error) {
		q := req.URL.Query()
		if req.URL.Path == "/api/v1/nodes" {
			g.saw("%s %s", req.Method, req.URL.RawQuery)
		}
		if req.URL.Path != "/api/v1/nodes" || q.Get("watch") != "true" && q.Get("watch") != "1" {
			if req.URL.Path == "/api/v1/nodes" && g.afterGap() {
				g.mu.Lock()
				g.lists++
				g.mu.Unlock()
			}
			return rt.RoundTrip(req)
		}
		g.mu.Lock()
		gapping := g.gapping
		g.mu.Unlock()
		if gapping {
			select {
			case <-g.ended:
			case <-req.Context().Done():
				return nil, req.Context().Err()
			}
			if q.Get("sendInitialEvents") != "true" {
				g.saw("answered 410")
				return expired(req), nil
			}
		}
		if g.afterGap() && q.Get("sendInitialEvents") == "true" {
			g.mu.Lock()
			g.lists++
			g.mu.Unlock()
		}
		resp, err := rt.RoundTrip(req)
		if err != nil {
			return nil, err
		}
		g.mu.Lock()
		if g.gapping {
			resp.Body.Close() // began before the cut: cut it too
		} else {
			g.open = append(g.open, resp.Body)
		}
		g.mu.Unlock()
		return resp, nil
	})
}

func (g *nodeWatchGap) afterGap() bool {
	select {
	case <-g.ended:
		return true
	default:
		return false
	}
}

func (g *nodeWatchGap) watching() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.open) > 0
}

// cut closes the Node watches in flight and holds the next ones.
func (g *nodeWatchGap) cut() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.gapping = true
	for _, c := range g.open {
		c.Close()
	}
	g.seen = append(g.seen, time.Now().Format("15:04:05.000 ")+fmt.Sprintf("cut %d watches", len(g.open)))
	g.open = nil
}

func (g *nodeWatchGap) end() {
	time.Sleep(200 * time.Millisecond) // the writes of the gap reach the API server's watch cache
	g.mu.Lock()
	g.gapping = false
	g.mu.Unlock()
	close(g.ended)
}

func (g *nodeWatchGap) relisted() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.lists > 0
}

// expired is the API server's answer to a watch from a resource version
// its watch cache no longer holds.
func expired(req *http.Request) *http.Response {
	body := `{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"too old resource version: the test's watch gap","reason":"Expired","code":410}`
	return &http.Response{StatusCode: http.StatusGone, Status: "410 Gone", Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: http.Header{"Content-Type": []string{"application/json"}}, Body: io.NopCloser(strings.NewReader(body)), ContentLength: int64(len(body)), Request: req}
}
