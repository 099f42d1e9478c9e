package controller

import (
	"testing"

	"github.com/talos-nodeinit/talos-nodeinit/coordinator/approval"
)

// TestHoldsSayWhy: the holds that a Node's own state or another Node
// causes carry an Event of their own reason, so an operator reading
// `kubectl get events` can tell a name shared with another Node from an
// address held by one, and a Node registered again from the rest.
func TestHoldsSayWhy(t *testing.T) {
	for cat, want := range map[approval.Category]string{
		approval.CategoryAddressClaimed:        "AddressClaimedByOtherNode",
		approval.CategoryNameClaimed:           "NameClaimedByOtherNode",
		approval.CategoryRecordOfAnotherObject: "NodeRecordOfEarlierObject",
		approval.CategoryRenewalNamesChanged:   "RenewalNamesChanged",
	} {
		if got := heldReasons[cat]; got != want {
			t.Errorf("a hold of category %s: Event reason %q, want %q", cat, got, want)
		}
	}
}
