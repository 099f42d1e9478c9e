package finalize

import (
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// Grants are what the coordinator's record says it wrote on a Node, by value: labels as
// "key=value", taints as "key=value:effect" (label keys and values hold neither "=" nor ":", so
// entries parse back). An entry without "=" is legacy, from records that kept keys only.
type Grants struct{ Labels, Taints []string }

// LabelGrant is the record entry for a label the coordinator wrote.
func LabelGrant(key, value string) string { return key + "=" + value }

// TaintGrant is the record entry for a taint the coordinator wrote.
func TaintGrant(key, value string, effect corev1.TaintEffect) string {
	return key + "=" + value + ":" + string(effect)
}

// Owned is the one place that decides what the coordinator may remove or rewrite on a Node: the
// recorded grants the Node still holds with exactly the recorded value (label key → value,
// TaintKey → value). A grant someone else changed or removed is relinquished for good; requested
// anew once absent, it is a new grant. An admin's taint on the key with another effect is never a
// grant's. A legacy entry proves no value, so it is held only when the Node's value is the one
// wanted now (want, wantTaints): one the coordinator would write anyway.
func Owned(node *corev1.Node, rec Grants, want, wantTaints map[string]string) (labels, taints map[string]string) {
	labels, taints = map[string]string{}, map[string]string{}
	for _, e := range rec.Labels {
		key, value, exact := strings.Cut(e, "=")
		if !exact {
			if value, exact = want[key]; !exact {
				continue
			}
		}
		if cur, ok := node.Labels[key]; ok && cur == value {
			labels[key] = cur
		}
	}
	onNode := map[string]string{}
	for _, t := range node.Spec.Taints {
		onNode[TaintKey(t.Key, t.Effect)] = t.Value
	}
	for _, e := range rec.Taints {
		id, value, exact := parseTaintGrant(e)
		if !exact {
			if value, exact = wantTaints[id]; !exact {
				continue
			}
		}
		if cur, ok := onNode[id]; ok && cur == value {
			taints[id] = cur
		}
	}
	return labels, taints
}

// parseTaintGrant reads a taint entry as its TaintKey and value; exact is
// false for a legacy "key:effect" entry, which records no value.
func parseTaintGrant(e string) (id, value string, exact bool) {
	key, rest, exact := strings.Cut(e, "=")
	if !exact {
		return e, "", false
	}
	i := strings.LastIndex(rest, ":")
	if i < 0 {
		return "", "", false
	}
	return TaintKey(key, corev1.TaintEffect(rest[i+1:])), rest[:i], true
}

// cutTaintKey splits a TaintKey.
func cutTaintKey(id string) (key string, effect corev1.TaintEffect, ok bool) {
	i := strings.LastIndex(id, ":")
	if i < 0 {
		return "", "", false
	}
	return id[:i], corev1.TaintEffect(id[i+1:]), true
}

// holding is after plus the grants held now (labels, taints): see Plan.Holding and Unpatched.
func holding(after Grants, labels, taints map[string]string) Grants {
	h := Grants{Labels: slices.Clone(after.Labels), Taints: slices.Clone(after.Taints)}
	for k, v := range labels {
		h.Labels = append(h.Labels, LabelGrant(k, v))
	}
	for id, v := range taints {
		if key, effect, ok := cutTaintKey(id); ok {
			h.Taints = append(h.Taints, TaintGrant(key, v, effect))
		}
	}
	slices.Sort(h.Labels)
	slices.Sort(h.Taints)
	h.Labels, h.Taints = slices.Compact(h.Labels), slices.Compact(h.Taints)
	return h
}
