package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestRulesMatchTalos checks rules.go still holds machined's role rules and
// allowed services, verbatim, from the Talos version go.mod pins.
func TestRulesMatchTalos(t *testing.T) {
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "github.com/siderolabs/talos").Output()
	if err != nil {
		t.Fatalf("go list -m github.com/siderolabs/talos: %v (run `go mod download` in hack/machined)", err)
	}
	src, err := os.ReadFile(filepath.Join(strings.TrimSpace(string(out)), "internal/app/machined/pkg/system/services/machined.go"))
	if err != nil {
		t.Fatal(err)
	}
	ours, err := os.ReadFile("rules.go")
	if err != nil {
		t.Fatal(err)
	}
	rulesRe := regexp.MustCompile(`(?s)var rules = map\[string\]role\.Set\{\n.*?\n\}\n`)
	want, got := rulesRe.Find(src), rulesRe.Find(ours)
	if want == nil || string(want) != string(got) {
		t.Errorf("rules differ from machined.go's:\nmachined.go:\n%s\nrules.go:\n%s", want, got)
	}
	servicesRe := regexp.MustCompile(`(?s)AllowedServices: \[\]unix\.AllowedService\{\n(.*?)\n\t\t\},\n`)
	m := servicesRe.FindSubmatch(src)
	if m == nil {
		t.Fatal("machined.go has no AllowedServices list any more")
	}
	wantSvc := regexp.MustCompile(`(?m)^\t\t`).ReplaceAllString(string(m[1]), "")
	if !strings.Contains(string(ours), "var allowedServices = []unix.AllowedService{\n"+wantSvc+"\n}\n") {
		t.Errorf("allowedServices differ from machined.go's:\n%s", wantSvc)
	}
}
