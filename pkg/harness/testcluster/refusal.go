package testcluster

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// Refusal is what an admin may run against nodeinit: a
// ValidatingAdmissionPolicy, bound with Deny, refusing the UPDATEs of Nodes
// labelled Label=true that Who makes (a CEL match condition over
// request.userInfo) and that fail Expression, with Message.
type Refusal struct {
	Name, Label, Who, Expression, Message string
	// ProbeNode is the Node the probe patches (labelled Label already),
	// for an identity that may patch no other, a node's; empty: a probe
	// Node of its own, created and deleted here.
	ProbeNode string
}

// Refuse installs r. It returns once a dry run of probe (a merge patch of a
// probe Node labelled r.Label), made as as, is refused with r.Message. The
// returned remove deletes the policy, its binding and the probe Node, and
// returns once the probe is taken again: the API server drops a deleted
// policy a moment later, and the next test must not meet it.
func (c *Cluster) Refuse(ctx context.Context, r Refusal, as *rest.Config, probe string) (remove func() error, err error) {
	admin, err := kubernetes.NewForConfig(c.admin)
	if err != nil {
		return nil, err
	}
	who, err := kubernetes.NewForConfig(as)
	if err != nil {
		return nil, err
	}
	fail := admissionregistrationv1.Fail
	policy := &admissionregistrationv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: r.Name},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			FailurePolicy: &fail,
			MatchConstraints: &admissionregistrationv1.MatchResources{
				ObjectSelector: &metav1.LabelSelector{MatchLabels: map[string]string{r.Label: "true"}},
				ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{RuleWithOperations: admissionregistrationv1.RuleWithOperations{
					Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Update},
					Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"nodes", "nodes/status"}},
				}}},
			},
			MatchConditions: []admissionregistrationv1.MatchCondition{{Name: "who", Expression: r.Who}},
			Validations:     []admissionregistrationv1.Validation{{Expression: r.Expression, Message: r.Message}},
		},
	}
	binding := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: r.Name},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{PolicyName: r.Name,
			ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny}},
	}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: r.Name + "-probe", Labels: map[string]string{r.Label: "true"}}}
	if r.ProbeNode != "" {
		node.Name = r.ProbeNode
	}
	refused := func(ctx context.Context) (bool, error) {
		_, err := who.CoreV1().Nodes().Patch(ctx, node.Name, types.MergePatchType, []byte(probe), metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}})
		if err != nil && !strings.Contains(err.Error(), r.Message) {
			return false, err
		}
		return err != nil, nil
	}
	var once sync.Once
	var removeErr error
	remove = func() error {
		once.Do(func() {
			ctx := context.WithoutCancel(ctx)
			_ = admin.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Delete(ctx, binding.Name, metav1.DeleteOptions{})
			_ = admin.AdmissionregistrationV1().ValidatingAdmissionPolicies().Delete(ctx, policy.Name, metav1.DeleteOptions{})
			// Gone once the probe is taken: any other error is not proof.
			removeErr = until(ctx, func(ctx context.Context) (bool, error) { r, err := refused(ctx); return err == nil && !r, err })
			if r.ProbeNode == "" {
				_ = admin.CoreV1().Nodes().Delete(ctx, node.Name, metav1.DeleteOptions{})
			}
		})
		return removeErr
	}
	if r.ProbeNode == "" {
		if _, err := admin.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil {
			return nil, err
		}
	}
	if _, err := admin.AdmissionregistrationV1().ValidatingAdmissionPolicies().Create(ctx, policy, metav1.CreateOptions{}); err != nil {
		_ = remove()
		return nil, err
	}
	if _, err := admin.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		_ = remove()
		return nil, err
	}
	if err := until(ctx, refused); err != nil {
		_ = remove()
		return nil, fmt.Errorf("policy %s not in force: %w", r.Name, err)
	}
	return remove, nil
}

// until polls done every 100 ms for up to 15 s.
func until(ctx context.Context, done func(context.Context) (bool, error)) error {
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	for {
		ok, err := done(ctx)
		if ok {
			return nil
		}
		select {
		case <-ctx.Done():
			if err != nil {
				return err
			}
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}
