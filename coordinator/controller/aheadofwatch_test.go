package controller_test

import (
	"io"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
)

// TestAnOwnWriteAheadOfTheWatchClaimsNothing: the coordinator reads a Node
// through its own writes (the answer to its patch) before its watch of
// Nodes delivers them. Such an answer never lists an address the version
// the patch was computed from did not: every patch names that version
// (resourceVersion), so one computed before the Node listed a new address
// is refused. So a version read lists an address only once the informer's
// store has had a version of the Node listing it, and by then every Node
// that began to list it earlier is in the store too (the watch delivers in
// the order the API server committed): a Node that lists an address after
// another, unseen one is never recorded for it, however far the watch lags.
//
// The API server is real. What the test stands in for is the informer's
// lag, which a join storm makes seconds long: a transport wrapper holds
// the coordinator's Node watch (its reads wait) until the test lets go.
func TestAnOwnWriteAheadOfTheWatchClaimsNothing(t *testing.T) {
	hold := &nodeWatchHold{}
	cfg := rest.CopyConfig(coordinatorIdentity(t))
	cfg.Wrap(hold.wrap)
	c := startCoordinatorAs(t, "ahead", ipamSettings, cfg)
	t.Cleanup(hold.release)
	waitFor(t, 20*time.Second, "leading", func() bool { return c.Ready() == nil })
	const shared = "10.0.52.9"
	b := register(t, "ahead-b", "10.0.52.2")
	b.publish(t, report{providerID: "talos://metal/10.0.52.2"})
	waitFor(t, 20*time.Second, "ahead-b initialized", func() bool { return initialized(get(t, "ahead-b")) })

	hold.hold()
	// A read of the watch already waiting when the hold began returns the
	// next event: this one. The reads after it wait.
	fillerNode(t, "ahead-filler", "10.0.52.50")
	waitFor(t, 20*time.Second, "the coordinator's Node watch held", func() bool { return hold.held() > 0 })
	a := register(t, "ahead-a", "10.0.52.1")
	a.publish(t, report{providerID: "talos://metal/10.0.52.1", externalIPs: []string{shared}}) // first
	b.publish(t, report{providerID: "talos://metal/10.0.52.2", externalIPs: []string{shared}}) // then
	// A serving CSR of b's kubelet: the coordinator asks b's agent to
	// attest it, in a patch of b from the version its store holds, before
	// b listed the shared address. The API server refuses it (the patch
	// names the version it was computed from), so no answer listing the
	// address reaches the coordinator ahead of its watch; deleting the CSR
	// syncs b again.
	since := len(coordinatorWrites(t, "nodes", "ahead-b")) // every later one is computed from the held store
	b.csr(t, "ahead-b-serving", []string{"ahead-b"}, []string{"10.0.52.2"})
	waitFor(t, 20*time.Second, "the coordinator's patch of ahead-b from its lagging store", func() bool {
		return len(coordinatorWrites(t, "nodes", "ahead-b")) > since
	})
	// Every sync of ahead-b from here on, the one the refused patch's
	// retry makes and the one the CSR's deletion makes, reads the held
	// store: wait for one that begins after the deletion.
	if err := admin().CertificatesV1().CertificateSigningRequests().Delete(t.Context(), "ahead-b-serving", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	begun, _ := c.Syncs("ahead-b")
	waitFor(t, 20*time.Second, "a sync of ahead-b begun after the CSR's deletion", func() bool {
		_, finished := c.Syncs("ahead-b")
		return finished > begun
	})
	if slices.Contains(recordedClaims(t, "ahead-b"), shared) {
		t.Errorf("ahead-b's record claims %s while the coordinator's watch had not delivered ahead-a, which listed it first", shared)
	}
	for _, w := range coordinatorWrites(t, "nodes", "ahead-b")[since:] {
		if w.ResponseStatus.Code != http.StatusConflict {
			t.Errorf("the coordinator's patch of ahead-b from a version before it listed %s: answered %d, want 409", shared, w.ResponseStatus.Code)
		}
	}
	hold.release()

	waitFor(t, 20*time.Second, "ahead-a initialized", func() bool { return initialized(get(t, "ahead-a")) })
	waitFor(t, 20*time.Second, "ahead-a's record claiming "+shared, func() bool { return slices.Contains(recordedClaims(t, "ahead-a"), shared) })
	eventSays(t, 20*time.Second, "ahead-b", "AddressHeldByOtherNode", shared+": Node ahead-a")
	if claims := recordedClaims(t, "ahead-b"); slices.Contains(claims, shared) {
		t.Errorf("ahead-b's record claims %s, which ahead-a listed first: %v", shared, claims)
	}
}

// nodeWatchHold makes the reads of the Node watches made through its
// transport wait while it holds. Other requests pass untouched.
type nodeWatchHold struct {
	mu      sync.Mutex
	holding bool
	waits   int
	resume  chan struct{}
}

func (h *nodeWatchHold) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripFunc(func(req *http.Request) (*http.Response, error) {
		resp, err := rt.RoundTrip(req)
		q := req.URL.Query()
		if err != nil || req.URL.Path != "/api/v1/nodes" || q.Get("watch") != "true" && q.Get("watch") != "1" {
			return resp, err
		}
		resp.Body = heldBody{ReadCloser: resp.Body, h: h}
		return resp, nil
	})
}

type heldBody struct {
	io.ReadCloser
	h *nodeWatchHold
}

func (b heldBody) Read(p []byte) (int, error) {
	b.h.mu.Lock()
	resume := b.h.resume
	if b.h.holding {
		b.h.waits++
	}
	b.h.mu.Unlock()
	if resume != nil {
		<-resume
	}
	return b.ReadCloser.Read(p)
}

func (h *nodeWatchHold) hold() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.holding {
		h.holding, h.resume = true, make(chan struct{})
	}
}

func (h *nodeWatchHold) release() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.holding {
		close(h.resume)
		h.holding, h.resume = false, nil
	}
}

func (h *nodeWatchHold) held() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.waits
}
