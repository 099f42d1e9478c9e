package rules

import (
	"bytes"
	"errors"
	"io"
	"reflect"
	"strings"

	"go.yaml.in/yaml/v4"
)

// ParseDocuments parses every YAML document in data into nodes. A syntax
// error is a Problem at the line and column where the parser stopped,
// computed from its character offset: the line numbers in the YAML
// library's own messages point at the enclosing block, not at the fault.
func ParseDocuments(data []byte) ([]*yaml.Node, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var docs []*yaml.Node
	for {
		var n yaml.Node
		err := dec.Decode(&n)
		if errors.Is(err, io.EOF) {
			return docs, nil
		}
		if err != nil {
			return nil, Problems{syntaxProblem(data, err)}
		}
		docs = append(docs, &n)
	}
}

// syntaxProblem turns a YAML parser error into a Problem with its position.
func syntaxProblem(data []byte, err error) Problem {
	msg := err.Error()
	p := Problem{Msg: "invalid YAML: " + strings.TrimPrefix(msg, "yaml: ")}
	if idx, ok := markIndex(err); ok {
		p.Pos = posOfIndex(data, idx)
		// The library's message repeats positions, some of them wrong; keep its words.
		p.Msg = "invalid YAML: " + lastClause(msg)
		p.Fix = yamlHint(data, p.Pos, lastClause(msg))
	}
	return p
}

// markIndex reads the character offset of the parser's error mark. The
// error types live in the YAML library's internal package, so this reads
// the field by name; any other error has no offset.
func markIndex(err error) (int, bool) {
	v := reflect.ValueOf(err)
	if v.Kind() == reflect.Pointer {
		v = v.Elem()
	}
	if v.Kind() != reflect.Struct {
		return 0, false
	}
	m := v.FieldByName("Mark")
	if !m.IsValid() || m.Kind() != reflect.Struct {
		return 0, false
	}
	i := m.FieldByName("Index")
	if !i.IsValid() || !i.CanInt() {
		return 0, false
	}
	return int(i.Int()), true
}

// posOfIndex converts a character offset into a 1-based line and column.
func posOfIndex(data []byte, idx int) Pos {
	p := Pos{Line: 1, Col: 1}
	for i, r := range []rune(string(data)) {
		if i >= idx {
			break
		}
		if r == '\n' {
			p.Line++
			p.Col = 1
		} else {
			p.Col++
		}
	}
	return p
}

func lastClause(msg string) string {
	if i := strings.LastIndex(msg, ": "); i >= 0 {
		return msg[i+2:]
	}
	return msg
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
