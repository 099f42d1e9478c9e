package records

import (
	"slices"
	"testing"
	"time"
)

// TestRenewalMemoryOutlivesItsNextRequest: while a certificate approved for
// some names is valid, the record keeps them certified, whatever becomes of
// the request that renews it with the same names: pending (the record names
// it before its approval is written, and a leader change or an API error
// can leave it there, or a second request of the node be decided in that
// window), denied or deleted unapproved. Another request is then compared
// with those names (the renewal rule), and they keep their owner.
func TestRenewalMemoryOutlivesItsNextRequest(t *testing.T) {
	now := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	s1 := []string{"dns:node-a", "ip:10.0.0.1"}
	s2 := []string{"dns:node-a", "ip:10.0.0.2"}
	a := &Serving{CSR: "csr-a", UID: "a", SANs: s1, ValidUntil: now.Add(300 * 24 * time.Hour)}
	b := Renewing(a, true, Serving{CSR: "csr-b", UID: "b", SANs: s1, ValidUntil: now.Add(365 * 24 * time.Hour)}, now)

	if got := b.Certified(false, now); !slices.Equal(got, s1) {
		t.Errorf("A's names while B, renewing them, is pending: %v, want %v", got, s1)
	}
	if got := b.Certified(true, now); !slices.Equal(got, s1) {
		t.Errorf("A's names once B is approved: %v, want %v", got, s1)
	}
	cleared := b.Cleared(now)
	if cleared == nil || !slices.Equal(cleared.Certified(true, now), s1) || !cleared.ValidUntil.Equal(a.ValidUntil) || cleared.Is("csr-b", "b") {
		t.Errorf("B denied: the record keeps %+v, want A's names until A's end, naming no request", cleared)
	}
	// Chained: C renews while B is still pending.
	c := Renewing(&b, false, Serving{CSR: "csr-c", UID: "c", SANs: s1, ValidUntil: now.Add(365 * 24 * time.Hour)}, now)
	if got := c.Certified(false, now); !slices.Equal(got, s1) {
		t.Errorf("A's names while C renews them with B pending: %v", got)
	}

	later := a.ValidUntil.Add(time.Second)
	if got := b.Certified(false, later); got != nil {
		t.Errorf("after A's end, B pending certifies %v", got)
	}
	if got := b.Cleared(later); got != nil {
		t.Errorf("after A's end, B denied keeps %+v", got)
	}
	// Nothing to keep: other names, a request never approved (the join's),
	// an expired certificate.
	for name, prev := range map[string]struct {
		s        *Serving
		approved bool
	}{
		"other names":   {&Serving{CSR: "x", UID: "x", SANs: s2, ValidUntil: a.ValidUntil}, true},
		"not approved":  {&Serving{CSR: "x", UID: "x", SANs: s1, ValidUntil: a.ValidUntil}, false},
		"expired":       {&Serving{CSR: "x", UID: "x", SANs: s1, ValidUntil: now.Add(-time.Second)}, true},
		"no record yet": {nil, false},
	} {
		next := Renewing(prev.s, prev.approved, Serving{CSR: "csr-b", UID: "b", SANs: s1, ValidUntil: now.Add(time.Hour)}, now)
		if got := next.Certified(false, now); got != nil {
			t.Errorf("%s: B pending certifies %v", name, got)
		}
		if got := next.Cleared(now); got != nil {
			t.Errorf("%s: B denied keeps %+v", name, got)
		}
		if !next.ValidUntil.Equal(now.Add(time.Hour)) {
			t.Errorf("%s: B's end moved to %v", name, next.ValidUntil)
		}
	}
}
