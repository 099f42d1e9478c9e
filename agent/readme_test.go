package main

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/talos-nodeinit/talos-nodeinit/pkg/harness/gobuild"
)

// readmeSection returns a "## " section of the README or of a page under
// docs/, without its heading.
func readmeSection(t *testing.T, heading string) string {
	t.Helper()
	pages, _ := filepath.Glob("../docs/*.md")
	var all []byte
	for _, p := range append([]string{"../README.md"}, pages...) {
		data, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, data...)
	}
	_, rest, ok := strings.Cut(string(all), "\n## "+heading+"\n")
	if !ok {
		t.Fatalf("neither the README nor docs/ has a section %q", heading)
	}
	if i := strings.Index(rest, "\n## "); i >= 0 {
		rest = rest[:i]
	}
	return rest
}

type fence struct {
	lang  string
	lines []string
}

// fences returns the fenced code blocks of markdown, unindented (blocks
// inside list items are indented like the item's text).
func fences(md string) []fence {
	var out []fence
	var cur *fence
	indent := ""
	for _, line := range strings.Split(md, "\n") {
		trimmed := strings.TrimLeft(line, " ")
		if strings.HasPrefix(trimmed, "```") {
			if cur == nil {
				indent = line[:len(line)-len(trimmed)]
				cur = &fence{lang: strings.TrimPrefix(trimmed, "```")}
				continue
			}
			out = append(out, *cur)
			cur = nil
			continue
		}
		if cur != nil {
			cur.lines = append(cur.lines, strings.TrimPrefix(line, indent))
		}
	}
	return out
}

var exitComment = regexp.MustCompile(`\s+#\s*exits (\d+)\s*$`)

// TestREADMEMigrationWalkthrough runs the README's "Migrating from Talos
// CCM" walk-through: every YAML block headed "# <file>" is written to that
// file, every `nodeinit-agent` and `nodeinit-coordinator` command is run
// with the built binary (a trailing "# exits N" says the exit code it must
// have; otherwise 0), and what the text says about the outcome is checked.
// Commands that need a cluster (talosctl, kubectl) are the ones whose
// output the YAML blocks give.
func TestREADMEMigrationWalkthrough(t *testing.T) {
	bin := t.TempDir()
	for name, path := range map[string]string{"nodeinit-agent": agentBinary(t), "nodeinit-coordinator": gobuild.Binary(t, "../coordinator")} {
		if err := os.Symlink(path, filepath.Join(bin, name)); err != nil {
			t.Fatal(err)
		}
	}
	work := t.TempDir()
	section := readmeSection(t, "Migrating from Talos CCM")
	outputs := map[string]string{} // command -> stdout+stderr
	var ran []string
	for _, f := range fences(section) {
		switch f.lang {
		case "yaml":
			name, ok := strings.CutPrefix(f.lines[0], "# ")
			if !ok || strings.ContainsAny(name, " /") {
				t.Fatalf("a YAML block of the walk-through does not start with its file name: %q", f.lines[0])
			}
			if err := os.WriteFile(filepath.Join(work, name), []byte(strings.Join(f.lines, "\n")), 0o600); err != nil {
				t.Fatal(err)
			}
		case "sh":
			for _, line := range f.lines {
				if !strings.HasPrefix(line, "nodeinit-agent ") && !strings.HasPrefix(line, "nodeinit-coordinator ") {
					continue
				}
				want := 0
				if m := exitComment.FindStringSubmatch(line); m != nil {
					want, _ = strconv.Atoi(m[1])
					line = strings.TrimSpace(line[:len(line)-len(m[0])])
				}
				var out bytes.Buffer
				cmd := exec.Command("sh", "-c", line)
				cmd.Dir, cmd.Stdout, cmd.Stderr = work, &out, &out
				cmd.Env = append(os.Environ(), "PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"))
				err := cmd.Run()
				code := 0
				var exit *exec.ExitError
				if errors.As(err, &exit) {
					code = exit.ExitCode()
				} else if err != nil {
					t.Fatalf("%s: %v", line, err)
				}
				if code != want {
					t.Fatalf("%s: exit %d, the README says %d:\n%s", line, code, want, out.String())
				}
				ran = append(ran, line)
				outputs[line] = out.String()
			}
		}
	}
	if len(ran) != 4 {
		t.Fatalf("ran %d nodeinit-agent and nodeinit-coordinator commands, want the walk-through's 4: %q", len(ran), ran)
	}
	read := func(name string) string {
		data, err := os.ReadFile(filepath.Join(work, name))
		if err != nil {
			t.Fatal(err)
		}
		return string(data)
	}
	// Step 1 names what the agent does not take as it is.
	for _, want := range []string{"ccm-configmap.yaml:10:7: global.clusterName", "ccm-configmap.yaml:24:11: transformations[0] (web): features.publicIPDiscovery: not supported"} {
		if !strings.Contains(outputs[ran[0]], want) {
			t.Errorf("validate of the Talos CCM ConfigMap lacks %q:\n%s", want, outputs[ran[0]])
		}
	}
	// Step 2: the patch, the fragment, the notes.
	patch, fragment := read("nodeinit-rules.yaml"), read("coordinator-fragment.yaml")
	for _, want := range []string{"kind: ExtensionServiceConfig", "betaTopologyLabels: true", "preferIPv6: true", "NODEINIT_PROVIDER_ID_POLICY=talos-fallback"} {
		if !strings.Contains(patch, want) {
			t.Errorf("nodeinit-rules.yaml lacks %q:\n%s", want, patch)
		}
	}
	for _, want := range []string{`clusterName: "prod"`, "adoptExisting: true"} {
		if !strings.Contains(fragment, want) {
			t.Errorf("coordinator-fragment.yaml lacks %q:\n%s", want, fragment)
		}
	}
	if !strings.Contains(outputs[ran[1]], "features.publicIPDiscovery dropped") {
		t.Errorf("migrate does not explain the dropped option:\n%s", outputs[ran[1]])
	}
	// Step 3: what the text says each node gets.
	web, db, ok := strings.Cut(outputs[ran[3]], "== node 10.5.0.3 (db-1)")
	if !ok {
		t.Fatalf("explain has no section for db-1:\n%s", outputs[ran[3]])
	}
	labelBy := regexp.MustCompile(`(?m)^label\s+node-role\.kubernetes\.io/web\s+coordinator\s*$`)
	if !labelBy.MatchString(web) || !regexp.MustCompile(`(?m)^label\s+failure-domain\.beta\.kubernetes\.io/zone\s+eu-central-1a\s+agent\s*$`).MatchString(web) {
		t.Errorf("web-1's section:\n%s", web)
	}
	if !regexp.MustCompile(`(?m)^label\s+node\.cloudprovider\.kubernetes\.io/lifecycle\s+spot\s+coordinator\s*$`).MatchString(db) {
		t.Errorf("db-1's section:\n%s", db)
	}
}
