package config

import (
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"

	"go.yaml.in/yaml/v4"

	"github.com/talos-nodeinit/talos-nodeinit/pkg/suggest"
	"github.com/talos-nodeinit/talos-nodeinit/pkg/yamlstrict"
)

// Error is one problem in a configuration file: where, which key, what is wrong, and the fix.
type Error struct {
	File         string
	Line, Column int // 0 when the value is a default, not in the file
	Path         string
	Msg          string
	Fix          string
}

func (e *Error) Error() string {
	var b strings.Builder
	if e.File != "" {
		b.WriteString(e.File + ":")
	}
	if e.Line > 0 {
		fmt.Fprintf(&b, "%d:", e.Line)
		if e.Column > 0 {
			fmt.Fprintf(&b, "%d:", e.Column)
		}
	}
	if b.Len() > 0 {
		b.WriteString(" ")
	}
	if e.Path != "" {
		b.WriteString(e.Path + ": ")
	}
	b.WriteString(e.Msg)
	if e.Fix != "" {
		b.WriteString("; " + e.Fix)
	}
	return b.String()
}

// Errors are all the problems in one file, in file order.
type Errors []*Error

func (es Errors) Error() string {
	s := make([]string, len(es))
	for i, e := range es {
		s[i] = e.Error()
	}
	return strings.Join(s, "\n")
}

// setFile names the file in every error.
func setFile(err error, file string) error {
	var es Errors
	if errors.As(err, &es) {
		for _, e := range es {
			e.File = file
		}
		return es
	}
	return fmt.Errorf("%s: %w", file, err)
}

// document is the configuration inside whatever file held it (see Load); line and column map
// positions inside embedded text back to the file.
type document struct {
	root         *yaml.Node // the configuration's mapping; nil when empty
	line, column int        // added to positions inside root
	positions    map[string]*yaml.Node
	keys         map[string]*yaml.Node // the keys' own nodes, by the same paths
}

// The ConfigMap's key holding the configuration.
const configMapKey = "coordinator.yaml"

// readDocument finds the configuration in data.
func readDocument(data []byte) (*document, error) {
	var docs []*yaml.Node
	for n, err := range yamlstrict.Documents(data) {
		if err != nil {
			return nil, Errors{syntaxError(err, 0, 0)}
		}
		docs = append(docs, n)
	}
	var found []*document
	var keyless *yaml.Node // a ConfigMap without our key
	for _, d := range docs {
		m := mapping(d)
		if m == nil {
			continue
		}
		if v := yamlstrict.Value(m, "kind"); v != nil && v.Value == "ConfigMap" {
			if cfg := yamlstrict.Value(yamlstrict.Value(m, "data"), configMapKey); cfg != nil {
				doc, err := embedded(cfg, data)
				if err != nil {
					return nil, err
				}
				found = append(found, doc)
			} else {
				keyless = m
			}
			continue
		}
		if v := yamlstrict.Value(m, "kind"); v != nil {
			continue // another object in `helm template` output
		}
		// The chart's values.yaml: the configuration is the string "config".
		if v := yamlstrict.Value(m, "config"); v != nil && v.Kind == yaml.ScalarNode && v.Tag == "!!str" {
			doc, err := embedded(v, data)
			if err != nil {
				return nil, err
			}
			found = append(found, doc)
			continue
		}
		found = append(found, &document{root: m})
	}
	switch len(found) {
	case 0:
		if keyless != nil {
			return nil, Errors{{Line: keyless.Line, Column: keyless.Column, Msg: "a ConfigMap without data." + configMapKey, Fix: "the coordinator reads its configuration from the key " + configMapKey}}
		}
		if len(docs) > 0 && mapping(docs[0]) == nil && docs[0].Content != nil && len(docs[0].Content) > 0 && docs[0].Content[0].Tag != "!!null" {
			n := docs[0].Content[0]
			return nil, Errors{{Line: n.Line, Column: n.Column, Msg: "the configuration is not a mapping of keys", Fix: "see coordinator/deploy/configmap.yaml for its shape"}}
		}
		return &document{}, nil
	case 1:
		found[0].index()
		return found[0], nil
	}
	return nil, Errors{{Msg: fmt.Sprintf("%d configurations in one file", len(found)), Fix: "give the coordinator's ConfigMap or configuration alone"}}
}

