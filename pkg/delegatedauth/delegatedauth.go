// Package delegatedauth guards an HTTP endpoint the way Kubernetes
// components guard their /metrics (k8s.io/apiserver's delegating
// authenticator and authorizer): the API server authenticates the caller's
// bearer token (TokenReview) and authorizes the request as a non-resource
// URL (SubjectAccessReview), so RBAC decides who may scrape:
//
//	rules: [{nonResourceURLs: [/metrics], verbs: [get]}]
//
// It uses client-go's authentication and authorization v1 APIs directly,
// without k8s.io/apiserver.
package delegatedauth

import (
	"context"
	"crypto/sha256"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// DefaultTTL is how long a decision is cached, as kube-apiserver's
// delegating authenticator and authorizer cache theirs (10s).
const DefaultTTL = 10 * time.Second

// Limits on what unauthenticated callers can make the API server do: at
// most DefaultMaxInFlight reviews at once (more are answered 429 without
// asking), each given ReviewTimeout, and at most MaxCached decisions kept.
const (
	DefaultMaxInFlight = 32
	ReviewTimeout      = 5 * time.Second
	MaxCached          = 4096
)

// Guard admits a request only when the API server authenticates its
// bearer token and authorizes its user to use the path with the request's
// method (GET is the verb get).
type Guard struct {
	// Client asks the API server. Give it its own rate limiter (a clientset
	// of its own), so that a flood of made-up tokens never delays the
	// component's own requests, such as its Lease renewals.
	Client kubernetes.Interface
	// TTL caches decisions per token, path and verb (default DefaultTTL).
	TTL time.Duration
	// MaxInFlight bounds the reviews under way (default DefaultMaxInFlight).
	MaxInFlight int
	Log         *slog.Logger
	// now is time.Now; tests move it.
	now func() time.Time

	mu       sync.Mutex
	cache    map[[sha256.Size]byte]decision
	inFlight int
	lastWarn time.Time
}

type decision struct {
	status  int // http.StatusOK, StatusUnauthorized or StatusForbidden
	user    string
	reason  string
	expires time.Time
}

// Decide authenticates and authorizes one request: 200 to serve it, 401
// when the caller is not authenticated, 403 when it may not, 429 when too
// many reviews are under way, 503 when the API server could not be asked
// (neither cached).
func (g *Guard) Decide(ctx context.Context, r *http.Request) (status int, user, reason string) {
	token, ok := bearerToken(r)
	if !ok {
		return http.StatusUnauthorized, "", "no bearer token"
	}
	verb := strings.ToLower(r.Method)
	if r.Method == http.MethodHead {
		verb = "get"
	}
	key := sha256.Sum256([]byte(verb + "\x00" + r.URL.Path + "\x00" + token))
	now := time.Now
	if g.now != nil {
		now = g.now
	}
	limit := g.MaxInFlight
	if limit <= 0 {
		limit = DefaultMaxInFlight
	}
	g.mu.Lock()
	if d, ok := g.cache[key]; ok && now().Before(d.expires) {
		g.mu.Unlock()
		return d.status, d.user, d.reason
	}
	if g.inFlight >= limit {
		g.mu.Unlock()
		return http.StatusTooManyRequests, "", fmt.Sprintf("%d reviews already under way", limit)
	}
	g.inFlight++
	g.mu.Unlock()
	defer func() { g.mu.Lock(); g.inFlight--; g.mu.Unlock() }()

	ctx, cancel := context.WithTimeout(ctx, ReviewTimeout)
	defer cancel()
	d, err := g.ask(ctx, token, r.URL.Path, verb)
	if err != nil {
		return http.StatusServiceUnavailable, "", err.Error()
	}
	ttl := g.TTL
	if ttl <= 0 {
		ttl = DefaultTTL
	}
	d.expires = now().Add(ttl)
	g.mu.Lock()
	if g.cache == nil {
		g.cache = map[[sha256.Size]byte]decision{}
	}
	if len(g.cache) >= MaxCached/2 { // a scraper's token changes rarely; keep the map small
		for k, old := range g.cache {
			if !now().Before(old.expires) {
				delete(g.cache, k)
			}
		}
	}
	if len(g.cache) < MaxCached { // full of live entries: answer without caching
		g.cache[key] = d
	}
	g.mu.Unlock()
	return d.status, d.user, d.reason
}

func (g *Guard) ask(ctx context.Context, token, path, verb string) (decision, error) {
	tr, err := g.Client.AuthenticationV1().TokenReviews().Create(ctx, &authenticationv1.TokenReview{
		Spec: authenticationv1.TokenReviewSpec{Token: token},
	}, metav1.CreateOptions{})
	if err != nil {
		return decision{}, fmt.Errorf("authenticating the caller (TokenReview): %w", err)
	}
	if !tr.Status.Authenticated {
		return decision{status: http.StatusUnauthorized, reason: "token not authenticated: " + tr.Status.Error}, nil
	}
	u := tr.Status.User
	extra := map[string]authorizationv1.ExtraValue{}
	for k, v := range u.Extra {
		extra[k] = authorizationv1.ExtraValue(v)
	}
	sar, err := g.Client.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{
		Spec: authorizationv1.SubjectAccessReviewSpec{
			User: u.Username, UID: u.UID, Groups: u.Groups, Extra: extra,
			NonResourceAttributes: &authorizationv1.NonResourceAttributes{Path: path, Verb: verb},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		return decision{}, fmt.Errorf("authorizing %s (SubjectAccessReview): %w", u.Username, err)
	}
	if !sar.Status.Allowed || sar.Status.Denied {
		return decision{status: http.StatusForbidden, user: u.Username, reason: fmt.Sprintf("%s may not %s %s: %s", u.Username, verb, path, sar.Status.Reason)}, nil
	}
	return decision{status: http.StatusOK, user: u.Username}, nil
}

// Wrap serves next only to the requests Decide admits.
func (g *Guard) Wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		status, user, reason := g.Decide(r.Context(), r)
		switch status {
		case http.StatusOK:
			next.ServeHTTP(w, r)
			return
		case http.StatusUnauthorized:
			w.Header().Set("WWW-Authenticate", `Bearer realm="nodeinit"`)
		case http.StatusServiceUnavailable, http.StatusTooManyRequests:
			g.warn("cannot check a metrics request", "path", r.URL.Path, "status", status, "err", reason)
		}
		if g.Log != nil && status == http.StatusForbidden {
			g.Log.Debug("metrics request refused", "user", user, "path", r.URL.Path, "reason", reason)
		}
		http.Error(w, http.StatusText(status), status)
	})
}

func bearerToken(r *http.Request) (string, bool) {
	scheme, token, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	token = strings.TrimSpace(token)
	if !ok || !strings.EqualFold(scheme, "Bearer") || token == "" {
		return "", false
	}
	return token, true
}

// warn logs at most one line every 10 s: a flood of requests must not
// become a flood of log lines.
func (g *Guard) warn(msg string, args ...any) {
	if g.Log == nil {
		return
	}
	g.mu.Lock()
	now := time.Now()
	quiet := now.Sub(g.lastWarn) < 10*time.Second
	if !quiet {
		g.lastWarn = now
	}
	g.mu.Unlock()
	if !quiet {
		g.Log.Warn(msg, args...)
	}
}
