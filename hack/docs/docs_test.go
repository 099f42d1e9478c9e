package docs

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

const root = "../.."

// userDocs are the documents a user reads; developer notes live beside
// the code they concern.
var userDocs = []string{"README.md", "SECURITY.md", "DESIGN.md", "CHANGELOG.md", "BENCHMARKS.md",
	"docs/install.md", "docs/config.md", "docs/rules.md", "docs/operations.md", "docs/migrating.md", "docs/development.md"}

func read(t *testing.T, name string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(root, name))
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return string(data)
}

// The README opens with the two commands that work on a fresh machine.
func TestREADMEOpensWithTwoCommands(t *testing.T) {
	readme := read(t, "README.md")
	block := regexp.MustCompile("(?s)^# [^\n]+\n\n```sh\n(.*?)```").FindStringSubmatch(readme)
	if block == nil {
		t.Fatal("the README does not open with a title and a sh block")
	}
	var cmds []string
	for _, line := range strings.Split(strings.TrimSpace(block[1]), "\n") {
		cmds = append(cmds, strings.TrimSpace(strings.SplitN(line, "#", 2)[0]))
	}
	if strings.Join(cmds, ";") != "make demo;make test" {
		t.Errorf("opening commands %q, want make demo and make test", cmds)
	}
}

// Every target in the Makefile says what it is for in `make help`, and the
// README's copy of `make help` is current.
func TestMakeHelpListsEveryTarget(t *testing.T) {
	makefile := read(t, "Makefile")
	target := regexp.MustCompile(`(?m)^([a-z0-9-]+):([^=]|$)`)
	described := regexp.MustCompile(`(?m)^([a-z0-9-]+):.*## \S`)
	have := map[string]bool{}
	for _, m := range described.FindAllStringSubmatch(makefile, -1) {
		have[m[1]] = true
	}
	for _, m := range target.FindAllStringSubmatch(makefile, -1) {
		if !have[m[1]] {
			t.Errorf("make target %s has no `## purpose`, so make help does not list it", m[1])
		}
	}
	cmd := exec.Command("make", "-s", "help")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("make help: %v", err)
	}
	for name := range have {
		if !strings.Contains(string(out), "  "+name+" ") {
			t.Errorf("make help does not list %s", name)
		}
	}
	if !strings.Contains(read(t, "docs/development.md"), "```\n"+string(out)+"```\n") {
		t.Errorf("docs/development.md's Make targets block is not `make help`'s output; paste:\n%s", out)
	}
}

var (
	link    = regexp.MustCompile(`\]\(([^)\s]+)\)`)
	heading = regexp.MustCompile(`(?m)^#{1,6} (.+)$`)
	// Paths the README tells users to type or read.
	repoPath = regexp.MustCompile("(?:^|[\\s`@(])((?:extension|coordinator|hack|pkg|agent)/[A-Za-z0-9_./-]*[A-Za-z0-9_-])")
)

// slug is GitHub's anchor for a heading.
func slug(h string) string {
	h = strings.ToLower(strings.TrimSpace(h))
	h = regexp.MustCompile("[`*]").ReplaceAllString(h, "")
	var b strings.Builder
	for _, r := range h {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r > 127:
			b.WriteRune(r)
		}
	}
	return b.String()
}

