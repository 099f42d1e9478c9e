// Package rules implements Talos CCM's node `transformations` format: rules
// selecting nodes by platform metadata and system information, producing
// labels, annotations, taints and platform-metadata overrides.
//
// Everything that can be checked is checked when the file is loaded: every
// regexp and template compiled, every key validated, unknown YAML keys
// refused. A bad file is one error naming each rule and field at fault; a
// loaded file never panics at evaluation.
package rules

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"strconv"
	"strings"
	"text/template"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	"go.yaml.in/yaml/v3"

	"github.com/talos-nodeinit/talos-nodeinit/pkg/contract"
)

// File is the YAML document: the `transformations` list, as in Talos CCM's config.
type File struct {
	Transformations []Rule `yaml:"transformations"`
}

// Rule is one transformation.
type Rule struct {
	Name             string            `yaml:"name,omitempty"`
	NodeSelector     []SelectorTerm    `yaml:"nodeSelector,omitempty"`
	Labels           map[string]string `yaml:"labels,omitempty"`
	Annotations      map[string]string `yaml:"annotations,omitempty"`
	Taints           map[string]string `yaml:"taints,omitempty"`
	PlatformMetadata map[string]string `yaml:"platformMetadata,omitempty"`
	Features         Features          `yaml:"features,omitempty"`
}

// SelectorTerm matches when all its expressions match; terms are ORed.
type SelectorTerm struct {
	MatchExpressions []Expression `yaml:"matchExpressions"`
}

// Expression is one requirement on a fact.
type Expression struct {
	Key      string   `yaml:"key"`
	Operator string   `yaml:"operator"`
	Values   []string `yaml:"values,omitempty"`
}

// Features is Talos CCM's per-rule feature flags. Its one flag is parsed
// only to be refused with a reason (see compileRule), not "field not found".
type Features struct {
	PublicIPDiscovery *bool `yaml:"publicIPDiscovery,omitempty"`
}

// publicIPDiscoveryRefusal says why features.publicIPDiscovery does nothing
// here: what Talos CCM's flag adds, the agent always does.
const publicIPDiscoveryRefusal = "not supported: nodeinit-agent has no per-rule public IP discovery; on every platform it " +
	"reports as ExternalIP the public addresses on the node's interfaces and those Talos puts on its \"external\" link " +
	"from platform metadata (AddressStatus), which covers what Talos CCM's publicIPDiscovery adds; remove the key " +
	"(to keep a link's addresses out, use the agent's --exclude-links)"

// Operators.
const (
	OpIn           = "In"
	OpNotIn        = "NotIn"
	OpExists       = "Exists"
	OpDoesNotExist = "DoesNotExist"
	OpGt           = "Gt"
	OpLt           = "Lt"
	OpRegexp       = "Regexp"
)

// Rules is a loaded, fully validated rules file.
type Rules struct {
	rules []compiledRule
}

type compiledRule struct {
	name        string // for errors and explain: the name, or transformations[i]
	terms       [][]expression
	labels      []output
	annotations []output
	taints      []taintOutput
	overrides   []override
}

type expression struct {
	key    string // lower-case
	op     string
	values []string
	num    int64
	re     *regexp.Regexp
}

type output struct {
	key  string
	tmpl *template.Template
}

type taintOutput struct {
	key    string
	value  *template.Template
	effect corev1.TaintEffect
}

type override struct {
	field string // lower-case name in fields
	tmpl  *template.Template
}

// LoadFile reads and validates a rules file.
func LoadFile(path string) (*Rules, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	r, err := Load(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return r, nil
}

// Load parses and validates a rules document. The error lists every problem.
// An empty document is an empty rule set.
func Load(data []byte) (*Rules, error) {
	var f File
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&f); err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("parsing rules: %w", err)
	}
	var extra any
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return nil, errors.New("parsing rules: more than one YAML document")
	}
	return Compile(f)
}