// embedded parses a configuration held as a string in another YAML file.
func embedded(n *yaml.Node, file []byte) (*document, error) {
	line, column := n.Line-1, n.Column-1
	if n.Style&(yaml.LiteralStyle|yaml.FoldedStyle) != 0 {
		// A block scalar's text starts on the next line, indented.
		line = n.Line
		lines := strings.Split(string(file), "\n")
		for i := n.Line; i < len(lines); i++ {
			if t := strings.TrimLeft(lines[i], " "); t != "" {
				column = len(lines[i]) - len(t)
				break
			}
		}
	}
	doc := &document{line: line, column: column}
	// Only the first document counts, as with yaml.Unmarshal.
	for d, err := range yamlstrict.Documents([]byte(n.Value)) {
		if err != nil {
			return nil, Errors{syntaxError(err, line, column)}
		}
		if m := mapping(d); m != nil {
			doc.root = m
		} else if len(d.Content) > 0 && d.Content[0].Tag != "!!null" {
			return nil, Errors{{Line: n.Line, Column: n.Column, Msg: "the configuration is not a mapping of keys"}}
		}
		break
	}
	return doc, nil
}

func mapping(d *yaml.Node) *yaml.Node {
	if d != nil && d.Kind == yaml.DocumentNode && len(d.Content) == 1 {
		d = d.Content[0]
	}
	if d == nil || d.Kind != yaml.MappingNode {
		return nil
	}
	return d
}

// syntaxError turns a yamlstrict error into an Error, moved by an embedded configuration's offset.
func syntaxError(err error, line, column int) *Error {
	var e *yamlstrict.Error
	if !errors.As(err, &e) {
		return &Error{Msg: err.Error()}
	}
	if e.Line == 0 {
		return &Error{Msg: e.Msg}
	}
	c := e.Column
	if c > 0 {
		c += column
	}
	return &Error{Line: e.Line + line, Column: c, Msg: e.Msg}
}

// index records each key's value node and its own node by path ("grants.labels.allow[1]").
func (d *document) index() {
	d.positions = map[string]*yaml.Node{}
	d.keys = map[string]*yaml.Node{}
	var walk func(path string, n *yaml.Node)
	walk = func(path string, n *yaml.Node) {
		if path != "" {
			d.positions[path] = n
		}
		switch n.Kind {
		case yaml.MappingNode:
			for i := 0; i+1 < len(n.Content); i += 2 {
				p := n.Content[i].Value
				if path != "" {
					p = path + "." + p
				}
				d.keys[p] = n.Content[i]
				walk(p, n.Content[i+1])
			}
		case yaml.SequenceNode:
			for i, c := range n.Content {
				walk(fmt.Sprintf("%s[%d]", path, i), c)
			}
		}
	}
	if d.root != nil {
		walk("", d.root)
	}
}

// present reports whether the file sets path.
func (d *document) present(path string) bool { _, ok := d.positions[path]; return ok }

// at places a problem: on its own path, or the nearest enclosing key.
func (d *document) at(p problem) *Error { return d.atPath(p, p.path) }

// atPath places a problem at where (or its nearest enclosing key).
func (d *document) atPath(p problem, where string) *Error {
	e := &Error{Path: p.path, Msg: p.msg, Fix: p.fix}
	for path := where; path != ""; {
		if n, ok := d.positions[path]; ok {
			e.Line, e.Column = n.Line+d.line, n.Column+d.column
			break
		}
		i := strings.LastIndexAny(path, ".[")
		if i < 0 {
			break
		}
		path = path[:i]
	}
	return e
}

// unknownKeys refuses keys the configuration does not have, suggesting the nearest one.
func (d *document) unknownKeys() []*Error {
	if d.root == nil {
		return nil
	}
	var out []*Error
	for _, u := range yamlstrict.UnknownKeys(d.root, reflect.TypeFor[Config]()) {
		e := &Error{Line: u.Key.Line + d.line, Column: u.Key.Column + d.column, Path: u.Path, Msg: "unknown key"}
		if near, ok := suggest.Typo(u.Key.Value, u.Known); ok {
			e.Fix = fmt.Sprintf("did you mean %q?", near)
		} else {
			names := slices.Sorted(slices.Values(u.Known))
			e.Fix = "the keys here are " + strings.Join(names, ", ")
		}
		out = append(out, e)
	}
	return out
}
