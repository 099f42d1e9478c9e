package approval_test

import (
	"testing"
	"time"

	"github.com/talos-nodeinit/talos-nodeinit/coordinator/approval"
)

func TestHandoff(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	old := func(name string, review bool) approval.Want {
		return approval.Want{CSR: name, Created: t0, Review: review}
	}
	newer := func(name string, review bool) approval.Want {
		return approval.Want{CSR: name, Created: t0.Add(time.Minute), Review: review}
	}
	for _, tc := range []struct {
		name, current string
		wants         []approval.Want
		want          string
	}{
		{name: "none pending", want: ""},
		{name: "one wanting", wants: []approval.Want{old("a", true)}, want: "a"},
		{name: "one not wanting", wants: []approval.Want{old("a", false)}, want: ""},
		{name: "the one under review keeps it over a newer one", current: "a", wants: []approval.Want{old("a", true), newer("b", true)}, want: "a"},
		{name: "the one under review no longer wants it: the newest next", current: "a", wants: []approval.Want{old("a", false), newer("b", true)}, want: "b"},
		{name: "the one under review no longer wants it: an older one does not take it (the kubelet moved on from it)", current: "b", wants: []approval.Want{old("a", true), newer("b", false)}, want: ""},
		{name: "decided (gone from the pending): the newest next", current: "gone", wants: []approval.Want{old("a", true), newer("b", true)}, want: "b"},
		{name: "only the newest is considered after the current", current: "gone", wants: []approval.Want{old("a", true), newer("b", false)}, want: ""},
		{name: "ties on creation by name, descending", wants: []approval.Want{old("a", true), old("b", true)}, want: "b"},
		{name: "a stale attestation keeps the review", current: "a", wants: []approval.Want{approval.WantOf("a", t0, approval.Decision{Action: approval.RequestReview, Category: approval.CategoryAttestationStale})}, want: "a"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := approval.Handoff(tc.current, tc.wants); got != tc.want {
				t.Fatalf("Handoff(%q) = %q; want %q", tc.current, got, tc.want)
			}
		})
	}
}

func TestWantOf(t *testing.T) {
	for _, tc := range []struct {
		d      approval.Decision
		review bool
	}{
		{approval.Decision{Action: approval.RequestReview, Category: approval.CategoryReview}, true},
		{approval.Decision{Action: approval.RequestReview, Category: approval.CategoryAttestationStale}, true},
		{approval.Decision{Action: approval.Wait, Category: approval.CategoryAddressNotSettled}, true},
		{approval.Decision{Action: approval.Wait, Category: approval.CategoryWaiting}, true},
		{approval.Decision{Action: approval.Hold, Category: approval.CategoryNoEnrolledKey}, false},
		{approval.Decision{Action: approval.Approve, Category: approval.CategoryAttested}, false},
		{approval.Decision{Action: approval.Retry, Category: approval.CategoryNodeUnknown}, false},
	} {
		if w := approval.WantOf("x", time.Time{}, tc.d); w.Review != tc.review {
			t.Errorf("WantOf(%v/%v) = review %v; want %v", tc.d.Action, tc.d.Category, w.Review, tc.review)
		}
	}
}