// Every relative link and in-page anchor in the user docs, and every
// repository path the README names, exists.
func TestLinksAndPathsResolve(t *testing.T) {
	docs := append([]string{}, userDocs...)
	more, _ := filepath.Glob(filepath.Join(root, "hack", "*", "README.md"))
	for _, m := range more {
		rel, _ := filepath.Rel(root, m)
		docs = append(docs, rel)
	}
	for _, doc := range docs {
		text := read(t, doc)
		anchors := map[string]bool{}
		for _, h := range heading.FindAllStringSubmatch(text, -1) {
			anchors[slug(h[1])] = true
		}
		for _, m := range link.FindAllStringSubmatch(text, -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			file, anchor, _ := strings.Cut(target, "#")
			if file == "" {
				if !anchors[anchor] {
					t.Errorf("%s: link to #%s, which no heading there makes", doc, anchor)
				}
				continue
			}
			if _, err := os.Stat(filepath.Join(root, filepath.Dir(doc), file)); err != nil {
				t.Errorf("%s: link to %s, which does not exist", doc, target)
			}
		}
	}
	readme := read(t, "README.md")
	for _, d := range userDocs {
		if strings.HasPrefix(d, "docs/") {
			readme += "\n" + read(t, d)
		}
	}
	sc := bufio.NewScanner(strings.NewReader(readme))
	for sc.Scan() {
		for _, m := range repoPath.FindAllStringSubmatch(sc.Text(), -1) {
			p := strings.TrimSuffix(m[1], ".")
			if strings.ContainsAny(p, "<*{") {
				continue
			}
			if _, err := os.Stat(filepath.Join(root, p)); err != nil {
				t.Errorf("README names %s, which does not exist", p)
			}
		}
	}
}

// Notes about the machine the project is built on (its module proxy, its
// checksum database) are for developers, beside the code they concern,
// not for users.
func TestUserDocsHaveNoBuildEnvironmentNotes(t *testing.T) {
	for _, doc := range []string{"README.md", "SECURITY.md", "DESIGN.md", "CHANGELOG.md"} {
		text := strings.ToLower(read(t, doc))
		for _, s := range []string{"module proxy", "gosumdb", "proxy refuses", "cannot be built here", "../shared"} {
			if strings.Contains(text, s) {
				t.Errorf("%s mentions %q: move it to the developer notes beside the code", doc, s)
			}
		}
	}
}

// actionlintVersion is the actionlint the workflows are checked with,
// built from its Go module (the module proxy serves it).
const actionlintVersion = "v1.7.12"

// The forge's workflows (.github/workflows) pass actionlint, which checks
// their syntax, expressions, action inputs and the shell they run; and
// the CI workflow runs .ci/run, the release workflow `make release`.
func TestWorkflowsPassActionlint(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(root, ".github/workflows/*.yml"))
	if err != nil || len(files) < 2 {
		t.Fatalf("workflows %v (%v): want ci.yml and release.yml", files, err)
	}
	dir := t.TempDir()
	install := exec.Command("go", "install", "github.com/rhysd/actionlint/cmd/actionlint@"+actionlintVersion)
	install.Env = append(os.Environ(), "GOBIN="+dir)
	if out, err := install.CombinedOutput(); err != nil {
		t.Fatalf("building actionlint %s from its module: %v\n%s", actionlintVersion, err, out)
	}
	out, err := exec.Command(filepath.Join(dir, "actionlint"), append([]string{"-no-color"}, files...)...).CombinedOutput()
	if err != nil {
		t.Errorf("actionlint %s: %v\n%s", actionlintVersion, err, out)
	}
	for file, want := range map[string]string{"ci.yml": ".ci/run", "release.yml": "make release"} {
		if !strings.Contains(read(t, ".github/workflows/"+file), want) {
			t.Errorf("%s does not run %s", file, want)
		}
	}
	// A release is signed: the key from a secret reaches make release,
	// with the cosign make release is written for, and the public half
	// (cosign.pub) attached to the release.
	release := read(t, ".github/workflows/release.yml")
	m := regexp.MustCompile(`CosignVersion = "(v[0-9.]+)"`).FindStringSubmatch(read(t, "hack/manifests/release.go"))
	if m == nil {
		t.Fatal("hack/manifests/release.go names no CosignVersion")
	}
	for _, want := range []string{"secrets.COSIGN_PRIVATE_KEY", "secrets.COSIGN_PASSWORD", `COSIGN_KEY="$RUNNER_TEMP/cosign.key"`, "cosign/v2/cmd/cosign@" + m[1], `"$RUNNER_TEMP/cosign.pub" --verify-tag`} {
		if !strings.Contains(release, want) {
			t.Errorf("release.yml lacks %q: releases would go out unsigned or with another cosign", want)
		}
	}
}
