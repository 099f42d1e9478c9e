package spdx

import (
	"regexp"
	"runtime/debug"
	"testing"
)

func TestFor(t *testing.T) {
	bi := &debug.BuildInfo{
		GoVersion: "go1.26.0",
		Main:      debug.Module{Path: "example.com/agent"},
		Deps: []*debug.Module{
			{Path: "k8s.io/client-go", Version: "v0.36.3"},
			{Path: "example.com/old", Version: "v1.0.0", Replace: &debug.Module{Path: "example.com/fork", Version: "v1.0.1"}},
		},
		Settings: []debug.BuildSetting{{Key: "vcs.time", Value: "2026-11-20T10:00:00Z"}},
	}
	doc, err := For(Binary{Name: "agent", Version: "v0.1.0", License: "Apache-2.0", Namespace: "https://example.com/spdx/"}, bi)
	if err != nil {
		t.Fatal(err)
	}
	data, err := doc.JSON()
	if err != nil {
		t.Fatal(err)
	}
	items, err := AsTalosReads(data)
	if err != nil {
		t.Fatal(err)
	}
	want := []struct{ name, version, license, purl string }{
		{"agent", "v0.1.0", "Apache-2.0", "pkg:golang/example.com/agent@v0.1.0"},
		{"go", "1.26.0", "", "pkg:golang/stdlib@go1.26.0"},
		{"k8s.io/client-go", "v0.36.3", "", "pkg:golang/k8s.io/client-go@v0.36.3"},
		{"example.com/fork", "v1.0.1", "", "pkg:golang/example.com/fork@v1.0.1"},
	}
	if len(items) != len(want) {
		t.Fatalf("%d packages, want %d: %s", len(items), len(want), data)
	}
	for i, w := range want {
		p := items[i]
		if p.Name != w.name || p.Version != w.version || p.License != w.license || len(p.PURLs) != 1 || p.PURLs[0] != w.purl || len(p.CPEs) != 0 {
			t.Errorf("package %d = %+v, want %+v", i, p, w)
		}
	}
	if doc.CreationInfo.Created != "2026-11-20T10:00:00Z" || doc.DocumentNamespace != "https://example.com/spdx/agent-v0.1.0" {
		t.Errorf("creation %q namespace %q", doc.CreationInfo.Created, doc.DocumentNamespace)
	}
	ids := map[string]bool{}
	valid := regexp.MustCompile(`^SPDXRef-[a-zA-Z0-9.-]+$`)
	for _, p := range doc.Packages {
		if !valid.MatchString(p.SPDXID) || ids[p.SPDXID] {
			t.Errorf("SPDXID %q invalid or repeated", p.SPDXID)
		}
		ids[p.SPDXID] = true
	}
	if len(doc.Relationships) != len(want) || doc.Relationships[0].Type != "DESCRIBES" {
		t.Errorf("relationships %+v", doc.Relationships)
	}

	// Reproducible without a commit time.
	bi.Settings = nil
	a, _ := For(Binary{Name: "agent", Version: "v0.1.0"}, bi)
	b, _ := For(Binary{Name: "agent", Version: "v0.1.0"}, bi)
	ja, _ := a.JSON()
	jb, _ := b.JSON()
	if string(ja) != string(jb) || a.CreationInfo.Created != "1970-01-01T00:00:00Z" || a.Packages[0].LicenseDeclared != "NOASSERTION" {
		t.Errorf("not reproducible, or wrong defaults: %s", ja)
	}
}

func TestForRefuses(t *testing.T) {
	for _, b := range []Binary{{}, {Name: "agent"}, {Version: "v1"}} {
		if _, err := For(b, &debug.BuildInfo{}); err == nil {
			t.Errorf("For(%+v) = nil error", b)
		}
	}
}
