// Package yamlstrict is how the project reads YAML strictly (the
// coordinator's configuration, the rules file, the Talos specs explain
// reads): a syntax error, a key that names no field and a value of the
// wrong type each come with the line and column where they are, every one
// of them rather than the first. The callers word their own messages.
package yamlstrict

import (
	"bytes"
	"encoding"
	"errors"
	"fmt"
	"io"
	"iter"
	"reflect"
	"strings"

	"go.yaml.in/yaml/v4"
)

// Error is one fault at a place in a YAML text.
type Error struct {
	Line, Column int // 1-based; 0 when the YAML library gave no position
	Msg          string
}

func (e *Error) Error() string {
	if e.Line == 0 {
		return e.Msg
	}
	return fmt.Sprintf("line %d, column %d: %s", e.Line, e.Column, e.Msg)
}

// Errors are the values of one document that did not decode, in the order
// the decoder met them.
type Errors []*Error

func (es Errors) Error() string {
	s := make([]string, len(es))
	for i, e := range es {
		s[i] = e.Error()
	}
	return strings.Join(s, "; ")
}

// Entry is the key and value nodes of key in the mapping m; both nil when m is no mapping or has
// no such key.
func Entry(m *yaml.Node, key string) (k, v *yaml.Node) {
	if m == nil || m.Kind != yaml.MappingNode {
		return nil, nil
	}
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			return m.Content[i], m.Content[i+1]
		}
	}
	return nil, nil
}

// Value is the value node of key in the mapping m (Entry), or nil.
func Value(m *yaml.Node, key string) *yaml.Node {
	_, v := Entry(m, key)
	return v
}

// Documents yields the YAML documents of data one at a time. A syntax
// error is yielded as an *Error at the line and column where the parser
// stopped, and ends the sequence.
func Documents(data []byte) iter.Seq2[*yaml.Node, error] {
	return func(yield func(*yaml.Node, error) bool) {
		dec := yaml.NewDecoder(bytes.NewReader(data))
		for {
			var n yaml.Node
			err := dec.Decode(&n)
			if errors.Is(err, io.EOF) {
				return
			}
			if err != nil {
				yield(nil, syntaxError(data, err))
				return
			}
			if !yield(&n, nil) {
				return
			}
		}
	}
}

// syntaxError places a parser error by the character offset of its mark:
// the line in the library's message is that of the enclosing block, not
// of the fault. The message keeps the library's words.
func syntaxError(data []byte, err error) *Error {
	msg := err.Error()
	var le *yaml.LoadError
	if !errors.As(err, &le) {
		return &Error{Msg: strings.TrimPrefix(msg, "yaml: ")}
	}
	line, column := posOfIndex(data, le.Mark.Index)
	if i := strings.LastIndex(msg, ": "); i >= 0 {
		msg = msg[i+2:]
	}
	return &Error{Line: line, Column: column, Msg: msg}
}

// posOfIndex converts a character offset into a 1-based line and column.
func posOfIndex(data []byte, idx int) (line, column int) {
	line, column = 1, 1
	for i, r := range []rune(string(data)) {
		if i >= idx {
			break
		}
		if r == '\n' {
			line++
			column = 1
		} else {
			column++
		}
	}
	return line, column
}

// UnknownKey is a key of a mapping that names no field of the struct the
// mapping decodes into: the YAML library would drop it, and with it what
// the user meant to set.
type UnknownKey struct {
	Key   *yaml.Node // as written, with its line and column
	Path  string     // where it is: "csr.maxDuraton"
	Known []string   // the keys that mapping may have, in field order
}

