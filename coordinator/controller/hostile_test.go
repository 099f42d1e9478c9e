package controller_test

import (
	"strconv"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/talos-nodeinit/talos-nodeinit/pkg/contract"
)

// Hostile agent annotations, written with node identities to a running
// coordinator: each is ignored or refused with an Event, nothing is
// granted, and the coordinator stays ready and keeps serving honest nodes.
func TestHostileAgentAnnotations(t *testing.T) {
	c := startCoordinator(t, "hostile", ipamSettings)
	big := `{"v":1,"labels":{"node-role.kubernetes.io/web":"` + strings.Repeat("x", 100<<10) + `"}}`
	for i, tc := range []struct {
		name        string
		annotations map[string]string
		event       string
		inMessage   string
	}{
		{"hostile-json", map[string]string{contract.AnnotationRequestedLabels: `{"v":1,"labels":{"node-role.kubernetes.io/web":`}, "MalformedAgentReport", "requested-labels"},
		{"hostile-version", map[string]string{contract.AnnotationRequestedLabels: `{"v":2,"labels":{"node-role.kubernetes.io/web":""}}`}, "MalformedAgentReport", "version"},
		{"hostile-big", map[string]string{contract.AnnotationRequestedLabels: big}, "MalformedAgentReport", "requested-labels"},
		{"hostile-labels", map[string]string{contract.AnnotationRequestedLabels: `{"v":1,"labels":{"node-role.kubernetes.io/control-plane":"","node-restriction.kubernetes.io/pool":"gold","kubernetes.io/hostname":"other"}}`}, "GrantRefused", "node-restriction"},
		{"hostile-taints", map[string]string{contract.AnnotationRequestedTaints: `{"v":1,"taints":[{"key":"node.kubernetes.io/unschedulable","effect":"NoSchedule"},{"key":"node.cloudprovider.kubernetes.io/uninitialized","effect":"NoSchedule"}]}`}, "GrantRefused", "taint"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := register(t, tc.name, "10.0.9."+strconv.Itoa(10+i))
			n.publish(t, report{providerID: "talos://metal/" + n.ip.String()})
			body := mustJSON(t, map[string]any{"metadata": map[string]any{"annotations": tc.annotations}})
			if _, err := n.self.CoreV1().Nodes().Patch(t.Context(), n.name, types.MergePatchType, body, metav1.PatchOptions{}); err != nil {
				t.Fatal(err)
			}
			waitFor(t, 10*time.Second, tc.event+" Event", func() bool { return len(events(t, n.name, tc.event)) > 0 })
			if tc.event == "GrantRefused" {
				// The Event comes before the patch: read the Node once the
				// patch has landed (the node is initialized by it).
				waitFor(t, 10*time.Second, n.name+" initialized", func() bool { return initialized(get(t, n.name)) })
			}
			if msg := events(t, n.name, tc.event)[0].Message; !strings.Contains(msg, tc.inMessage) {
				t.Errorf("%s Event %q lacks %q", tc.event, msg, tc.inMessage)
			}
			node := get(t, n.name)
			for _, k := range []string{"node-role.kubernetes.io/web", "node-role.kubernetes.io/control-plane", "node-restriction.kubernetes.io/pool"} {
				if _, ok := node.Labels[k]; ok {
					t.Errorf("%s granted from a hostile request", k)
				}
			}
			for _, taint := range node.Spec.Taints {
				if taint.Key == "node.kubernetes.io/unschedulable" {
					t.Error("a system taint was granted")
				}
			}
			if node.Labels["kubernetes.io/hostname"] == "other" {
				t.Error("kubernetes.io/hostname was rewritten")
			}
			if err := c.Ready(); err != nil {
				t.Errorf("coordinator not ready: %v", err)
			}
		})
	}

	// A 1 MiB annotation never reaches the coordinator: the API server refuses it.
	n := register(t, "hostile-huge", "10.0.9.20")
	huge := mustJSON(t, map[string]any{"metadata": map[string]any{"annotations": map[string]string{
		contract.AnnotationRequestedLabels: strings.Repeat("x", 1<<20)}}})
	if _, err := n.self.CoreV1().Nodes().Patch(t.Context(), n.name, types.MergePatchType, huge, metav1.PatchOptions{}); err == nil {
		t.Error("the API server accepted a 1 MiB annotation")
	}

	// And an honest node joining afterwards is served as usual.
	honest := register(t, "after-hostile", "10.0.9.30")
	honest.publish(t, report{providerID: "talos://metal/10.0.9.30"})
	took := waitFor(t, 10*time.Second, "honest node initialized", func() bool { return initialized(get(t, "after-hostile")) })
	t.Logf("honest node after the hostile ones: initialized in %v", took)
	if initialized(get(t, "hostile-json")) {
		// Never act on partial data: a node whose report cannot be read is
		// left as it is (with an Event and a metric) until it can be.
		t.Error("a node with a malformed request annotation was initialized on partial data")
	}
}
