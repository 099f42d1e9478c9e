package controller_test

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/talos-nodeinit/talos-nodeinit/pkg/contract"
)

// A grant the coordinator never wrote is not its own: an admin who then
// sets that exact value keeps it when the node withdraws its request
// (class 5). The record holds what a patch adds before the patch is
// written; a patch that failed (refused here; a node churning its own
// status keeps them conflicting) left it held, so the admin's quarantine
// taint counted as the coordinator's and was removed.
func TestAGrantNeverWrittenIsNotOwned(t *testing.T) {
	quarantine := corev1.Taint{Key: "dedicated", Value: "quarantine", Effect: corev1.TaintEffectNoExecute}
	c := startCoordinator(t, "unwritten-grant", ipamSettings)
	n := register(t, "unwritten-grant", "10.0.9.51")
	label(t, n.name)
	n.publish(t, report{providerID: "talos://metal/10.0.9.51"})
	waitFor(t, 10*time.Second, n.name+" initialized", func() bool { return initialized(get(t, n.name)) })
	remove := refuseCoordinator(t, "test-no-coordinator-quarantine",
		`!has(object.spec.taints) || !object.spec.taints.exists(x, x.value == "quarantine")`,
		"quarantine is the admin's", `{"spec":{"taints":[{"key":"dedicated","value":"quarantine","effect":"NoExecute"}]}}`)
	before := len(coordinatorWrites(t, "nodes", n.name))
	n.publish(t, report{providerID: "talos://metal/10.0.9.51", taints: []contract.Taint{{Key: quarantine.Key, Value: quarantine.Value, Effect: quarantine.Effect}}})
	waitFor(t, 10*time.Second, "the coordinator's patch refused, twice", func() bool { return len(coordinatorWrites(t, "nodes", n.name)) >= before+2 })

	// The admin quarantines the node with that very taint.
	node := get(t, n.name)
	node.Spec.Taints = append(node.Spec.Taints, quarantine)
	if _, err := admin().CoreV1().Nodes().Update(t.Context(), node, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	remove()
	// The node withdraws its request.
	n.publish(t, report{providerID: "talos://metal/10.0.9.51"})
	c.syncedNow(t, n.name)
	if !hasTaint(get(t, n.name), quarantine) {
		t.Fatalf("the admin's quarantine taint was removed: the coordinator took it for the grant it never wrote")
	}
	if _, taints := recordedGrants(t, n.name); len(taints) != 0 {
		t.Errorf("the record holds taints %v, none of which the coordinator wrote", taints)
	}
}