// Compile validates a File. Every error names its rule and field.
func Compile(f File) (*Rules, error) {
	var errs []error
	out := &Rules{}
	for i, r := range f.Transformations {
		c, rerrs := compileRule(i, r)
		errs = append(errs, rerrs...)
		out.rules = append(out.rules, c)
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return out, nil
}

func compileRule(i int, r Rule) (compiledRule, []error) {
	c := compiledRule{name: fmt.Sprintf("transformations[%d]", i)}
	if r.Name != "" {
		c.name = fmt.Sprintf("transformations[%d] (%s)", i, r.Name)
	}
	var errs []error
	fail := func(field, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s: %s: %s", c.name, field, fmt.Sprintf(format, args...)))
	}
	// ownDomain refuses keys of the agent↔coordinator contract: a rule
	// writing nodeinit.io/csr-review would make the two fight over it.
	ownDomain := func(at, key string) bool {
		if !contract.InDomain(key) {
			return false
		}
		fail(at, "key %q is in %s, the domain of the agent↔coordinator contract, which rules may not write; use a domain of your own (example.com/…)", key, contract.Domain)
		return true
	}
	if r.Features.PublicIPDiscovery != nil {
		fail("features.publicIPDiscovery", publicIPDiscoveryRefusal)
	}

	for ti, term := range r.NodeSelector {
		if len(term.MatchExpressions) == 0 {
			fail(fmt.Sprintf("nodeSelector[%d].matchExpressions", ti), "must not be empty (an empty term would match every node)")
		}
		var exprs []expression
		for ei, e := range term.MatchExpressions {
			at := fmt.Sprintf("nodeSelector[%d].matchExpressions[%d] (key %q)", ti, ei, e.Key)
			x, err := compileExpression(e)
			if err != nil {
				fail(at, "%v", err)
				continue
			}
			exprs = append(exprs, x)
		}
		c.terms = append(c.terms, exprs)
	}

	// compileOutputs validates the keys of a labels or annotations map and
	// compiles its value templates.
	compileOutputs := func(field, kind string, m map[string]string) []output {
		var outs []output
		for _, k := range sortedKeys(m) {
			at := field + "[" + k + "]"
			if errs := validation.IsQualifiedName(k); len(errs) > 0 {
				fail(at, "invalid %s key: %s", kind, strings.Join(errs, "; "))
				continue
			}
			if ownDomain(at, k) {
				continue
			}
			t, err := compileTemplate(at, m[k])
			if err != nil {
				fail(at, "%v", err)
				continue
			}
			outs = append(outs, output{k, t})
		}
		return outs
	}
	c.labels = compileOutputs("labels", "label", r.Labels)
	c.annotations = compileOutputs("annotations", "annotation", r.Annotations)
	for _, k := range sortedKeys(r.Taints) {
		at := "taints[" + k + "]"
		if errs := validation.IsQualifiedName(k); len(errs) > 0 {
			fail(at, "invalid taint key: %s", strings.Join(errs, "; "))
			continue
		}
		if ownDomain(at, k) {
			continue
		}
		value, effect := "", r.Taints[k]
		if i := strings.LastIndex(effect, ":"); i >= 0 {
			value, effect = effect[:i], effect[i+1:]
		}
		switch corev1.TaintEffect(effect) {
		case corev1.TaintEffectNoSchedule, corev1.TaintEffectPreferNoSchedule, corev1.TaintEffectNoExecute:
		default:
			fail(at, "effect %q must be NoSchedule, PreferNoSchedule or NoExecute (write \"value:Effect\" or \"Effect\")", effect)
			continue
		}
		t, err := compileTemplate(at, value)
		if err != nil {
			fail(at, "%v", err)
			continue
		}
		c.taints = append(c.taints, taintOutput{k, t, corev1.TaintEffect(effect)})
	}
	for _, k := range sortedKeys(r.PlatformMetadata) {
		at := "platformMetadata[" + k + "]"
		lk := strings.ToLower(k)
		f, ok := fields[lk]
		if !ok || f.set == nil {
			fail(at, "cannot be overridden; the keys that can are: %s", fieldNames(true))
			continue
		}
		t, err := compileTemplate(at, r.PlatformMetadata[k])
		if err != nil {
			fail(at, "%v", err)
			continue
		}
		c.overrides = append(c.overrides, override{lk, t})
	}
	return c, errs
}

func compileExpression(e Expression) (expression, error) {
	x := expression{key: strings.ToLower(e.Key), op: e.Operator, values: e.Values}
	if _, ok := fields[x.key]; !ok {
		return x, fmt.Errorf("key %q is not a known fact; known keys (case-insensitive): %s", e.Key, fieldNames(false))
	}
	switch e.Operator {
	case OpIn, OpNotIn:
		if len(e.Values) == 0 {
			return x, fmt.Errorf("operator %s needs at least one value", e.Operator)
		}
	case OpExists, OpDoesNotExist:
		if len(e.Values) != 0 {
			return x, fmt.Errorf("operator %s takes no values", e.Operator)
		}
	case OpGt, OpLt:
		if len(e.Values) != 1 {
			return x, fmt.Errorf("operator %s needs exactly one value", e.Operator)
		}
		n, err := strconv.ParseInt(e.Values[0], 10, 64)
		if err != nil {
			return x, fmt.Errorf("operator %s needs an integer value, got %q", e.Operator, e.Values[0])
		}
		x.num = n
	case OpRegexp:
		if len(e.Values) != 1 {
			return x, fmt.Errorf("operator %s needs exactly one value", e.Operator)
		}
		re, err := regexp.Compile(e.Values[0])
		if err != nil {
			return x, fmt.Errorf("invalid regexp %q: %v", e.Values[0], err)
		}
		x.re = re
	default:
		return x, fmt.Errorf("operator %q is not one of In, NotIn, Exists, DoesNotExist, Gt, Lt, Regexp", e.Operator)
	}
	return x, nil
}

// compileTemplate parses a template and runs it once on empty facts, which
// catches unknown fields (.Platfrom) and bad constant regexps at load time.
func compileTemplate(name, text string) (*template.Template, error) {
	t, err := template.New(name).Funcs(funcs).Option("missingkey=zero").Parse(text)
	if err != nil {
		return nil, fmt.Errorf("invalid template %q: %v", text, err)
	}
	if err := t.Execute(io.Discard, newTemplateData(Facts{})); err != nil {
		return nil, fmt.Errorf("template %q fails on empty facts: %v", text, err)
	}
	return t, nil
}
