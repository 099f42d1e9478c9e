package docs

import (
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/talos-nodeinit/talos-nodeinit/coordinator/config"
)

var update = flag.Bool("update", false, "rewrite the generated parts of the docs")

const (
	refStart = "<!-- configuration reference: generated from coordinator/config by `go test ./hack/docs -run TestConfigReference -update`; do not edit -->\n"
	refEnd   = "<!-- end of the configuration reference -->\n"
)

// docs/config.md's table of the coordinator's configuration keys is the
// code's: every key its yaml tag, its default what an empty file parses
// to, its text the field's doc comment. A key added, renamed, documented
// or defaulted differently in the code fails this until the doc is
// regenerated (-update).
func TestConfigReference(t *testing.T) {
	want := configReference(t)
	doc := read(t, "docs/config.md")
	i, j := strings.Index(doc, refStart), strings.Index(doc, refEnd)
	if i < 0 || j < i {
		t.Fatalf("docs/config.md has no generated configuration reference (%q … %q)", refStart, refEnd)
	}
	if got := doc[i+len(refStart) : j]; got != want {
		if *update {
			if err := os.WriteFile(filepath.Join(root, "docs/config.md"), []byte(doc[:i+len(refStart)]+want+doc[j:]), 0o644); err != nil {
				t.Fatal(err)
			}
			return
		}
		t.Errorf("docs/config.md's configuration reference is not the code's: run `go test ./hack/docs -run TestConfigReference -update`\nwant:\n%s", want)
	}
}

// configReference renders the table from the config package's types.
func configReference(t *testing.T) string {
	t.Helper()
	comments := map[string]string{} // Type.Field → its doc comment
	fields := map[string][]*ast.Field{}
	for _, dir := range []string{"coordinator/config", "pkg/grants"} {
		pkgs, err := parser.ParseDir(token.NewFileSet(), filepath.Join(root, dir), func(fi os.FileInfo) bool { return !strings.HasSuffix(fi.Name(), "_test.go") }, parser.ParseComments)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range pkgs {
			for _, f := range p.Files {
				ast.Inspect(f, func(n ast.Node) bool {
					ts, ok := n.(*ast.TypeSpec)
					if !ok {
						return true
					}
					if st, isStruct := ts.Type.(*ast.StructType); isStruct {
						fields[ts.Name.Name] = st.Fields.List
						for _, fd := range st.Fields.List {
							for _, name := range fd.Names {
								comments[ts.Name.Name+"."+name.Name] = strings.Join(strings.Fields(fd.Doc.Text()), " ")
							}
						}
					}
					return true
				})
			}
		}
	}
	cfg, err := config.Parse(nil)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	b.WriteString("| key | default | |\n|---|---|---|\n")
	var walk func(typ reflect.Type, val reflect.Value, prefix string)
	walk = func(typ reflect.Type, val reflect.Value, prefix string) {
		for i := range typ.NumField() {
			f := typ.Field(i)
			tag, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
			if tag == "" || tag == "-" || !f.IsExported() {
				continue
			}
			key, v := prefix+tag, val.Field(i)
			if f.Type.Kind() == reflect.Struct && f.Type != reflect.TypeFor[config.Duration]() {
				walk(f.Type, v, key+".")
				continue
			}
			text := comments[typ.Name()+"."+f.Name]
			if text == "" && prefix != "" {
				// A struct's own fields say what they hold; its parent says what it is for.
				text = comments[strings.TrimSuffix(prefix, ".")]
			}
			// Go's "Field is …" reads as the key's description.
			if w := strings.Fields(text); len(w) > 1 && w[0] == f.Name {
				w = w[1:]
				if w[0] == "is" || w[0] == "are" {
					w = w[1:]
				}
				w[0] = strings.ToUpper(w[0][:1]) + w[0][1:]
				text = strings.Join(w, " ")
			}
			if strings.Contains(strings.ToLower(text), "was replaced by") {
				continue // a key kept only to say where it went
			}
			fmt.Fprintf(&b, "| `%s` | %s | %s |\n", key, shown(v), strings.ReplaceAll(text, "|", `\|`))
		}
	}
	walk(reflect.TypeFor[config.Config](), reflect.ValueOf(*cfg), "")
	return b.String()
}

// shown is a default as YAML on one line, or "unset".
func shown(v reflect.Value) string {
	if v.Kind() == reflect.Pointer {
		if v.IsNil() {
			return "unset"
		}
		v = v.Elem()
	}
	if v.IsZero() {
		switch v.Kind() {
		case reflect.Slice:
			return "`[]`"
		case reflect.Bool:
			return "`false`"
		case reflect.String:
			return "unset"
		}
	}
	out, err := yaml.Marshal(v.Interface())
	if err != nil {
		return "?"
	}
	s := strings.TrimSpace(string(out))
	if v.Kind() == reflect.Slice {
		var items []string
		for i := range v.Len() {
			b, _ := yaml.Marshal(v.Index(i).Interface())
			items = append(items, strings.TrimSpace(string(b)))
		}
		s = "[" + strings.Join(items, ", ") + "]"
	}
	return "`" + s + "`"
}
