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
	"cmp"
	"fmt"
	"io"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"text/template"
	"text/template/parse"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	"go.yaml.in/yaml/v4"

	"github.com/talos-nodeinit/talos-nodeinit/pkg/contract"
	"github.com/talos-nodeinit/talos-nodeinit/pkg/suggest"
)

// File is the YAML document: Talos CCM's configuration format, a `global`
// section and the `transformations` list.
type File struct {
	Global          Global `yaml:"global,omitempty"`
	Transformations []Rule `yaml:"transformations"`
	// at is where each rule and field is in the file, by path
	// ("transformations[0].labels[a]"), when it was read from YAML.
	at map[string]Pos
}

// Global holds the options for every node.
type Global struct {
	// BetaTopologyLabels also sets the deprecated beta labels Talos CCM (and
	// every cloud provider's node controller) sets next to the stable ones:
	// beta.kubernetes.io/instance-type and
	// failure-domain.beta.kubernetes.io/{region,zone}. A node may set them
	// itself (NodeRestriction allows them).
	BetaTopologyLabels bool `yaml:"betaTopologyLabels,omitempty"`
	// PreferIPv6 lists IPv6 addresses before IPv4 ones in status.addresses
	// (InternalIP and ExternalIP), as Talos CCM's global.preferIPv6 does;
	// false lists IPv4 first; unset keeps the kubelet's node-IP order.
	PreferIPv6 *bool `yaml:"preferIPv6,omitempty"`
	// ClusterName is Talos CCM's global.clusterName, read only to say where
	// it goes now: the coordinator's configuration.
	ClusterName    string `yaml:"clusterName,omitempty"`
	clusterNameSet bool
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
	// Name documents the term (Talos CCM's example rules name theirs); it
	// is shown in errors and changes nothing.
	Name             string       `yaml:"name,omitempty"`
	MatchExpressions []Expression `yaml:"matchExpressions"`
}

// Expression is one requirement on a fact.
type Expression struct {
	Key      string   `yaml:"key"`
	Operator string   `yaml:"operator"`
	Values   []string `yaml:"values,omitempty"`
}

// Features is Talos CCM's per-rule feature flags. They are parsed only to
// be refused with a reason (see compileRule), not "unknown key".
type Features struct {
	PublicIPDiscovery *bool `yaml:"publicIPDiscovery,omitempty"`
	// PublicIPPredict appears in Talos CCM's example rules but not in its
	// code, which ignores it.
	PublicIPPredict *bool `yaml:"publicIPPredict,omitempty"`
}

// publicIPDiscoveryRefusal says why features.publicIPDiscovery does nothing
// here: what Talos CCM's flag adds, the agent always does.
const publicIPDiscoveryRefusal = "not supported: nodeinit-agent has no per-rule public IP discovery; on every platform it " +
	"reports as ExternalIP the public addresses on the node's interfaces and those Talos puts on its \"external\" link " +
	"from platform metadata (AddressStatus), which covers what Talos CCM's publicIPDiscovery adds"

const publicIPDiscoveryFix = "remove the key (to keep a link's addresses out, use the agent's --exclude-links)"

const publicIPPredictRefusal = "not supported: Talos CCM has no such feature (its example rules mention it, its code ignores it), so it never did anything"

const clusterNameRefusal = "the cluster name is set by the coordinator (node.cloudprovider.kubernetes.io/clustername), not by each node"

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
	global Global
	rules  []compiledRule
}