// UnknownKeys lists the keys of the mapping n that name no field of the
// struct type t, in file order, and those of the mappings under fields that
// are structs themselves (not under a type that decodes itself, such as a
// duration). A node that is not a mapping has none: Decode says what is
// wrong with it.
func UnknownKeys(n *yaml.Node, t reflect.Type) []UnknownKey {
	var out []UnknownKey
	var walk, into func(path string, n *yaml.Node, t reflect.Type)
	walk = func(path string, n *yaml.Node, t reflect.Type) {
		if n == nil || n.Kind != yaml.MappingNode {
			return
		}
		fields, names := structFields(t)
		for i := 0; i+1 < len(n.Content); i += 2 {
			k := n.Content[i]
			p := k.Value
			if path != "" {
				p = path + "." + p
			}
			ft, ok := fields[k.Value]
			if !ok {
				out = append(out, UnknownKey{Key: k, Path: p, Known: names})
				continue
			}
			into(p, n.Content[i+1], ft)
		}
	}
	// into walks a value of type t: a struct's keys, and those of the
	// structs a list or map holds ("inventory[1].network").
	into = func(path string, n *yaml.Node, t reflect.Type) {
		for t.Kind() == reflect.Pointer {
			t = t.Elem()
		}
		if n == nil || decodesItself(t) {
			return
		}
		switch {
		case t.Kind() == reflect.Struct:
			walk(path, n, t)
		case (t.Kind() == reflect.Slice || t.Kind() == reflect.Array) && n.Kind == yaml.SequenceNode:
			for i, item := range n.Content {
				into(fmt.Sprintf("%s[%d]", path, i), item, t.Elem())
			}
		case t.Kind() == reflect.Map && n.Kind == yaml.MappingNode:
			for i := 0; i+1 < len(n.Content); i += 2 {
				into(path+"."+n.Content[i].Value, n.Content[i+1], t.Elem())
			}
		}
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	walk("", n, t)
	return out
}

// structFields names the keys a struct type decodes from, as the YAML
// library names them (the tag's name, else the lower-cased field name;
// inlined structs' keys as the outer struct's), in field order.
func structFields(t reflect.Type) (map[string]reflect.Type, []string) {
	fields := map[string]reflect.Type{}
	var names []string
	for f := range t.Fields() {
		if !f.IsExported() {
			continue
		}
		name, flags, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if name == "-" {
			continue
		}
		if f.Type.Kind() == reflect.Struct && strings.Contains(","+flags+",", ",inline,") {
			inner, innerNames := structFields(f.Type)
			for _, n := range innerNames {
				fields[n] = inner[n]
			}
			names = append(names, innerNames...)
			continue
		}
		if name == "" {
			name = strings.ToLower(f.Name)
		}
		fields[name] = f.Type
		names = append(names, name)
	}
	return fields, names
}

var textUnmarshaler = reflect.TypeFor[encoding.TextUnmarshaler]()

// decodesItself reports whether a type reads its own YAML (UnmarshalYAML,
// or text like time.Time): its keys, if any, are its business.
func decodesItself(t reflect.Type) bool {
	p := reflect.PointerTo(t)
	_, ok := p.MethodByName("UnmarshalYAML")
	return ok || p.Implements(textUnmarshaler)
}

// Decode decodes n into v, a pointer. It goes on past a value of the wrong
// type: the error is then Errors, every such value with its line and
// column. A type's UnmarshalYAML may return a plain error: it is placed at
// the node it was given. Any scalar decodes into a string as its text, as
// with YAML v3; n is left as it was.
func Decode(n *yaml.Node, v any) error {
	n = clone(n, map[*yaml.Node]*yaml.Node{})
	timestampsAsText(n, reflect.TypeOf(v))
	err := n.Decode(v)
	var les *yaml.LoadErrors
	if !errors.As(err, &les) {
		return err
	}
	es := make(Errors, len(les.Errors))
	for i, e := range les.Errors {
		// "cannot unmarshal" is what the project's messages have always
		// said (YAML v3's words); v4 says "cannot construct".
		msg := e.Message
		if rest, ok := strings.CutPrefix(msg, "cannot construct "); ok {
			msg = "cannot unmarshal " + rest
		}
		es[i] = &Error{Line: e.Mark.Line, Column: e.Mark.Column, Msg: msg}
	}
	return es
}

// timestampsAsText lets a scalar that looks like a timestamp (2024-01-01)
// decode into a string as its text, as YAML v3 did: v4.0.0-rc.6 refuses it
// (yaml/go-yaml#376, fixed in a later release). It tags each such scalar
// under a string-kind target !!str, in place: Decode gives it a copy.
func timestampsAsText(n *yaml.Node, t reflect.Type) {
	type visit struct {
		n *yaml.Node
		t reflect.Type
	}
	seen := map[visit]bool{}
	var walk func(n *yaml.Node, t reflect.Type)
	walk = func(n *yaml.Node, t reflect.Type) {
		for t != nil && t.Kind() == reflect.Pointer {
			t = t.Elem()
		}
		if n == nil || t == nil || seen[visit{n, t}] || decodesItself(t) {
			return
		}
		seen[visit{n, t}] = true
		switch n.Kind {
		case yaml.DocumentNode, yaml.AliasNode:
			for _, c := range n.Content {
				walk(c, t)
			}
			walk(n.Alias, t)
			return
		case yaml.ScalarNode:
			if t.Kind() == reflect.String && n.Tag == "!!timestamp" {
				n.Tag = "!!str"
			}
			return
		}
		switch t.Kind() {
		case reflect.Slice, reflect.Array:
			if n.Kind == yaml.SequenceNode {
				for _, c := range n.Content {
					walk(c, t.Elem())
				}
			}
		case reflect.Map:
			if n.Kind == yaml.MappingNode {
				for i := 0; i+1 < len(n.Content); i += 2 {
					walk(n.Content[i], t.Key())
					walk(n.Content[i+1], t.Elem())
				}
			}
		case reflect.Struct:
			if n.Kind == yaml.MappingNode {
				fields, _ := structFields(t)
				for i := 0; i+1 < len(n.Content); i += 2 {
					k, v := n.Content[i].Value, n.Content[i+1]
					switch {
					case k == "<<" && v.Kind == yaml.SequenceNode:
						for _, c := range v.Content {
							walk(c, t) // merged mappings: their keys are this struct's
						}
					case k == "<<":
						walk(v, t)
					default:
						walk(v, fields[k])
					}
				}
			}
		}
	}
	walk(n, t)
}

// clone copies a node tree, aliases pointing into the copy.
func clone(n *yaml.Node, copies map[*yaml.Node]*yaml.Node) *yaml.Node {
	if n == nil {
		return nil
	}
	if c, ok := copies[n]; ok {
		return c
	}
	c := *n
	copies[n] = &c
	if n.Content != nil {
		c.Content = make([]*yaml.Node, len(n.Content))
		for i, x := range n.Content {
			c.Content[i] = clone(x, copies)
		}
	}
	c.Alias = clone(n.Alias, copies)
	return &c
}
