package rules

import (
	"encoding/base64"
	"reflect"
	"regexp"
	"strings"
	"text/template"
)

// funcs are the template functions Talos CCM users rely on, with sprig's
// argument order (the value being worked on comes last, for pipelines).
var funcs = template.FuncMap{
	"default":  defaultValue,
	"empty":    empty,
	"coalesce": coalesce,
	"ternary":  ternary,

	"upper":      strings.ToUpper,
	"lower":      strings.ToLower,
	"trim":       strings.TrimSpace,
	"trimSuffix": func(suffix, s string) string { return strings.TrimSuffix(s, suffix) },
	"trimPrefix": func(prefix, s string) string { return strings.TrimPrefix(s, prefix) },
	"replace":    func(old, new, s string) string { return strings.ReplaceAll(s, old, new) },

	"regexFind":       regexFind,
	"regexFindString": regexFindString,
	"regexReplaceAll": regexReplaceAll,

	"contains":  func(sub, s string) bool { return strings.Contains(s, sub) },
	"hasPrefix": func(prefix, s string) bool { return strings.HasPrefix(s, prefix) },
	"hasSuffix": func(suffix, s string) bool { return strings.HasSuffix(s, suffix) },

	"b64enc": func(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) },
	"b64dec": func(s string) (string, error) {
		b, err := base64.StdEncoding.DecodeString(s)
		return string(b), err
	},

	"getValue": getValue,
}

func empty(v any) bool {
	rv := reflect.ValueOf(v)
	return !rv.IsValid() || rv.IsZero()
}

// defaultValue returns def when the value is missing or empty.
func defaultValue(def any, given ...any) any {
	if len(given) == 0 || empty(given[0]) {
		return def
	}
	return given[0]
}

func coalesce(values ...any) any {
	for _, v := range values {
		if !empty(v) {
			return v
		}
	}
	return nil
}

func ternary(ifTrue, ifFalse any, cond bool) any {
	if cond {
		return ifTrue
	}
	return ifFalse
}

func regexFind(re, s string) (string, error) {
	r, err := regexp.Compile(re)
	if err != nil {
		return "", err
	}
	return r.FindString(s), nil
}

// regexFindString returns the nth submatch (0 is the whole match), or "".
func regexFindString(re, s string, n int) (string, error) {
	r, err := regexp.Compile(re)
	if err != nil {
		return "", err
	}
	m := r.FindStringSubmatch(s)
	if n < 0 || n >= len(m) {
		return "", nil
	}
	return m[n], nil
}

func regexReplaceAll(re, s, repl string) (string, error) {
	r, err := regexp.Compile(re)
	if err != nil {
		return "", err
	}
	return r.ReplaceAllString(s, repl), nil
}

// getValue reads key from "k=v;k2=v2". Entries without "=" are skipped
// (Talos CCM panics on them).
func getValue(source, key string) string {
	for _, part := range strings.Split(source, ";") {
		k, v, ok := strings.Cut(part, "=")
		if ok && k == key {
			return v
		}
	}
	return ""
}
