package contract

import (
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestNodeText(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"IP SAN 10.9.9.9 is not on this node's interfaces", `"IP SAN 10.9.9.9 is not on this node's interfaces"`},
		{"", `""`},
		// What must never reach a message as written: line breaks that
		// forge a log line, terminal escapes, bidi overrides, NULs,
		// invalid UTF-8, quotes that end the quoting early.
		{"ok\nI1121 CSR decided decision=Approve", `"ok I1121 CSR decided decision=Approve"`},
		{"ok\r\n\t\v\f", `"ok"`},
		{"a\x1b[2Kb", `"a[2Kb"`},
		{"ok\u202eevorppa\u2066", `"okevorppa"`},
		{"\x00\x07\x7f\u0085\u2028\u2029\ufeff", `""`},
		{"a\xff\xfeb\xc3", `"ab"`},
		{`say "approved" \n`, `"say \"approved\" \\n"`},
		{"  many   spaces  ", `"many spaces"`},
		{strings.Repeat("A", 300), strconv.Quote(strings.Repeat("A", MaxNodeTextBytes) + "…")},
		// Cut at a rune, never inside one.
		{"A" + strings.Repeat("é", 200), strconv.Quote("A" + strings.Repeat("é", 127) + "…")},
	} {
		if got := NodeText(tc.in); got != tc.want {
			t.Errorf("NodeText(%q) = %s, want %s", tc.in, got, tc.want)
		}
	}
}

// nodeTextHolds is the property: whatever the input, the output is one
// quoted, printable, valid UTF-8 line of bounded size whose content is a
// part of the input.
func nodeTextHolds(t *testing.T, in string) {
	t.Helper()
	out := NodeText(in)
	if !utf8.ValidString(out) {
		t.Fatalf("NodeText(%q) = %q: not valid UTF-8", in, out)
	}
	for _, r := range out {
		if !strconv.IsPrint(r) {
			t.Fatalf("NodeText(%q) = %q: carries %U", in, out, r)
		}
	}
	if len(out) > MaxNodeTextQuoted {
		t.Fatalf("NodeText(%q) is %d bytes, more than %d", in, len(out), MaxNodeTextQuoted)
	}
	body, err := strconv.Unquote(out)
	if err != nil {
		t.Fatalf("NodeText(%q) = %q: not one quoted string: %v", in, out, err)
	}
	if len(strings.TrimSuffix(body, "…")) > MaxNodeTextBytes {
		t.Fatalf("NodeText(%q) keeps %d bytes, more than %d", in, len(body), MaxNodeTextBytes)
	}
}

func TestNodeTextProperty(t *testing.T) {
	rng := rand.New(rand.NewPCG(22, 1))
	alphabet := []rune{'a', ' ', '"', '\\', '\n', '\r', '\t', 0, 0x1b, 0x7f, 0x85, 0x202e, 0x2028, 0xfeff, 'é', '€', 0x1f600, utf8.RuneError}
	for range 20000 {
		var b strings.Builder
		for range rng.IntN(700) {
			if rng.IntN(8) == 0 {
				b.WriteByte(byte(rng.IntN(256))) // invalid UTF-8 too
				continue
			}
			b.WriteRune(alphabet[rng.IntN(len(alphabet))])
		}
		nodeTextHolds(t, b.String())
	}
}

func FuzzNodeText(f *testing.F) {
	for _, s := range []string{"ok", "ok\nforged", "\x1b[31m", "\u202e", strings.Repeat("é", 300), "\xff"} {
		f.Add(s)
	}
	f.Fuzz(nodeTextHolds)
}
