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

// TestAgentsRulesSameInTalos113: the stand-in serves Talos 1.14.1's
// authorization; what the agent relies on (reading resources, ext-*
// admission) must be the same in Talos 1.13.7's machined, which users of
// the extension on 1.13 run, so the stand-in's answers hold there too.
func TestAgentsRulesSameInTalos113(t *testing.T) {
	src := func(version string) string {
		out, err := exec.Command("go", "mod", "download", "-json", "github.com/siderolabs/talos@"+version).Output()
		if err != nil {
			t.Fatalf("go mod download github.com/siderolabs/talos@%s: %v", version, err)
		}
		dir := regexp.MustCompile(`"Dir": "([^"]+)"`).FindSubmatch(out)
		if dir == nil {
			t.Fatalf("go mod download printed no Dir: %s", out)
		}
		b, err := os.ReadFile(filepath.Join(string(dir[1]), "internal/app/machined/pkg/system/services/machined.go"))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	old, cur := src("v1.13.7"), src("v1.14.1")
	for _, method := range []string{"/cosi.resource.State/Get", "/cosi.resource.State/List", "/cosi.resource.State/Watch"} {
		re := regexp.MustCompile(`"` + regexp.QuoteMeta(method) + `":\s*(role\.MakeSet\([^)]*\))`)
		a, b := re.FindStringSubmatch(old), re.FindStringSubmatch(cur)
		if a == nil || b == nil || a[1] != b[1] {
			t.Errorf("%s: Talos 1.13.7 %v, 1.14.1 %v", method, a, b)
		}
	}
	ext := regexp.MustCompile(`(?s)Pattern:\s*"ext-\*",.*?\}`)
	a, b := ext.FindString(old), ext.FindString(cur)
	if a == "" || a != b {
		t.Errorf("the ext-* service rule differs:\n1.13.7: %s\n1.14.1: %s", a, b)
	}
}