// Global returns the file's global options.
func (r *Rules) Global() Global {
	if r == nil {
		return Global{}
	}
	return r.global
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

// LoadFile reads and validates a bare rules file. Errors are Problems
// naming the file, line and column.
func LoadFile(path string) (*Rules, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	r, err := Load(data)
	if ps, ok := err.(Problems); ok {
		return nil, ps.InFile(path)
	}
	return r, err
}

// Load parses and validates a rules document. The error is Problems, one per
// fault, each with its line and column. An empty document is an empty rule set.
func Load(data []byte) (*Rules, error) {
	docs, err := ParseDocuments(data)
	if err != nil {
		return nil, err
	}
	if len(docs) > 1 {
		return nil, Problems{{Pos: posOf(resolve(docs[1])), Msg: "more than one YAML document", Fix: "a rules file is one document; for a Talos machine config or an ExtensionServiceConfig use `nodeinit-agent validate`"}}
	}
	var root *yaml.Node
	if len(docs) == 1 {
		root = docs[0]
	}
	f, ps := Decode(root, nil)
	return compileAll(f, ps)
}

// compileAll compiles what was decoded and reports the decoding problems
// with the compile ones, in file order: one pass shows every mistake.
func compileAll(f File, decoded Problems) (*Rules, error) {
	r, err := Compile(f)
	if len(decoded) == 0 {
		return r, err
	}
	ps := decoded
	if cps, ok := err.(Problems); ok {
		ps = append(ps, cps...)
	}
	sortProblems(ps)
	return nil, ps
}

func sortProblems(ps Problems) {
	slices.SortStableFunc(ps, func(a, b Problem) int {
		return cmp.Or(cmp.Compare(a.Pos.Line, b.Pos.Line), cmp.Compare(a.Pos.Col, b.Pos.Col))
	})
}

// LoadNode validates a rules document already parsed (positions are the
// node's own). It is Load for callers that found the document inside
// another one.
func LoadNode(root *yaml.Node) (*Rules, error) {
	f, ps := Decode(root, nil)
	return compileAll(f, ps)
}

// Decode reads a rules document from its YAML node, checking the shape of
// every key; shift, when set, moves positions to where the document sits in
// an enclosing file. It does not compile: see Compile.
func Decode(root *yaml.Node, shift func(Pos) Pos) (File, Problems) {
	d := decoder{shift: shift}
	d.decodeFile(root)
	return d.f, d.problems
}

// Compile validates a File. Every error names its rule and field, and its
// line and column when the File was decoded from YAML.
func Compile(f File) (*Rules, error) {
	var ps Problems
	out := &Rules{global: f.Global}
	if f.Global.clusterNameSet || f.Global.ClusterName != "" {
		ps = append(ps, Problem{Pos: f.pos("global.clusterName"), Rule: "global.clusterName", Msg: clusterNameRefusal,
			Fix: fmt.Sprintf("set clusterName: %q in the coordinator's configuration and remove it here (`nodeinit-agent migrate` does both)", f.Global.ClusterName)})
	}
	for i, r := range f.Transformations {
		c, rps := compileRule(f, i, r)
		ps = append(ps, rps...)
		out.rules = append(out.rules, c)
	}
	if len(ps) > 0 {
		sortProblems(ps)
		return nil, ps
	}
	return out, nil
}

// pos finds where path is in the file, or its closest recorded parent.
func (f File) pos(path string) Pos {
	for path != "" {
		if p, ok := f.at[path]; ok {
			return p
		}
		i := strings.LastIndexAny(path, ".[")
		if i < 0 {
			break
		}
		path = path[:i]
	}
	return Pos{}
}

func compileRule(f File, i int, r Rule) (compiledRule, Problems) {
	base := fmt.Sprintf("transformations[%d]", i)
	c := compiledRule{name: base}
	if r.Name != "" {
		c.name = fmt.Sprintf("%s (%s)", base, r.Name)
	}
	var ps Problems
	// fail reports a problem at field (a path below the rule); shown, when
	// set, replaces field in the message.
	fail := func(field, shown, fix, format string, args ...any) {
		if shown == "" {
			shown = field
		}
		ps = append(ps, Problem{Pos: f.pos(base + "." + field), Rule: c.name + ": " + shown, Msg: fmt.Sprintf(format, args...), Fix: fix})
	}
	// ownDomain refuses keys of the agent↔coordinator contract: a rule
	// writing nodeinit.io/csr-review would make the two fight over it.
	ownDomain := func(at, key string) bool {
		if !contract.InDomain(key) {
			return false
		}
		fail(at, "", "use a domain of your own (example.com/…)", "key %q is in %s, the domain of the agent↔coordinator contract, which rules may not write", key, contract.Domain)
		return true
	}
	if r.Features.PublicIPDiscovery != nil {
		fail("features.publicIPDiscovery", "", publicIPDiscoveryFix, publicIPDiscoveryRefusal)
	}
	if r.Features.PublicIPPredict != nil {
		fail("features.publicIPPredict", "", "remove the key", publicIPPredictRefusal)
	}

	for ti, term := range r.NodeSelector {
		tpath := fmt.Sprintf("nodeSelector[%d]", ti)
		shownTerm := tpath
		if term.Name != "" {
			shownTerm = fmt.Sprintf("%s (%s)", tpath, term.Name)
		}
		if len(term.MatchExpressions) == 0 {
			fail(tpath+".matchExpressions", shownTerm+".matchExpressions", "add an expression, or remove the term", "must not be empty (an empty term would match every node)")
		}
		var exprs []expression
		for ei, e := range term.MatchExpressions {
			at := fmt.Sprintf("%s.matchExpressions[%d]", tpath, ei)
			x, fix, err := compileExpression(e)
			if err != nil {
				fail(at, fmt.Sprintf("%s.matchExpressions[%d] (key %q)", shownTerm, ei, e.Key), fix, "%v", err)
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
				fail(at, "", keyFix(k), "invalid %s key: %s", kind, strings.Join(errs, "; "))
				continue
			}
			if ownDomain(at, k) {
				continue
			}
			t, err := compileTemplate(at, m[k])
			if err != nil {
				fail(at, "", "", "%v", err)
				continue
			}
			if kind == "label" {
				if msg, fix := checkValueTemplate(t, m[k]); msg != "" {
					fail(at, "", fix, "label value %s", msg)
					continue
				}
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
			fail(at, "", keyFix(k), "invalid taint key: %s", strings.Join(errs, "; "))
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
			fix := `write "value:Effect" or "Effect"`
			if near, ok := suggest.Typo(effect, []string{"NoSchedule", "PreferNoSchedule", "NoExecute"}); ok {
				fix = fmt.Sprintf("did you mean %q?", near)
			}
			fail(at, "", fix, "effect %q must be NoSchedule, PreferNoSchedule or NoExecute", effect)
			continue
		}
		t, err := compileTemplate(at, value)
		if err != nil {
			fail(at, "", "", "%v", err)
			continue
		}
		if msg, fix := checkValueTemplate(t, value); msg != "" {
			fail(at, "", fix, "taint value %s", msg)
			continue
		}
		c.taints = append(c.taints, taintOutput{k, t, corev1.TaintEffect(effect)})
	}
	for _, k := range sortedKeys(r.PlatformMetadata) {
		at := "platformMetadata[" + k + "]"
		lk := strings.ToLower(k)
		fd, ok := fields[lk]
		if !ok || fd.set == nil {
			fix := "the keys that can are: " + fieldNames(true)
			if lk == "hostname" || lk == "platform" {
				fix = "remove it (Talos CCM skipped it silently); select on it instead"
			} else if near, ok := suggest.Typo(k, strings.Split(fieldNames(true), ", ")); ok {
				fix = fmt.Sprintf("did you mean %q? %s", near, fix)
			}
			fail(at, "", fix, "cannot be overridden")
			continue
		}
		t, err := compileTemplate(at, r.PlatformMetadata[k])
		if err != nil {
			fail(at, "", "", "%v", err)
			continue
		}
		c.overrides = append(c.overrides, override{lk, t})
	}
	return c, ps
}

// keyFix suggests a valid key for an invalid one: the same key without the
// quotes, spaces or other characters a key may not have.
func keyFix(k string) string {
	clean := strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-', r == '_', r == '.', r == '/':
			return r
		case r == ' ':
			return '-'
		}
		return -1
	}, k)
	clean = strings.Trim(clean, "-_./")
	if clean == "" || clean == k || len(validation.IsQualifiedName(clean)) > 0 {
		return "a key is an optional DNS prefix and a name: example.com/my-key"
	}
	return fmt.Sprintf("did you mean %q?", clean)
}

