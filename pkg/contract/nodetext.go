package contract

import (
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// MaxNodeTextBytes bounds the node-written text NodeText keeps.
const MaxNodeTextBytes = 256

// MaxNodeTextQuoted bounds NodeText's result: the kept text with every byte
// escaped at worst (a quote or a backslash), the ellipsis and the quotes.
const MaxNodeTextQuoted = 2*MaxNodeTextBytes + len("…") + 2

// NodeText renders text a node wrote (an attestation's reason, a value of
// its report) for a CSR condition, an Event or a log line, none of which
// may carry a line or an escape a node forged: every run of white space
// becomes one space, every other rune that is not printable (controls,
// bidi overrides, invalid UTF-8) is dropped, at most MaxNodeTextBytes are
// kept (cut at a rune, marked with "…"), and the result is quoted so it
// never reads as the coordinator's own words.
func NodeText(s string) string {
	var b strings.Builder
	space := false
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		i += size
		switch {
		case r == utf8.RuneError && size == 1:
			continue
		case unicode.IsSpace(r):
			space = b.Len() > 0
			continue
		case !strconv.IsPrint(r):
			continue
		}
		n := utf8.RuneLen(r)
		if space {
			n++
		}
		if b.Len()+n > MaxNodeTextBytes {
			b.WriteString("…")
			break
		}
		if space {
			b.WriteByte(' ')
			space = false
		}
		b.WriteRune(r)
	}
	return strconv.Quote(b.String())
}
