package rulesource

import (
	"testing"
)

// The environment is read as Talos reads it: aliases resolved, each entry
// at its own line and column.
func TestEnvironment(t *testing.T) {
	doc := `apiVersion: v1alpha1
kind: ExtensionServiceConfig
name: nodeinit-agent
configFiles:
  - mountPath: /usr/local/etc/nodeinit/rules.yaml
    content: |
      transformations: []
x-env: &env
  - &fmt NODEINIT_LOG_FORMAT=json
  - NODEINIT_FACTS=auto
environment: *env
`
	s, err := Find([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Environment) != 2 || s.Environment[0].Entry != "NODEINIT_LOG_FORMAT=json" || s.Environment[1].Entry != "NODEINIT_FACTS=auto" {
		t.Fatalf("environment %+v", s.Environment)
	}
	if s.Environment[1].Pos.Line != 10 || s.Environment[1].Pos.Col != 5 {
		t.Errorf("second entry at %+v, want 10:5", s.Environment[1].Pos)
	}
	doc2 := doc[:len(doc)-len("environment: *env\n")] + "environment:\n  - *fmt\n"
	if s, err = Find([]byte(doc2)); err != nil {
		t.Fatal(err)
	}
	if len(s.Environment) != 1 || s.Environment[0].Entry != "NODEINIT_LOG_FORMAT=json" {
		t.Errorf("an alias entry read as %+v", s.Environment)
	}
}
