package rules

import (
	"errors"
	"strings"

	"go.yaml.in/yaml/v4"

	"github.com/talos-nodeinit/talos-nodeinit/pkg/yamlstrict"
)

// ParseDocuments parses every YAML document in data into nodes. A syntax
// error is a Problem at the line and column where the parser stopped, with
// a hint at its usual cause.
func ParseDocuments(data []byte) ([]*yaml.Node, error) {
	var docs []*yaml.Node
	for n, err := range yamlstrict.Documents(data) {
		if err != nil {
			return nil, Problems{syntaxProblem(data, err)}
		}
		docs = append(docs, n)
	}
	return docs, nil
}

// syntaxProblem turns a syntax error from yamlstrict.Documents into a Problem.
func syntaxProblem(data []byte, err error) Problem {
	var e *yamlstrict.Error
	if !errors.As(err, &e) {
		return Problem{Msg: "invalid YAML: " + err.Error()}
	}
	p := Problem{Pos: Pos{Line: e.Line, Col: e.Column}, Msg: "invalid YAML: " + e.Msg}
	if e.Line > 0 {
		p.Fix = yamlHint(data, p.Pos, e.Msg)
	}
	return p
}

// yamlHint says what usually causes the parser's complaint at p.
func yamlHint(data []byte, p Pos, what string) string {
	lines := strings.Split(string(data), "\n")
	if p.Line-1 >= len(lines) {
		return ""
	}
	line := lines[p.Line-1]
	switch {
	case strings.Contains(what, "tab character"):
		return "indent with spaces, not tabs"
	case strings.Contains(what, "did not find expected key"), strings.Contains(what, "mapping values are not allowed"):
		if p.Line >= 2 && indentOf(line) != indentOf(lines[p.Line-2]) {
			return "check the indentation of this line against the lines above it"
		}
		return "check the indentation and quoting of this line"
	case strings.Contains(what, "did not find expected"):
		return "check for an unclosed bracket or quote"
	}
	return ""
}

func indentOf(s string) int { return len(s) - len(strings.TrimLeft(s, " ")) }

// posOf is a node's position.
func posOf(n *yaml.Node) Pos {
	if n == nil {
		return Pos{}
	}
	return Pos{Line: n.Line, Col: n.Column}
}
