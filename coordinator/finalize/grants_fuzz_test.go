package finalize

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/talos-nodeinit/talos-nodeinit/coordinator/config"
	"github.com/talos-nodeinit/talos-nodeinit/pkg/contract"
)

// ownershipWorld is a Node, what its agent requests, the coordinator's
// record, and what the coordinator provably wrote and still holds on the
// Node (the model the invariant is checked against).
type ownershipWorld struct {
	t               *testing.T
	grants          config.Grants
	labels          map[string]string
	taints          []corev1.Taint
	requested       map[string]string
	requestedTaints []contract.Taint
	record          Grants
	// wrote is label key → value, wroteTaints TaintKey → value: what the
	// coordinator's patches wrote and nobody changed since.
	wrote, wroteTaints map[string]string
	log                []string
}

var (
	fuzzLabelKeys = []string{web, db, contract.LabelClusterName}
	fuzzTaintKeys = []string{"dedicated", "example.com/gpu", "team"}
	fuzzValues    = []string{"a", "b", "x"}
	fuzzEffects   = []corev1.TaintEffect{noSchedule, noExecute, corev1.TaintEffectPreferNoSchedule}
)

// step plays one action (the node's agent or an admin), then one
// coordinator sync.
func (w *ownershipWorld) step(action, param byte) {
	k, v, e := int(param)%3, fuzzValues[int(param/3)%3], fuzzEffects[int(param/9)%3]
	lk, tk := fuzzLabelKeys[k], fuzzTaintKeys[k]
	same := func(t corev1.Taint) bool { return t.Key == tk && t.Effect == e }
	switch action % 8 {
	case 0:
		w.requested[lk] = v
		w.say("node requests label %s=%s", lk, v)
	case 1:
		delete(w.requested, lk)
		w.say("node withdraws label %s", lk)
	case 2:
		w.labels[lk] = v
		w.say("admin sets label %s=%s", lk, v)
	case 3:
		delete(w.labels, lk)
		w.say("admin removes label %s", lk)
	case 4:
		w.requestedTaints = slices.DeleteFunc(w.requestedTaints, func(t contract.Taint) bool { return t.Key == tk && t.Effect == e })
		w.requestedTaints = append(w.requestedTaints, contract.Taint{Key: tk, Value: v, Effect: e})
		w.say("node requests taint %s=%s:%s", tk, v, e)
	case 5:
		w.requestedTaints = slices.DeleteFunc(w.requestedTaints, func(t contract.Taint) bool { return t.Key == tk })
		w.say("node withdraws taint %s", tk)
	case 6:
		w.taints = append(slices.DeleteFunc(w.taints, same), corev1.Taint{Key: tk, Value: v, Effect: e})
		w.say("admin sets taint %s=%s:%s", tk, v, e)
	case 7:
		w.taints = slices.DeleteFunc(w.taints, same)
		w.say("admin removes taint %s:%s", tk, e)
	}
	w.sync()
}

func (w *ownershipWorld) say(format string, args ...any) {
	w.log = append(w.log, fmt.Sprintf(format, args...))
}

// sync runs Compute, applies its patch, and checks the invariant: every
// label or taint the patch removes or changes holds exactly the value the
// coordinator last wrote, and nobody changed it since.
func (w *ownershipWorld) sync() {
	w.t.Helper()
	// Whatever is no longer on the Node as written was changed (or
	// removed) by someone else: relinquished, never to be touched again.
	for k, v := range w.wrote {
		if cur, ok := w.labels[k]; !ok || cur != v {
			delete(w.wrote, k)
		}
	}
	before := taintValues(w.taints)
	for id, v := range w.wroteTaints {
		if cur, ok := before[id]; !ok || cur != v {
			delete(w.wroteTaints, id)
		}
	}
	node := grantNode(w.t, w.labels, w.taints, w.requested, w.requestedTaints)
	plan, err := Compute(node, Read(node), Inputs{Grants: w.grants, ClusterName: "prod", PreviousLabels: w.record.Labels, PreviousTaints: w.record.Taints})
	if err != nil {
		w.t.Fatal(err)
	}
	after := applyPatch(w.t, node, plan.Patch)
	for k, was := range w.labels {
		if now, ok := after.Labels[k]; ok && now == was {
			continue
		}
		if wrote, ok := w.wrote[k]; !ok || wrote != was {
			w.fail("the patch %s removed or rewrote label %s=%s, which the coordinator does not hold", plan.Patch, k, was)
		}
	}
	for k, now := range after.Labels {
		if was, ok := w.labels[k]; !ok || was != now {
			w.wrote[k] = now
		}
	}
	for k := range w.wrote {
		if _, ok := after.Labels[k]; !ok {
			delete(w.wrote, k)
		}
	}
	now := taintValues(after.Spec.Taints)
	for id, was := range before {
		if v, ok := now[id]; ok && v == was {
			continue
		}
		if wrote, ok := w.wroteTaints[id]; !ok || wrote != was {
			w.fail("the patch %s removed or rewrote taint %s (value %q), which the coordinator does not hold", plan.Patch, id, was)
		}
	}
	for id, v := range now {
		if was, ok := before[id]; !ok || was != v {
			w.wroteTaints[id] = v
		}
	}
	for id := range w.wroteTaints {
		if _, ok := now[id]; !ok {
			delete(w.wroteTaints, id)
		}
	}
	w.progress(node, after)
	w.labels, w.taints = after.Labels, after.Spec.Taints
	w.record = recordAfter(node, plan, w.record)
	w.checkRecord()
}

