package rules

import (
	"fmt"
	"strings"
)

// Pos is a place in a file: 1-based line and column; zero when unknown.
type Pos struct {
	Line, Col int
}

// Problem is one error in a rules file: where it is, what is wrong, and what
// to write instead.
type Problem struct {
	File string
	Pos  Pos
	// Rule names the rule and field ("transformations[0] (web): labels[a]"), when known.
	Rule string
	Msg  string
	// Fix is what to do, when there is something better to say than Msg.
	Fix string
}

func (p Problem) Error() string {
	var b strings.Builder
	switch {
	case p.File != "" && p.Pos.Line > 0:
		fmt.Fprintf(&b, "%s:%d:%d: ", p.File, p.Pos.Line, p.Pos.Col)
	case p.File != "":
		b.WriteString(p.File + ": ")
	case p.Pos.Line > 0:
		fmt.Fprintf(&b, "line %d, column %d: ", p.Pos.Line, p.Pos.Col)
	}
	if p.Rule != "" {
		b.WriteString(p.Rule + ": ")
	}
	b.WriteString(p.Msg)
	if p.Fix != "" {
		b.WriteString("; " + p.Fix)
	}
	return b.String()
}

// Problems is every error found in one file, in file order.
type Problems []Problem

func (ps Problems) Error() string {
	lines := make([]string, len(ps))
	for i, p := range ps {
		lines[i] = p.Error()
	}
	return strings.Join(lines, "\n")
}

// InFile names the file in every problem (for errors found before the name was known).
func (ps Problems) InFile(name string) Problems {
	out := make(Problems, len(ps))
	for i, p := range ps {
		p.File = name
		out[i] = p
	}
	return out
}
