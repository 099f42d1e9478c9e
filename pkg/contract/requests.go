package contract

import (
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"
)

// maxEntries bounds the labels, keys and taints one payload may carry.
const maxEntries = 256

type labelsWire struct {
	V      int               `json:"v"`
	Labels map[string]string `json:"labels"`
}

func (w labelsWire) version() int { return w.V }

// EncodeRequestedLabels renders the nodeinit.io/requested-labels annotation.
func EncodeRequestedLabels(labels map[string]string) (string, error) {
	if err := checkLabels(labels); err != nil {
		return "", err
	}
	if labels == nil {
		labels = map[string]string{}
	}
	return encode(labelsWire{V: PayloadVersion, Labels: labels})
}

// DecodeRequestedLabels parses the nodeinit.io/requested-labels annotation.
func DecodeRequestedLabels(value string) (map[string]string, error) {
	w, err := decode[labelsWire](AnnotationRequestedLabels, value)
	if err != nil {
		return nil, err
	}
	if err := checkLabels(w.Labels); err != nil {
		return nil, fmt.Errorf("%s: %w", AnnotationRequestedLabels, err)
	}
	if w.Labels == nil {
		w.Labels = map[string]string{}
	}
	return w.Labels, nil
}

func checkLabels(labels map[string]string) error {
	if len(labels) > maxEntries {
		return fmt.Errorf("%d labels, limit %d", len(labels), maxEntries)
	}
	for k, v := range labels {
		if err := CheckLabel(k, v); err != nil {
			return err
		}
	}
	return nil
}

// CheckLabel validates a label key and value as the API server would.
func CheckLabel(key, value string) error {
	if errs := validation.IsQualifiedName(key); len(errs) > 0 {
		return fmt.Errorf("label key %q: %s", key, strings.Join(errs, "; "))
	}
	if errs := validation.IsValidLabelValue(value); len(errs) > 0 {
		return fmt.Errorf("label %q value %q: %s", key, value, strings.Join(errs, "; "))
	}
	return nil
}

type keysWire struct {
	V    int      `json:"v"`
	Keys []string `json:"keys"`
}

func (w keysWire) version() int { return w.V }

// EncodeKeys renders nodeinit.io/owned-labels, nodeinit.io/owned-annotations
// or nodeinit.io/granted-labels: a sorted, de-duplicated set of keys.
func EncodeKeys(keys []string) (string, error) {
	set := slices.Clone(keys)
	slices.Sort(set)
	set = slices.Compact(set)
	if set == nil {
		set = []string{}
	}
	if err := checkKeys(set); err != nil {
		return "", err
	}
	return encode(keysWire{V: PayloadVersion, Keys: set})
}

// DecodeKeys parses an annotation written by EncodeKeys; key names the
// annotation, for the error message.
func DecodeKeys(key, value string) ([]string, error) {
	w, err := decode[keysWire](key, value)
	if err != nil {
		return nil, err
	}
	if err := checkKeys(w.Keys); err != nil {
		return nil, fmt.Errorf("%s: %w", key, err)
	}
	slices.Sort(w.Keys)
	return slices.Compact(w.Keys), nil
}

func checkKeys(keys []string) error {
	if len(keys) > maxEntries {
		return fmt.Errorf("%d keys, limit %d", len(keys), maxEntries)
	}
	for _, k := range keys {
		if errs := validation.IsQualifiedName(k); len(errs) > 0 {
			return fmt.Errorf("label key %q: %s", k, strings.Join(errs, "; "))
		}
	}
	return nil
}

// Taint is a taint requested by the rules. The node cannot set taints, so the
// coordinator applies the ones its policy grants.
type Taint struct {
	Key    string             `json:"key"`
	Value  string             `json:"value,omitempty"`
	Effect corev1.TaintEffect `json:"effect"`
}

// Check validates the taint as the API server would.
func (t Taint) Check() error {
	if errs := validation.IsQualifiedName(t.Key); len(errs) > 0 {
		return fmt.Errorf("taint key %q: %s", t.Key, strings.Join(errs, "; "))
	}
	if errs := validation.IsValidLabelValue(t.Value); len(errs) > 0 {
		return fmt.Errorf("taint %q value %q: %s", t.Key, t.Value, strings.Join(errs, "; "))
	}
	switch t.Effect {
	case corev1.TaintEffectNoSchedule, corev1.TaintEffectPreferNoSchedule, corev1.TaintEffectNoExecute:
		return nil
	default:
		return fmt.Errorf("taint %q effect %q: must be NoSchedule, PreferNoSchedule or NoExecute", t.Key, t.Effect)
	}
}

type taintsWire struct {
	V      int     `json:"v"`
	Taints []Taint `json:"taints"`
}

func (w taintsWire) version() int { return w.V }

// EncodeRequestedTaints renders nodeinit.io/requested-taints, sorted by key
// and effect so equal sets give equal annotations.
func EncodeRequestedTaints(taints []Taint) (string, error) {
	if err := checkTaints(taints); err != nil {
		return "", err
	}
	sorted := slices.Clone(taints)
	slices.SortFunc(sorted, compareTaints)
	sorted = slices.Compact(sorted)
	if sorted == nil {
		sorted = []Taint{}
	}
	return encode(taintsWire{V: PayloadVersion, Taints: sorted})
}

// DecodeRequestedTaints parses nodeinit.io/requested-taints.
func DecodeRequestedTaints(value string) ([]Taint, error) {
	w, err := decode[taintsWire](AnnotationRequestedTaints, value)
	if err != nil {
		return nil, err
	}
	if err := checkTaints(w.Taints); err != nil {
		return nil, fmt.Errorf("%s: %w", AnnotationRequestedTaints, err)
	}
	return w.Taints, nil
}

func checkTaints(taints []Taint) error {
	if len(taints) > maxEntries {
		return fmt.Errorf("%d taints, limit %d", len(taints), maxEntries)
	}
	for _, t := range taints {
		if err := t.Check(); err != nil {
			return err
		}
	}
	return nil
}

func compareTaints(a, b Taint) int {
	if c := strings.Compare(a.Key, b.Key); c != 0 {
		return c
	}
	if c := strings.Compare(string(a.Effect), string(b.Effect)); c != 0 {
		return c
	}
	return strings.Compare(a.Value, b.Value)
}

// Uninitialized reports whether the Node still has the uninitialized taint:
// it waits for the coordinator's initializing patch, which removes it.
func Uninitialized(node *corev1.Node) bool {
	return slices.ContainsFunc(node.Spec.Taints, func(t corev1.Taint) bool { return t.Key == TaintUninitialized })
}