// progress: the invariant is not kept by doing nothing. A request whose
// key (and effect) the Node lacked is granted; a grant the coordinator held
// and the node withdrew is gone.
func (w *ownershipWorld) progress(before, after *corev1.Node) {
	w.t.Helper()
	for k, v := range w.requested {
		if _, was := before.Labels[k]; !was && k != contract.LabelClusterName && after.Labels[k] != v {
			w.fail("requested label %s=%s was absent and is not granted", k, v)
		}
	}
	had, now := taintValues(before.Spec.Taints), taintValues(after.Spec.Taints)
	for _, t := range w.requestedTaints {
		id := TaintKey(t.Key, t.Effect)
		if _, was := had[id]; !was && now[id] != t.Value {
			w.fail("requested taint %s=%s was absent and is not granted", id, t.Value)
		}
	}
	for _, e := range w.record.Labels {
		k, v, _ := strings.Cut(e, "=")
		if _, asked := w.requested[k]; !asked && k != contract.LabelClusterName && before.Labels[k] == v && after.Labels[k] == v {
			w.fail("label %s=%s, granted and withdrawn, is still there", k, v)
		}
	}
}

// checkRecord: the record says exactly what the coordinator holds, values
// included, so the next sync decides from the truth.
func (w *ownershipWorld) checkRecord() {
	w.t.Helper()
	var labels, taints []string
	for k, v := range w.wrote {
		labels = append(labels, LabelGrant(k, v))
	}
	for id, v := range w.wroteTaints {
		key, effect, _ := cutTaintKey(id)
		taints = append(taints, TaintGrant(key, v, effect))
	}
	slices.Sort(labels)
	slices.Sort(taints)
	if !slices.Equal(labels, w.record.Labels) || !slices.Equal(taints, w.record.Taints) {
		w.fail("record %+v, but the coordinator holds labels %v and taints %v", w.record, labels, taints)
	}
}

func (w *ownershipWorld) fail(format string, args ...any) {
	w.t.Helper()
	w.t.Fatalf("%s\nafter:\n  %s", fmt.Sprintf(format, args...), strings.Join(w.log, "\n  "))
}

func taintValues(taints []corev1.Taint) map[string]string {
	m := map[string]string{}
	for _, t := range taints {
		m[TaintKey(t.Key, t.Effect)] = t.Value
	}
	return m
}

// FuzzGrantOwnership plays random sequences of node requests and admin
// changes (two bytes a step: the action and its key, value and effect)
// against the coordinator, checking the ownership invariant after each.
func FuzzGrantOwnership(f *testing.F) {
	for _, seed := range [][]byte{
		{0, 0, 2, 6},                   // granted web=a; an admin sets web=x: never rewritten
		{0, 0, 2, 6, 1, 0},             // ... then the node withdraws: never removed
		{4, 9, 6, 12, 5, 0},            // granted dedicated=a:NoExecute; admin changes it; withdrawn
		{4, 0, 6, 9, 5, 0},             // admin adds dedicated:NoExecute beside the grant; withdrawn
		{0, 0, 3, 0, 0, 0, 1, 0},       // admin removes a grant; re-added; withdrawn: removed
		{0, 0, 0, 3, 1, 0},             // the node changes its value; withdraws
		{2, 2, 2, 5, 0, 2},             // an admin's clustername is never rewritten
		{4, 1, 4, 4, 7, 4, 6, 1, 5, 1}, // a second key's taint, its value changed, removed, re-set
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, steps []byte) {
		if len(steps) > 64 {
			steps = steps[:64]
		}
		w := &ownershipWorld{t: t, grants: grants(t), labels: map[string]string{}, requested: map[string]string{},
			wrote: map[string]string{}, wroteTaints: map[string]string{}}
		w.sync() // the configured cluster name is the coordinator's first grant
		for i := 0; i+1 < len(steps); i += 2 {
			w.step(steps[i], steps[i+1])
		}
	})
}
