package rules

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"text/template"

	"github.com/talos-nodeinit/talos-nodeinit/pkg/contract"
	"github.com/talos-nodeinit/talos-nodeinit/pkg/facts"
)

// Result is what the rules want for one node.
type Result struct {
	// Labels are the ones the node may set itself (NodeRestriction allows them).
	Labels map[string]string
	// RequestedLabels are the ones only the coordinator may set.
	RequestedLabels map[string]string
	// Annotations come from rules only.
	Annotations map[string]string
	// Taints are always requested: nodes may never set taints.
	Taints []contract.Taint
	// Metadata is the effective platform metadata after overrides.
	Metadata facts.Platform
	// Matched names the rules that matched, in order.
	Matched []string
	// Errors are evaluation failures (a template erroring on these facts, a
	// value that is not a valid label value). The failing output is left
	// out; the rest of the result stands.
	Errors []string
}

// Evaluate applies every rule in order to the facts. A platformMetadata
// override is visible to the selectors and templates of later rules; when
// several rules set the same key, the later one wins.
func (r *Rules) Evaluate(f Facts) Result {
	res := Result{Labels: map[string]string{}, RequestedLabels: map[string]string{}, Annotations: map[string]string{}}
	f.Metadata = cloneMetadata(f.Metadata)
	if r == nil {
		res.Metadata = f.Metadata
		return res
	}
	taints := map[string]contract.Taint{}
	for _, rule := range r.rules {
		if !rule.matches(f) {
			continue
		}
		res.Matched = append(res.Matched, rule.name)
		data := newTemplateData(f)
		exec := func(field string, t *template.Template) (string, bool) {
			var b strings.Builder
			if err := t.Execute(&b, data); err != nil {
				res.Errors = append(res.Errors, fmt.Sprintf("%s: %s: %v", rule.name, field, err))
				return "", false
			}
			return b.String(), true
		}
		for _, o := range rule.labels {
			v, ok := exec("labels["+o.key+"]", o.tmpl)
			if !ok {
				continue
			}
			v = strings.TrimSpace(v)
			if err := contract.CheckLabel(o.key, v); err != nil {
				res.Errors = append(res.Errors, fmt.Sprintf("%s: labels[%s]: %v", rule.name, o.key, err))
				continue
			}
			delete(res.Labels, o.key)
			delete(res.RequestedLabels, o.key)
			if contract.NodeMaySetLabel(o.key) {
				res.Labels[o.key] = v
			} else {
				res.RequestedLabels[o.key] = v
			}
		}
		for _, o := range rule.annotations {
			if v, ok := exec("annotations["+o.key+"]", o.tmpl); ok {
				res.Annotations[o.key] = v
			}
		}
		for _, o := range rule.taints {
			v, ok := exec("taints["+o.key+"]", o.value)
			if !ok {
				continue
			}
			t := contract.Taint{Key: o.key, Value: strings.TrimSpace(v), Effect: o.effect}
			if err := t.Check(); err != nil {
				res.Errors = append(res.Errors, fmt.Sprintf("%s: taints[%s]: %v", rule.name, o.key, err))
				continue
			}
			taints[o.key+":"+string(o.effect)] = t
		}
		// Overrides see the metadata as it was when the rule matched, then
		// apply together, so their order inside one rule does not matter.
		var sets []func()
		for _, o := range rule.overrides {
			if v, ok := exec("platformMetadata["+o.field+"]", o.tmpl); ok {
				set, v := fields[o.field].set, strings.TrimSpace(v)
				sets = append(sets, func() { set(&f.Metadata, v) })
			}
		}
		for _, s := range sets {
			s()
		}
	}
	for _, k := range slices.Sorted(maps.Keys(taints)) {
		res.Taints = append(res.Taints, taints[k])
	}
	res.Metadata = f.Metadata
	return res
}

func cloneMetadata(m facts.Platform) facts.Platform {
	m.Tags = maps.Clone(m.Tags)
	return m
}

// matches: no selector matches every node; terms are ORed; expressions ANDed.
func (r compiledRule) matches(f Facts) bool {
	if len(r.terms) == 0 {
		return true
	}
	for _, term := range r.terms {
		if termMatches(term, f) {
			return true
		}
	}
	return false
}

func termMatches(exprs []expression, f Facts) bool {
	if len(exprs) == 0 {
		return false
	}
	for _, e := range exprs {
		if !e.matches(f) {
			return false
		}
	}
	return true
}

// matches follows Kubernetes node-selector semantics: NotIn and DoesNotExist
// match an absent key; Gt and Lt do not match a value that is not an integer.
func (e expression) matches(f Facts) bool {
	v, present := fields[e.key].get(f)
	switch e.op {
	case OpIn:
		return present && slices.Contains(e.values, v)
	case OpNotIn:
		return !present || !slices.Contains(e.values, v)
	case OpExists:
		return present
	case OpDoesNotExist:
		return !present
	case OpGt, OpLt:
		n, err := strconv.ParseInt(v, 10, 64)
		if !present || err != nil {
			return false
		}
		return (e.op == OpGt && n > e.num) || (e.op == OpLt && n < e.num)
	case OpRegexp:
		return present && e.re.MatchString(v)
	}
	return false
}

// Names lists the rules, for `validate` output.
func (r *Rules) Names() []string {
	if r == nil {
		return nil
	}
	names := make([]string, len(r.rules))
	for i, c := range r.rules {
		names[i] = c.name
	}
	return names
}

// LabelKeys lists every label key any rule may write, sorted.
func (r *Rules) LabelKeys() []string {
	var keys []string
	for _, c := range r.rulesOrNil() {
		for _, o := range c.labels {
			keys = append(keys, o.key)
		}
	}
	slices.Sort(keys)
	return slices.Compact(keys)
}

// TaintKeys lists every taint key any rule may request, sorted.
func (r *Rules) TaintKeys() []string {
	var keys []string
	for _, c := range r.rulesOrNil() {
		for _, o := range c.taints {
			keys = append(keys, o.key)
		}
	}
	slices.Sort(keys)
	return slices.Compact(keys)
}

func (r *Rules) rulesOrNil() []compiledRule {
	if r == nil {
		return nil
	}
	return r.rules
}
