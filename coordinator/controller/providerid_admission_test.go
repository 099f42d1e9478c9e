package controller_test

import (
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
)

// noProviderIDLabel marks the Nodes refuseCoordinatorProviderIDs applies to.
const noProviderIDLabel = "test.nodeinit.io/no-coordinator-provider-id"

// refuseCoordinatorProviderIDs installs what an admin may run: a
// ValidatingAdmissionPolicy refusing the coordinator any providerID write
// (on Nodes labelled noProviderIDLabel), and waits until it is in force.
func refuseCoordinatorProviderIDs(t *testing.T) {
	t.Helper()
	admin := kubernetes.NewForConfigOrDie(cluster.Admin())
	ctx := t.Context()
	fail := admissionregistrationv1.Fail
	policy := &admissionregistrationv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "test-no-coordinator-provider-id"},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			FailurePolicy: &fail,
			MatchConstraints: &admissionregistrationv1.MatchResources{
				ObjectSelector: &metav1.LabelSelector{MatchLabels: map[string]string{noProviderIDLabel: "true"}},
				ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{RuleWithOperations: admissionregistrationv1.RuleWithOperations{
					Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Update},
					Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"nodes"}},
				}}},
			},
			MatchConditions: []admissionregistrationv1.MatchCondition{{Name: "coordinator", Expression: `request.userInfo.username == "` + coordinatorUser + `"`}},
			Validations: []admissionregistrationv1.Validation{{
				Expression: `!has(object.spec.providerID) || (has(oldObject.spec.providerID) && oldObject.spec.providerID == object.spec.providerID)`,
				Message:    "this cluster sets providerIDs itself",
			}},
		},
	}
	binding := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: policy.Name},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{PolicyName: policy.Name,
			ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny}},
	}
	if _, err := admin.AdmissionregistrationV1().ValidatingAdmissionPolicies().Create(ctx, policy, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = admin.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Delete(ctx, binding.Name, metav1.DeleteOptions{})
		_ = admin.AdmissionregistrationV1().ValidatingAdmissionPolicies().Delete(ctx, policy.Name, metav1.DeleteOptions{})
	})
	if _, err := admin.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// In force once a dry run of the coordinator's write is refused.
	probe := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "provider-id-probe", Labels: map[string]string{noProviderIDLabel: "true"}}}
	if _, err := admin.CoreV1().Nodes().Create(ctx, probe, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = admin.CoreV1().Nodes().Delete(ctx, probe.Name, metav1.DeleteOptions{}) })
	coord := kubernetes.NewForConfigOrDie(coordinatorIdentity(t))
	waitFor(t, 15*time.Second, "the policy in force", func() bool {
		_, err := coord.CoreV1().Nodes().Patch(ctx, probe.Name, types.MergePatchType, []byte(`{"spec":{"providerID":"talos://metal/probe"}}`),
			metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}})
		return err != nil && strings.Contains(err.Error(), "sets providerIDs itself")
	})
}

// An admission policy that refuses the coordinator's providerID write
// refuses that one value, not the join: the Node is initialized without
// one (as with a value CheckProviderID refuses), and a GrantRefused Event
// quotes the API server. Before, the whole initializing patch was retried,
// refused, forever.
func TestProviderIDRefusedByAdmissionIsRefusedAlone(t *testing.T) {
	refuseCoordinatorProviderIDs(t)
	// Without requireProviderID: with it, the Node waits for one set by
	// whoever the policy allows (nodestate's TestRefusedProviderID).
	startCoordinator(t, "pid-admission", strings.Replace(ipamSettings, "requireProviderID: true\n", "", 1))
	n := register(t, "pid-refused", "10.0.9.41")
	admin := kubernetes.NewForConfigOrDie(cluster.Admin())
	if _, err := admin.CoreV1().Nodes().Patch(t.Context(), n.name, types.MergePatchType,
		[]byte(`{"metadata":{"labels":{"`+noProviderIDLabel+`":"true"}}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
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
