package grants

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/talos-nodeinit/talos-nodeinit/pkg/contract"
)

var defaults = Policy{
	Labels: Patterns{Allow: DefaultLabelAllow, Deny: DefaultLabelDeny},
	Taints: Patterns{Allow: DefaultTaintAllow, Deny: DefaultTaintDeny},
}

// Deny wins over Allow; a pattern is an exact key or a prefix ending in
// "*"; some keys are never granted whatever the lists say.
func TestPolicy(t *testing.T) {
	wide := Policy{Labels: Patterns{Allow: []string{"node-role.kubernetes.io/*", "example.com/*"}, Deny: []string{"example.com/secret"}}}
	for _, tc := range []struct {
		p          Policy
		key, value string
		grant      bool
		reason     string
	}{
		{defaults, "node.cloudprovider.kubernetes.io/storage-class", "ssd", true, ""},
		{defaults, "node-role.kubernetes.io/web", "", false, "not allowed by the grant policy"},
		{wide, "node-role.kubernetes.io/web", "", true, ""},
		{wide, "node-role.kubernetes.io/control-plane", "", false, "never granted"},
		{wide, "example.node-restriction.kubernetes.io/x", "", false, "never granted"},
		{wide, contract.LabelPlatform, "metal", false, "never granted"},
		{wide, "example.com/secret", "x", false, `denied by the grant policy ("example.com/secret")`},
		{wide, "example.com/tier", "bad value!", false, "valid label"},
	} {
		if ok, why := tc.p.MayGrantLabel(tc.key, tc.value); ok != tc.grant || !strings.Contains(why, tc.reason) {
			t.Errorf("MayGrantLabel(%q, %q) = %v %q, want %v containing %q", tc.key, tc.value, ok, why, tc.grant, tc.reason)
		}
	}
	for _, tc := range []struct {
		taint contract.Taint
		grant bool
	}{
		{contract.Taint{Key: "dedicated", Value: "web", Effect: corev1.TaintEffectNoSchedule}, true},
		{contract.Taint{Key: contract.TaintUninitialized, Effect: corev1.TaintEffectNoSchedule}, false},
		{contract.Taint{Key: "node.kubernetes.io/not-ready", Effect: corev1.TaintEffectNoExecute}, false},
		{contract.Taint{Key: "dedicated", Effect: "Sometimes"}, false},
	} {
		if ok, why := defaults.MayGrantTaint(tc.taint); ok != tc.grant || (!ok && why == "") {
			t.Errorf("MayGrantTaint(%+v) = %v %q, want %v with a reason when refused", tc.taint, ok, why, tc.grant)
		}
	}
}
