package yamlstrict

import (
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v4"
)

// A syntax error is placed where the parser stopped, not on the line of
// the enclosing block that the library's own message names.
func TestSyntaxErrorsArePlacedAtTheFault(t *testing.T) {
	for _, tc := range []struct {
		doc          string
		docsBefore   int
		line, column int
		msg          string
	}{
		{"csr:\n  maxDuration: 1h\n bad: [", 0, 3, 2, "did not find expected key"},
		{"transformations: [\n", 0, 2, 1, "did not find expected node content"},
		{"key: value\n  other: x\n", 0, 2, 8, "mapping values are not allowed in this context"},
		{"a: 1\n---\nb: \"x\n", 1, 4, 1, "found unexpected end of stream"},
		{"a: zoné\nb: é: c\n", 0, 2, 5, "mapping values are not allowed in this context"}, // columns count characters, not bytes
	} {
		var docs int
		var got error
		for _, err := range Documents([]byte(tc.doc)) {
			if err != nil {
				got = err
				break
			}
			docs++
		}
		var e *Error
		if !errors.As(got, &e) {
			t.Errorf("%q: %v, want an *Error", tc.doc, got)
			continue
		}
		if docs != tc.docsBefore || e.Line != tc.line || e.Column != tc.column || e.Msg != tc.msg {
			t.Errorf("%q: %d documents then %d:%d %q, want %d then %d:%d %q", tc.doc, docs, e.Line, e.Column, e.Msg, tc.docsBefore, tc.line, tc.column, tc.msg)
		}
		if want := fmt.Sprintf("line %d, column %d: %s", tc.line, tc.column, tc.msg); e.Error() != want {
			t.Errorf("%q: %q, want %q", tc.doc, e.Error(), want)
		}
	}
}

func TestDocumentsYieldsEachDocument(t *testing.T) {
	var got []string
	for n, err := range Documents([]byte("a: 1\n---\nb: 2\n---\nc: 3\n")) {
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, n.Content[0].Content[0].Value)
		if len(got) == 2 {
			break // a caller may stop early
		}
	}
	if !slices.Equal(got, []string{"a", "b"}) {
		t.Errorf("got %q, want a then b", got)
	}
	for range Documents(nil) {
		t.Error("an empty text has no document")
	}
}

type duration struct{ time.Duration }

func (d *duration) UnmarshalYAML(n *yaml.Node) error {
	v, err := time.ParseDuration(n.Value)
	if err != nil {
		return fmt.Errorf("%q is not a duration", n.Value)
	}
	d.Duration = v
	return nil
}

type limits struct {
	Max     int      `yaml:"max"`
	Timeout duration `yaml:"timeout"`
}

type shared struct {
	Owner string `yaml:"owner"`
}

type config struct {
	Name     string            `yaml:"name"`
	Enabled  *bool             `yaml:"enabled,omitempty"`
	Limits   limits            `yaml:"limits"`
	Tags     map[string]string `yaml:"tags"`
	Since    time.Time         `yaml:"since"`
	Untagged string
	Shared   shared `yaml:",inline"`
	Skipped  string `yaml:"-"`
	private  string // unexported: never a key
}

func node(t *testing.T, doc string) *yaml.Node {
	t.Helper()
	for n, err := range Documents([]byte(doc)) {
		if err != nil {
			t.Fatal(err)
		}
		return n.Content[0]
	}
	t.Fatal("no document")
	return nil
}

