package delegatedauth

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// A stand-in API server for the pure parts (token parsing, the verb, the
// cache); the real API server's answers are in coordinator's
// TestSecureMetrics.
func fakeAPI(reviews *int, sars *[]authorizationv1.NonResourceAttributes) *fake.Clientset {
	cs := fake.NewClientset()
	cs.PrependReactor("create", "tokenreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
		*reviews++
		tr := a.(k8stesting.CreateAction).GetObject().(*authenticationv1.TokenReview)
		if tr.Spec.Token == "good" || tr.Spec.Token == "weak" {
			tr.Status = authenticationv1.TokenReviewStatus{Authenticated: true, User: authenticationv1.UserInfo{Username: tr.Spec.Token, Groups: []string{"g"}}}
		}
		return true, tr, nil
	})
	cs.PrependReactor("create", "subjectaccessreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
		sar := a.(k8stesting.CreateAction).GetObject().(*authorizationv1.SubjectAccessReview)
		*sars = append(*sars, *sar.Spec.NonResourceAttributes)
		sar.Status.Allowed = sar.Spec.User == "good" && sar.Spec.NonResourceAttributes.Verb == "get"
		return true, sar, nil
	})
	return cs
}

func TestDecide(t *testing.T) {
	var reviews int
	var sars []authorizationv1.NonResourceAttributes
	now := time.Unix(1000, 0)
	g := &Guard{Client: fakeAPI(&reviews, &sars), now: func() time.Time { return now }}
	for _, tc := range []struct {
		method, auth string
		want         int
	}{
		{http.MethodGet, "", http.StatusUnauthorized},
		{http.MethodGet, "Basic Z29vZDo=", http.StatusUnauthorized},
		{http.MethodGet, "Bearer ", http.StatusUnauthorized},
		{http.MethodGet, "Bearer nobody", http.StatusUnauthorized},
		{http.MethodGet, "Bearer weak", http.StatusForbidden},
		{http.MethodGet, "Bearer good", http.StatusOK},
		{http.MethodGet, "bearer good", http.StatusOK},
		{http.MethodHead, "Bearer good", http.StatusOK}, // HEAD is get
		{http.MethodPost, "Bearer good", http.StatusForbidden},
	} {
		r := httptest.NewRequest(tc.method, "/metrics", nil)
		if tc.auth != "" {
			r.Header.Set("Authorization", tc.auth)
		}
		if got, _, reason := g.Decide(t.Context(), r); got != tc.want {
			t.Errorf("%s with %q: %d (%s), want %d", tc.method, tc.auth, got, reason, tc.want)
		}
	}
	if last := sars[len(sars)-1]; last.Path != "/metrics" || last.Verb != "post" {
		t.Errorf("last SubjectAccessReview %+v, want post /metrics", last)
	}

	// Decisions are cached for the TTL, then asked again.
	before := reviews
	r := httptest.NewRequest(http.MethodGet, "/metrics", nil)
	r.Header.Set("Authorization", "Bearer good")
	g.Decide(t.Context(), r)
	if reviews != before {
		t.Errorf("a cached decision asked the API server again")
	}
	now = now.Add(DefaultTTL + time.Second)
	g.Decide(t.Context(), r)
	if reviews != before+1 {
		t.Errorf("an expired decision was not asked again (%d reviews, want %d)", reviews, before+1)
	}
}

func TestWrap(t *testing.T) {
	var reviews int
	var sars []authorizationv1.NonResourceAttributes
	g := &Guard{Client: fakeAPI(&reviews, &sars)}
	h := g.Wrap(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("metrics")) }))
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	if w.Code != http.StatusUnauthorized || w.Header().Get("WWW-Authenticate") == "" || w.Body.String() == "metrics" {
		t.Errorf("no token: %d %q %q", w.Code, w.Header(), w.Body.String())
	}
}

// A flood of made-up tokens costs the API server at most MaxInFlight
// reviews at a time (the rest are told 429 without asking), and the cache
// stays bounded.
func TestFloodIsBounded(t *testing.T) {
	release := make(chan struct{})
	var mu sync.Mutex
	active, peak := 0, 0
	cs := fake.NewClientset()
	cs.PrependReactor("create", "tokenreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
		mu.Lock()
		active++
		peak = max(peak, active)
		mu.Unlock()
		<-release
		mu.Lock()
		active--
		mu.Unlock()
		return true, a.(k8stesting.CreateAction).GetObject(), nil // not authenticated
	})
	g := &Guard{Client: cs, MaxInFlight: 8}
	const callers = 50
	codes := make(chan int, callers)
	for i := range callers {
		go func() {
			r := httptest.NewRequest(http.MethodGet, "/metrics", nil)
			r.Header.Set("Authorization", fmt.Sprintf("Bearer made-up-%d", i))
			code, _, _ := g.Decide(context.Background(), r)
			codes <- code
		}()
	}
	// The callers beyond the limit are answered at once.
	tooMany := 0
	for range callers - 8 {
		if c := <-codes; c == http.StatusTooManyRequests {
			tooMany++
		}
	}
	close(release)
	for range 8 {
		if c := <-codes; c != http.StatusUnauthorized {
			t.Errorf("a reviewed made-up token got %d, want 401", c)
		}
	}
	if peak > 8 || tooMany != callers-8 {
		t.Errorf("peak %d reviews at once (limit 8), %d callers told 429 (want %d)", peak, tooMany, callers-8)
	}

	// Every made-up token is a new cache entry; the cache stops growing.
	var reviews int
	var sars []authorizationv1.NonResourceAttributes
	now := time.Unix(1000, 0)
	g = &Guard{Client: fakeAPI(&reviews, &sars), now: func() time.Time { return now }}
	for i := range MaxCached + 100 {
		r := httptest.NewRequest(http.MethodGet, "/metrics", nil)
		r.Header.Set("Authorization", fmt.Sprintf("Bearer made-up-%d", i))
		g.Decide(context.Background(), r)
	}
	if n := len(g.cache); n > MaxCached {
		t.Errorf("%d cached decisions, limit %d", n, MaxCached)
	}
}
