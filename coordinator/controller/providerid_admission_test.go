package controller_test

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/talos-nodeinit/talos-nodeinit/coordinator/controller"
	"github.com/talos-nodeinit/talos-nodeinit/pkg/harness/testcluster"
)

// noProviderIDLabel marks the Nodes refuseCoordinator's policies apply to.
const noProviderIDLabel = "test.nodeinit.io/refusing"

// refuseCoordinator installs what an admin may run: a policy refusing the
// coordinator's Node updates that fail expression (on Nodes labelled
// noProviderIDLabel), in force once probe is refused. It returns the removal.
func refuseCoordinator(t *testing.T, name, expression, message, probe string) (remove func()) {
	t.Helper()
	rm, err := cluster.Refuse(t.Context(), testcluster.Refusal{Name: name, Label: noProviderIDLabel,
		Who: `request.userInfo.username == "` + coordinatorUser + `"`, Expression: expression, Message: message}, coordinatorIdentity(t), probe)
	if err != nil {
		t.Fatal(err)
	}
	remove = func() {
		if err := rm(); err != nil {
			t.Errorf("removing policy %s: %v", name, err)
		}
	}
	t.Cleanup(remove)
	return remove
}

// label puts noProviderIDLabel on the node's Node, as admin.
func label(t *testing.T, name string) {
	t.Helper()
	admin := kubernetes.NewForConfigOrDie(cluster.Admin())
	if _, err := admin.CoreV1().Nodes().Patch(t.Context(), name, types.MergePatchType,
		[]byte(`{"metadata":{"labels":{"`+noProviderIDLabel+`":"true"}}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
}

// An admission policy that refuses the coordinator's providerID write
// refuses that one value, not the join: the Node is initialized without
// one (as with a value CheckProviderID refuses), and a GrantRefused Event
// quotes the API server. Before, the whole initializing patch was retried,
// refused, forever.
func TestProviderIDRefusedByAdmissionIsRefusedAlone(t *testing.T) {
	refuseCoordinator(t, "test-no-coordinator-provider-id",
		`!has(object.spec.providerID) || (has(oldObject.spec.providerID) && oldObject.spec.providerID == object.spec.providerID)`,
		"this cluster sets providerIDs itself", `{"spec":{"providerID":"talos://metal/probe"}}`)
	// Without requireProviderID: with it, the Node waits for one set by
	// whoever the policy allows (nodestate's TestRefusedProviderID).
	startCoordinator(t, "pid-admission", strings.Replace(ipamSettings, "requireProviderID: true\n", "", 1))
	n := register(t, "pid-refused", "10.0.9.41")
	label(t, n.name)
	n.publish(t, report{providerID: "talos://metal/10.0.9.41"})

	waitFor(t, 15*time.Second, n.name+" initialized", func() bool { return initialized(get(t, n.name)) })
	if id := get(t, n.name).Spec.ProviderID; id != "" {
		t.Errorf("providerID %q set through a policy that refuses it", id)
	}
	if len(podCIDRs(t, get(t, n.name))) == 0 {
		t.Error("initialized without pod CIDRs")
	}
	waitFor(t, 5*time.Second, "GrantRefused Event", func() bool { return len(events(t, n.name, "GrantRefused")) > 0 })
	if msg := events(t, n.name, "GrantRefused")[0].Message; !strings.Contains(msg, "providerID") || !strings.Contains(msg, "sets providerIDs itself") {
		t.Errorf("GrantRefused Event: %q, want the providerID and the API server's reason", msg)
	}
}

// A refusal of something else in the initializing patch (here its pod
// CIDRs) is not blamed on the providerID: the patch is retried as it is,
// and once the admin lifts the policy the Node is initialized with the
// providerID its report asks for, requireProviderID on. Seen failing when
// every refusal of a patch carrying a providerID was taken for the
// providerID's: the Node waited for good, its patch never retried.
func TestOtherRefusalIsNotBlamedOnTheProviderID(t *testing.T) {
	remove := refuseCoordinator(t, "test-no-coordinator-pod-cidrs", `!has(object.spec.podCIDRs) || has(oldObject.spec.podCIDRs)`,
		"pod CIDRs come from elsewhere here", `{"spec":{"podCIDRs":["10.99.0.0/24"],"podCIDR":"10.99.0.0/24"}}`)
	startCoordinator(t, "pid-other", ipamSettings) // requireProviderID: true
	n := register(t, "pid-other-refused", "10.0.9.42")
	label(t, n.name)
	n.publish(t, report{providerID: "talos://metal/10.0.9.42"})
	// Refused, then retried as it is (the audit leaves dry runs out).
	waitFor(t, 10*time.Second, "the refused patch retried", func() bool { return len(coordinatorWrites(t, "nodes", n.name)) >= 2 })
	for _, e := range events(t, n.name, "GrantRefused") {
		if strings.Contains(e.Message, "providerID") {
			t.Errorf("the pod CIDRs' refusal blamed on the providerID: %q", e.Message)
		}
	}
	remove()
	// The retry's backoff has grown while refused (5 ms doubling): 60 s.
	waitFor(t, 60*time.Second, n.name+" initialized", func() bool { return initialized(get(t, n.name)) })
	if id := get(t, n.name).Spec.ProviderID; id != "talos://metal/10.0.9.42" {
		t.Errorf("providerID %q, want the one the report asks for", id)
	}
}

// TestRefusalThatNoLongerHoldsIsNotBlamedOnTheProviderID: a refusal is the
// providerID's alone only while the API server still refuses the patch
// with it and takes it without. Seen flaking in
// TestOtherRefusalIsNotBlamedOnTheProviderID: the policy refusing the pod
// CIDRs was removed between a refused patch and its dry run without the
// providerID, which then passed, and the providerID was left out for
// refusalRecheck (10 min).
func TestRefusalThatNoLongerHoldsIsNotBlamedOnTheProviderID(t *testing.T) {
	c := startCoordinator(t, "pid-no-longer", ipamSettings)
	n := register(t, "pid-no-longer", "10.0.9.43") // no report: the coordinator leaves it be
	label(t, n.name)
	patch := []byte(`{"spec":{"providerID":"talos://metal/10.0.9.43","podCIDRs":["10.99.1.0/24"],"podCIDR":"10.99.1.0/24"}}`)
	if controller.ProviderIDAlone(c.Coordinator, t.Context(), n.name, patch) {
		t.Error("no policy refuses the patch (any more): blamed on the providerID all the same")
	}
	refuseCoordinator(t, "test-no-coordinator-provider-id-2",
		`!has(object.spec.providerID) || (has(oldObject.spec.providerID) && oldObject.spec.providerID == object.spec.providerID)`,
		"this cluster sets providerIDs itself", `{"spec":{"providerID":"talos://metal/probe"}}`)
	if !controller.ProviderIDAlone(c.Coordinator, t.Context(), n.name, patch) {
		t.Error("a policy refuses the providerID alone: not blamed on it")
	}
}