// checkValueTemplate finds label and taint values that are invalid whatever
// the facts: a constant that is not a valid label value, or literal text
// with characters no label value may hold. (Values that depend on facts are
// checked per node at run time and by `explain`.)
func checkValueTemplate(t *template.Template, text string) (msg, fix string) {
	constant := true
	var literal strings.Builder
	for _, n := range t.Tree.Root.Nodes {
		if tn, ok := n.(*parse.TextNode); ok {
			literal.Write(tn.Text)
			continue
		}
		constant = false
	}
	if constant {
		v := strings.TrimSpace(text)
		if errs := validation.IsValidLabelValue(v); len(errs) > 0 {
			return fmt.Sprintf("%q: %s", v, strings.Join(errs, "; ")), valueFix(v)
		}
		return "", ""
	}
	for _, r := range literal.String() {
		if !labelValueRune(r) && r != ' ' && r != '\t' && r != '\n' {
			return fmt.Sprintf("%q holds %q, which no label value may contain", text, r), "label values are letters, digits, '-', '_' and '.'"
		}
	}
	return "", ""
}

func labelValueRune(r rune) bool {
	return r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.'
}

func valueFix(v string) string {
	clean := strings.Map(func(r rune) rune {
		if labelValueRune(r) {
			return r
		}
		if r == ' ' || r == '/' || r == ':' {
			return '-'
		}
		return -1
	}, v)
	clean = strings.Trim(clean, "-_.")
	if len(clean) > 63 {
		return "label values are at most 63 characters; put longer text in an annotation"
	}
	if clean == "" || clean == v {
		return "label values are letters, digits, '-', '_' and '.', starting and ending with a letter or digit"
	}
	return fmt.Sprintf("did you mean %q? (or put free text in an annotation)", clean)
}

func compileExpression(e Expression) (expression, string, error) {
	x, err := compileExpressionOnly(e)
	if err == nil {
		return x, "", nil
	}
	fix := ""
	if _, ok := fields[strings.ToLower(e.Key)]; !ok {
		if near, ok := suggest.Typo(e.Key, strings.Split(fieldNames(false), ", ")); ok {
			fix = fmt.Sprintf("did you mean %q?", near)
		}
	} else if e.Operator == "" {
		fix = "add operator: one of " + strings.Join(operators, ", ")
	} else if !slices.Contains(operators, e.Operator) {
		if near, ok := suggest.Typo(e.Operator, operators); ok {
			fix = fmt.Sprintf("did you mean %q? (operators are case-sensitive)", near)
		}
	}
	return x, fix, err
}

var operators = []string{OpIn, OpNotIn, OpExists, OpDoesNotExist, OpGt, OpLt, OpRegexp}

func compileExpressionOnly(e Expression) (expression, error) {
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
	case "":
		return x, fmt.Errorf("operator is missing")
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
