package finalize

import (
	"encoding/json"
	"maps"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/talos-nodeinit/talos-nodeinit/pkg/contract"
)

const (
	web        = "node-role.kubernetes.io/web"
	db         = "node-role.kubernetes.io/db"
	noSchedule = corev1.TaintEffectNoSchedule
	noExecute  = corev1.TaintEffectNoExecute
)

// grantNode is an initialized Node with no platform metadata: the only
// labels and taints in play are the ones a case names.
func grantNode(t *testing.T, labels map[string]string, taints []corev1.Taint, requested map[string]string, requestedTaints []contract.Taint) *corev1.Node {
	t.Helper()
	node := reportedNode(t, requested, requestedTaints)
	delete(node.Annotations, contract.AnnotationMetadata)
	node.Labels, node.Spec.Taints = maps.Clone(labels), slices.Clone(taints)
	return node
}

// applyPatch applies a Compute patch as the API server applies a JSON merge
// patch of its shape: labels merged (null deletes), the taint list replaced.
func applyPatch(t testing.TB, node *corev1.Node, p []byte) *corev1.Node {
	t.Helper()
	out := node.DeepCopy()
	if p == nil {
		return out
	}
	var m struct {
		Metadata struct {
			Labels map[string]*string `json:"labels"`
		} `json:"metadata"`
		Spec struct {
			Taints *[]corev1.Taint `json:"taints"`
		} `json:"spec"`
	}
	if err := json.Unmarshal(p, &m); err != nil {
		t.Fatal(err)
	}
	if out.Labels == nil {
		out.Labels = map[string]string{}
	}
	for k, v := range m.Metadata.Labels {
		if v == nil {
			delete(out.Labels, k)
		} else {
			out.Labels[k] = *v
		}
	}
	if m.Spec.Taints != nil {
		out.Spec.Taints = *m.Spec.Taints
	}
	return out
}

func taintsEqual(a, b []corev1.Taint) bool {
	key := func(t corev1.Taint) string { return t.Key + "=" + t.Value + ":" + string(t.Effect) }
	x, y := make([]string, len(a)), make([]string, len(b))
	for i := range a {
		x[i] = key(a[i])
	}
	for i := range b {
		y[i] = key(b[i])
	}
	slices.Sort(x)
	slices.Sort(y)
	return slices.Equal(x, y)
}