// Every key no field has is found, with its path and the keys allowed
// beside it; a type that reads its own YAML is not looked into.
func TestUnknownKeys(t *testing.T) {
	doc := "name: a\nnmae: b\nlimits:\n  max: 1\n  mx: 2\n  timeout: {x: 1}\ntags: {any: thing}\nsince: {year: 2024}\nuntagged: u\nowner: o\nskipped: s\nprivate: p\n"
	type found struct {
		path         string
		line, column int
	}
	var got []found
	var known [][]string
	for _, u := range UnknownKeys(node(t, doc), reflect.TypeFor[*config]()) {
		got = append(got, found{u.Path, u.Key.Line, u.Key.Column})
		known = append(known, u.Known)
	}
	want := []found{{"nmae", 2, 1}, {"limits.mx", 5, 3}, {"skipped", 11, 1}, {"private", 12, 1}}
	if !slices.Equal(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
	top := []string{"name", "enabled", "limits", "tags", "since", "untagged", "owner"}
	if len(known) == len(want) && (!slices.Equal(known[0], top) || !slices.Equal(known[1], []string{"max", "timeout"})) {
		t.Errorf("known keys %q, want %q then [max timeout]", known, top)
	}
	for _, doc := range []string{"- a list", "just text", "limits: [1, 2]"} {
		if u := UnknownKeys(node(t, doc), reflect.TypeFor[config]()); u != nil {
			t.Errorf("%q: %v, want none (not mappings: Decode reports them)", doc, u)
		}
	}
}

// Every value that does not decode is reported, at its own line and
// column, in v3's words; an UnmarshalYAML error is placed at its node.
func TestDecodeReportsEveryBadValue(t *testing.T) {
	var c config
	err := Decode(node(t, "name: [x]\nenabled: perhaps\nlimits: {max: many, timeout: soon}\ntags: {a: b}\n"), &c)
	var es Errors
	if !errors.As(err, &es) {
		t.Fatalf("Decode = %T %v, want Errors", err, err)
	}
	want := []string{
		"line 1, column 7: cannot unmarshal !!seq into string",
		"line 2, column 10: cannot unmarshal !!str `perhaps` into bool",
		"line 3, column 15: cannot unmarshal !!str `many` into int",
		`line 3, column 30: "soon" is not a duration`,
	}
	var got []string
	for _, e := range es {
		got = append(got, e.Error())
	}
	if !slices.Equal(got, want) {
		t.Errorf("got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if c.Tags["a"] != "b" {
		t.Errorf("decoding stopped at the first bad value: tags %v", c.Tags)
	}
	if err := Decode(node(t, "limits: {max: 3, timeout: 90s}"), &c); err != nil || c.Limits.Max != 3 || c.Limits.Timeout.Duration != 90*time.Second {
		t.Errorf("Decode of good values: %v, %+v", err, c.Limits)
	}
}

// Any scalar decodes into a string as its text, as with YAML v3, dates
// included (v4.0.0-rc.6 refuses those); the caller's node is left alone.
func TestScalarsDecodeIntoStringsAsWritten(t *testing.T) {
	n := node(t, "name: 2024-01-01\ntags: {2024-01-02: 2024-01-03, n: 012, b: true, f: 1e3}\nsince: 2024-01-04\n")
	var c config
	if err := Decode(n, &c); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"2024-01-02": "2024-01-03", "n": "012", "b": "true", "f": "1e3"}
	if c.Name != "2024-01-01" || !reflect.DeepEqual(c.Tags, want) || c.Since != time.Date(2024, 1, 4, 0, 0, 0, 0, time.UTC) {
		t.Errorf("got name %q, tags %v, since %v; want 2024-01-01, %v, 2024-01-04 as a time", c.Name, c.Tags, c.Since, want)
	}
	if tag := n.Content[1].Tag; tag != "!!timestamp" {
		t.Errorf("the caller's node was changed: name's tag is %s", tag)
	}
}

// Entry finds a key of a mapping only: not in a sequence or scalar, nor a value spelled like it.
func TestEntry(t *testing.T) {
	m := node(t, "kind: ConfigMap\ndata: {kind: inner}\nlist: [kind, x]\n")
	if k, v := Entry(m, "kind"); k == nil || k.Line != 1 || v.Value != "ConfigMap" {
		t.Errorf("Entry(kind) = %v, %v", k, v)
	}
	if v := Value(Value(m, "data"), "kind"); v == nil || v.Value != "inner" {
		t.Errorf("data.kind = %v", v)
	}
	for _, miss := range []*yaml.Node{nil, Value(m, "list"), Value(Value(m, "data"), "kind")} {
		if k, v := Entry(miss, "kind"); k != nil || v != nil {
			t.Errorf("Entry(%v, kind) = %v, %v; want nil", miss, k, v)
		}
	}
	if v := Value(m, "ConfigMap"); v != nil {
		t.Errorf("a value was found as a key: %v", v)
	}
}
