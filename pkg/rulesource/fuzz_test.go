package rulesource

import (
	"os"
	"testing"

	"github.com/talos-nodeinit/talos-nodeinit/pkg/facts"
	"github.com/talos-nodeinit/talos-nodeinit/pkg/rules"
)

// FuzzLoad: no input makes finding, decoding or compiling rules panic, and
// every problem has a position inside the input.
func FuzzLoad(f *testing.F) {
	for _, file := range []string{"testdata/machineconfig-worker.yaml", "testdata/talos-ccm-configmap.yaml", "../../extension/patches/rules.yaml",
		"../rules/testdata/talos-ccm/config-md-quoted.yaml", "../rules/testdata/talos-ccm/rules-yaml.yaml"} {
		data, err := os.ReadFile(file)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Add([]byte("transformations:\n- name: a\n  labels:\n    a: b\n   c: d\n"))
	f.Add([]byte("global: &g {preferIPv6: true}\ntransformations: [*g]\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		r, _, err := Load(data)
		if err != nil {
			if ps, ok := err.(rules.Problems); ok {
				lines := 1
				for _, b := range data {
					if b == '\n' {
						lines++
					}
				}
				for _, p := range ps {
					if p.Pos.Line < 0 || p.Pos.Line > lines+1 {
						t.Fatalf("problem at line %d of a %d-line input: %v", p.Pos.Line, lines, p)
					}
				}
			}
			return
		}
		r.Evaluate(rules.Facts{Metadata: facts.Platform{Platform: "metal", Hostname: "web-1"}})
	})
}