// The cases the coordinator must refuse to do to a Node: it removes or
// rewrites only the exact label (key=value) or taint (key=value:effect) it
// wrote, and relinquishes a grant the moment someone else changes it.
func TestGrantOwnership(t *testing.T) {
	for _, c := range []struct {
		name            string
		cluster         string
		labels          map[string]string
		taints          []corev1.Taint
		requested       map[string]string
		requestedTaints []contract.Taint
		record          Grants
		wantLabels      map[string]string
		wantTaints      []corev1.Taint
		wantRecord      Grants
		wantRefused     string
	}{
		{
			name:   "an admin changed a granted label's value: not rewritten, relinquished",
			labels: map[string]string{web: "x"}, requested: map[string]string{web: "a"},
			record:     Grants{Labels: []string{web + "=a"}},
			wantLabels: map[string]string{web: "x"}, wantRefused: "by someone else",
		},
		{
			name:   "an admin changed a granted label's value, then the node withdrew it: not removed",
			labels: map[string]string{web: "x"},
			record: Grants{Labels: []string{web + "=a"}}, wantLabels: map[string]string{web: "x"},
		},
		{
			name:   "the node withdrew a label: only the exact key=value written is removed",
			labels: map[string]string{web: "a", db: "admin"},
			record: Grants{Labels: []string{web + "=a"}}, wantLabels: map[string]string{db: "admin"},
		},
		{
			name:   "the node asks for another value of a label the coordinator wrote: rewritten",
			labels: map[string]string{web: "a"}, requested: map[string]string{web: "b"},
			record:     Grants{Labels: []string{web + "=a"}},
			wantLabels: map[string]string{web: "b"}, wantRecord: Grants{Labels: []string{web + "=b"}},
		},
		{
			name:   "an admin removed a granted label the node still asks for: added again, a new grant",
			labels: map[string]string{}, requested: map[string]string{web: "a"},
			record:     Grants{Labels: []string{web + "=a"}},
			wantLabels: map[string]string{web: "a"}, wantRecord: Grants{Labels: []string{web + "=a"}},
		},
		{
			name:   "an admin's label with the requested value: not recorded, so never removed",
			labels: map[string]string{web: "a"}, requested: map[string]string{web: "a"},
			wantLabels: map[string]string{web: "a"},
		},
		{
			name:    "an admin changed the coordinator's configured label: not rewritten, relinquished",
			cluster: "prod", labels: map[string]string{contract.LabelClusterName: "staging"},
			record:     Grants{Labels: []string{contract.LabelClusterName + "=prod"}},
			wantLabels: map[string]string{contract.LabelClusterName: "staging"}, wantRefused: "by someone else",
		},
		{
			name:   "legacy key-only entry, an admin changed the value: not rewritten, relinquished",
			labels: map[string]string{web: "x"}, requested: map[string]string{web: "a"},
			record:     Grants{Labels: []string{web}},
			wantLabels: map[string]string{web: "x"}, wantRefused: "by someone else",
		},
		{
			name:   "legacy key-only entry, request withdrawn: the value cannot be proven ours, not removed",
			labels: map[string]string{web: "a"},
			record: Grants{Labels: []string{web}}, wantLabels: map[string]string{web: "a"},
		},
		{
			name:   "legacy key-only entry holding the wanted value: owned, recorded with its value",
			labels: map[string]string{web: "a"}, requested: map[string]string{web: "a"},
			record:     Grants{Labels: []string{web}},
			wantLabels: map[string]string{web: "a"}, wantRecord: Grants{Labels: []string{web + "=a"}},
		},
		{
			name:       "an admin added a taint on a granted key with another effect: never removed",
			taints:     []corev1.Taint{{Key: "dedicated", Value: "web", Effect: noSchedule}, {Key: "dedicated", Value: "quarantine", Effect: noExecute}},
			record:     Grants{Taints: []string{"dedicated=web:NoSchedule"}},
			wantTaints: []corev1.Taint{{Key: "dedicated", Value: "quarantine", Effect: noExecute}},
		},
		{
			name:            "a requested taint beside an admin's on the same key with another effect: added, the admin's kept",
			taints:          []corev1.Taint{{Key: "dedicated", Value: "quarantine", Effect: noExecute}},
			requestedTaints: []contract.Taint{{Key: "dedicated", Value: "web", Effect: noSchedule}},
			wantTaints:      []corev1.Taint{{Key: "dedicated", Value: "quarantine", Effect: noExecute}, {Key: "dedicated", Value: "web", Effect: noSchedule}},
			wantRecord:      Grants{Taints: []string{"dedicated=web:NoSchedule"}},
		},
		{
			name:       "an admin changed a granted taint's value, then the node withdrew it: not removed, relinquished",
			taints:     []corev1.Taint{{Key: "dedicated", Value: "quarantine", Effect: noExecute}},
			record:     Grants{Taints: []string{"dedicated=web:NoExecute"}},
			wantTaints: []corev1.Taint{{Key: "dedicated", Value: "quarantine", Effect: noExecute}},
		},
		{
			name:            "an admin changed a granted taint's value, the node still asks: not rewritten",
			taints:          []corev1.Taint{{Key: "dedicated", Value: "quarantine", Effect: noExecute}},
			requestedTaints: []contract.Taint{{Key: "dedicated", Value: "web", Effect: noExecute}},
			record:          Grants{Taints: []string{"dedicated=web:NoExecute"}},
			wantTaints:      []corev1.Taint{{Key: "dedicated", Value: "quarantine", Effect: noExecute}}, wantRefused: "by someone else",
		},
		{
			name:       "legacy key:effect entry, an admin changed the value, request withdrawn: not removed",
			taints:     []corev1.Taint{{Key: "dedicated", Value: "quarantine", Effect: noExecute}},
			record:     Grants{Taints: []string{"dedicated:NoExecute"}},
			wantTaints: []corev1.Taint{{Key: "dedicated", Value: "quarantine", Effect: noExecute}},
		},
		{
			name:            "legacy key:effect entry holding the wanted value: owned, recorded with its value",
			taints:          []corev1.Taint{{Key: "dedicated", Value: "web", Effect: noExecute}},
			requestedTaints: []contract.Taint{{Key: "dedicated", Value: "web", Effect: noExecute}},
			record:          Grants{Taints: []string{"dedicated:NoExecute"}},
			wantTaints:      []corev1.Taint{{Key: "dedicated", Value: "web", Effect: noExecute}},
			wantRecord:      Grants{Taints: []string{"dedicated=web:NoExecute"}},
		},
		{
			name:       "the node withdrew a taint: only the exact key=value:effect written is removed",
			taints:     []corev1.Taint{{Key: "dedicated", Value: "web", Effect: noSchedule}, {Key: "team", Value: "x", Effect: noExecute}},
			record:     Grants{Taints: []string{"dedicated=web:NoSchedule"}},
			wantTaints: []corev1.Taint{{Key: "team", Value: "x", Effect: noExecute}},
		},
		{
			name:            "an admin removed a granted taint the node still asks for: added again, a new grant",
			requestedTaints: []contract.Taint{{Key: "dedicated", Value: "web", Effect: noSchedule}},
			record:          Grants{Taints: []string{"dedicated=web:NoSchedule"}},
			wantTaints:      []corev1.Taint{{Key: "dedicated", Value: "web", Effect: noSchedule}},
			wantRecord:      Grants{Taints: []string{"dedicated=web:NoSchedule"}},
		},
		{
			name:            "the node asks for another value of a taint the coordinator wrote: rewritten",
			taints:          []corev1.Taint{{Key: "dedicated", Value: "web", Effect: noSchedule}},
			requestedTaints: []contract.Taint{{Key: "dedicated", Value: "db", Effect: noSchedule}},
			record:          Grants{Taints: []string{"dedicated=web:NoSchedule"}},
			wantTaints:      []corev1.Taint{{Key: "dedicated", Value: "db", Effect: noSchedule}},
			wantRecord:      Grants{Taints: []string{"dedicated=db:NoSchedule"}},
		},
	} {
		t.Run(c.name, func(t *testing.T) {
			node := grantNode(t, c.labels, c.taints, c.requested, c.requestedTaints)
			plan, err := Compute(node, Read(node), Inputs{Grants: grants(t), ClusterName: c.cluster, PreviousLabels: c.record.Labels, PreviousTaints: c.record.Taints})
			if err != nil {
				t.Fatal(err)
			}
			after := applyPatch(t, node, plan.Patch)
			if !maps.Equal(after.Labels, c.wantLabels) && (len(after.Labels) > 0 || len(c.wantLabels) > 0) {
				t.Errorf("labels after the patch %v, want %v (patch %s)", after.Labels, c.wantLabels, plan.Patch)
			}
			if !taintsEqual(after.Spec.Taints, c.wantTaints) {
				t.Errorf("taints after the patch %v, want %v (patch %s)", after.Spec.Taints, c.wantTaints, plan.Patch)
			}
			rec := recordAfter(node, plan, c.record)
			if !slices.Equal(rec.Labels, c.wantRecord.Labels) || !slices.Equal(rec.Taints, c.wantRecord.Taints) {
				t.Errorf("record %+v, want %+v", rec, c.wantRecord)
			}
			if got := strings.Join(plan.Refused, "; "); (c.wantRefused == "") != (got == "") || !strings.Contains(got, c.wantRefused) {
				t.Errorf("refused %q, want %q", got, c.wantRefused)
			}
		})
	}
}

// recordAfter is the record once the patch is applied (the controller
// writes Holding before the patch and Owns after it).
func recordAfter(_ *corev1.Node, plan Plan, _ Grants) Grants { return plan.Owns }
