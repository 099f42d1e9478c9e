package extension_test

// The agent as a siderolabs/extensions package (siderolabs/): this test
// renders it as bldr would, runs its build on a `git archive` tarball of
// HEAD, and checks the result the way upstream's extensions-validator does,
// with the same Talos machinery calls.

import (
	"bytes"
	"crypto/sha256"
	"crypto/sha512"
	"debug/buildinfo"
	"debug/elf"
	"encoding/hex"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"text/template"

	"github.com/blang/semver/v4"
	"github.com/siderolabs/talos/pkg/machinery/extensions"
	"github.com/siderolabs/talos/pkg/machinery/extensions/services"
	"go.yaml.in/yaml/v4"
)

const (
	siderolabsDir = "siderolabs"
	pkgDir        = "siderolabs/misc/nodeinit-agent"
	pkgName       = "nodeinit-agent"
)

// bldrPkg is a pkg.yaml, the fields bldr's format (v1alpha2) has that
// upstream's service extensions use. Decoding is strict: a key outside
// these is an error.
type bldrPkg struct {
	Name         string `yaml:"name"`
	Variant      string `yaml:"variant"`
	Shell        string `yaml:"shell"`
	Dependencies []struct {
		Stage string `yaml:"stage"`
		Image string `yaml:"image"`
		From  string `yaml:"from"`
		To    string `yaml:"to"`
	} `yaml:"dependencies"`
	Steps    []bldrStep `yaml:"steps"`
	Finalize []struct {
		From string `yaml:"from"`
		To   string `yaml:"to"`
	} `yaml:"finalize"`
}

type bldrStep struct {
	Env        map[string]string `yaml:"env"`
	CachePaths []string          `yaml:"cachePaths"`
	Network    string            `yaml:"network"`
	Sources    []struct {
		URL         string `yaml:"url"`
		Destination string `yaml:"destination"`
		SHA256      string `yaml:"sha256"`
		SHA512      string `yaml:"sha512"`
	} `yaml:"sources"`
	Prepare []string `yaml:"prepare"`
	Build   []string `yaml:"build"`
	Install []string `yaml:"install"`
	Test    []string `yaml:"test"`
	SBOM    *struct {
		OutputPath string   `yaml:"outputPath"`
		Version    string   `yaml:"version"`
		CPEs       []string `yaml:"cpes"`
		Licenses   []string `yaml:"licenses"`
	} `yaml:"sbom"`
}

// render is bldr's templating of a package file: Go templates over the
// vars, a missing one an error.
func render(t *testing.T, file string, vars map[string]string) []byte {
	t.Helper()
	src, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	tmpl, err := template.New(filepath.Base(file)).Option("missingkey=error").Parse(string(src))
	if err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	var b bytes.Buffer
	if err := tmpl.Execute(&b, vars); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	return b.Bytes()
}

func loadStrict(t *testing.T, name string, data []byte, v any) {
	t.Helper()
	if err := yaml.Load(data, v, yaml.WithKnownFields()); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
}

// packageVars are the vars bldr gives the package: the category's
// (misc/vars.yaml, here only our lines), then the package's vars.yaml
// rendered over them. over replaces category vars (the trial checksums).
func packageVars(t *testing.T, over map[string]string) map[string]string {
	t.Helper()
	vars := map[string]string{}
	data, err := os.ReadFile(filepath.Join(siderolabsDir, "misc", "vars.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	loadStrict(t, "misc/vars.yaml", data, &vars)
	maps.Copy(vars, over)
	var own map[string]string
	loadStrict(t, "vars.yaml", render(t, filepath.Join(pkgDir, "vars.yaml"), vars), &own)
	maps.Copy(vars, own)
	return vars
}

// hackExtensionConsts are the string constants of hack/extension/main.go,
// `make extension`'s image layout.
func hackExtensionConsts(t *testing.T) map[string]string {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), "../hack/extension/main.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	consts := map[string]string{}
	for _, d := range f.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok || g.Tok != token.CONST {
			continue
		}
		for _, s := range g.Specs {
			vs := s.(*ast.ValueSpec)
			for i, n := range vs.Names {
				if lit, ok := vs.Values[i].(*ast.BasicLit); ok && lit.Kind == token.STRING {
					consts[n.Name], _ = strconv.Unquote(lit.Value)
				}
			}
		}
	}
	for _, k := range []string{"ManifestPath", "ServiceSpecPath", "BinaryPath", "SBOMPath", "License"} {
		if consts[k] == "" {
			t.Fatalf("hack/extension/main.go has no string constant %s", k)
		}
	}
	return consts
}

// upstream's extensions-validator accepts these version forms; ours is semver.
var validatorSemver = regexp.MustCompile(`^v?(\d+\.\d+\.\d+(-[0-9A-Za-z-]+(\.[0-9A-Za-z-]+)*)?)$`)

func TestSiderolabsPackage(t *testing.T) {
	layout := hackExtensionConsts(t)

	t.Run("files", func(t *testing.T) {
		entries, err := os.ReadDir(pkgDir)
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		// Upstream's service packages: pkg.yaml, vars.yaml, manifest.yaml.tmpl,
		// <name>.yaml and README.md, nothing bldr would not read.
		want := []string{"README.md", "manifest.yaml.tmpl", pkgName + ".yaml", "pkg.yaml", "vars.yaml"}
		if !slices.Equal(names, want) {
			t.Errorf("%s holds %v, want %v", pkgDir, names, want)
		}
		if filepath.Base(pkgDir) != pkgName {
			t.Errorf("package directory %s is not named %s", pkgDir, pkgName)
		}
	})

	t.Run("vars", func(t *testing.T) {
		src, err := os.ReadFile(filepath.Join(siderolabsDir, "misc", "vars.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		// Renovate keeps the version: its comment is the line above it.
		if !regexp.MustCompile(`(?m)^# renovate: datasource=github-releases depName=talos-nodeinit/talos-nodeinit\nNODEINIT_AGENT_VERSION: `).Match(src) {
			t.Errorf("misc/vars.yaml: NODEINIT_AGENT_VERSION has no renovate comment above it")
		}
		vars := packageVars(t, nil)
		if !regexp.MustCompile(`^v\d+\.\d+\.\d+$`).MatchString(vars["NODEINIT_AGENT_VERSION"]) {
			t.Errorf("NODEINIT_AGENT_VERSION %q is not a release tag vX.Y.Z", vars["NODEINIT_AGENT_VERSION"])
		}
		if !regexp.MustCompile(`^[0-9a-f]{64}$`).MatchString(vars["NODEINIT_AGENT_SHA256"]) {
			t.Errorf("NODEINIT_AGENT_SHA256 %q is not a sha256", vars["NODEINIT_AGENT_SHA256"])
		}
		if !regexp.MustCompile(`^[0-9a-f]{128}$`).MatchString(vars["NODEINIT_AGENT_SHA512"]) {
			t.Errorf("NODEINIT_AGENT_SHA512 %q is not a sha512", vars["NODEINIT_AGENT_SHA512"])
		}
		if vars["VERSION"] != vars["NODEINIT_AGENT_VERSION"] {
			t.Errorf("vars.yaml VERSION %q, want the pinned %q", vars["VERSION"], vars["NODEINIT_AGENT_VERSION"])
		}
		// Upstream's tiers; a third-party package is contrib.
		if vars["TIER"] != "contrib" {
			t.Errorf("vars.yaml TIER %q, want contrib", vars["TIER"])
		}
	})

	t.Run("manifest", func(t *testing.T) {
		vars := packageVars(t, nil)
		var got, ours extensions.Manifest
		loadStrict(t, "manifest.yaml.tmpl", render(t, filepath.Join(pkgDir, "manifest.yaml.tmpl"), vars), &got)
		data, err := os.ReadFile("../manifest.yaml")
		if err != nil {
			t.Fatal(err)
		}
		loadStrict(t, "manifest.yaml", data, &ours)
		if got.Version != "v1alpha1" {
			t.Errorf("manifest version %q, want v1alpha1", got.Version)
		}
		if got.Metadata.Version != vars["NODEINIT_AGENT_VERSION"] || !validatorSemver.MatchString(got.Metadata.Version) {
			t.Errorf("manifest metadata.version %q, want the pinned %q", got.Metadata.Version, vars["NODEINIT_AGENT_VERSION"])
		}
		// The release's version placeholder in ../manifest.yaml is the pinned one.
		if ours.Metadata.Version != vars["NODEINIT_AGENT_VERSION"] {
			t.Errorf("manifest.yaml says %s, misc/vars.yaml pins %s", ours.Metadata.Version, vars["NODEINIT_AGENT_VERSION"])
		}
		desc, ok := strings.CutPrefix(got.Metadata.Description, "[contrib] ")
		if !ok {
			t.Errorf("description %q does not open with its tier, as upstream's catalog expects", got.Metadata.Description)
		}
		got.Metadata.Description, got.Metadata.Version = desc, ours.Metadata.Version
		if got != ours {
			t.Errorf("manifest.yaml.tmpl renders\n%+v\nmanifest.yaml says\n%+v", got, ours)
		}
	})

	t.Run("service spec", func(t *testing.T) {
		shipped, err := os.ReadFile("nodeinit-agent.yaml")
		if err != nil {
			t.Fatal(err)
		}
		copied, err := os.ReadFile(filepath.Join(pkgDir, pkgName+".yaml"))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(copied, shipped) {
			t.Errorf("%s/%s.yaml differs from extension/nodeinit-agent.yaml: copy it again", pkgDir, pkgName)
		}
		var spec services.Spec
		loadStrict(t, pkgName+".yaml", copied, &spec)
		if err := spec.Validate(); err != nil {
			t.Errorf("services.Spec.Validate: %v", err)
		}
		if spec.Name != pkgName {
			t.Errorf("service name %q, want %q", spec.Name, pkgName)
		}
	})

	t.Run("pkg.yaml", func(t *testing.T) {
		var p bldrPkg
		loadStrict(t, "pkg.yaml", render(t, filepath.Join(pkgDir, "pkg.yaml"), packageVars(t, nil)), &p)
		checkPkg(t, p, packageVars(t, nil), layout)
	})

	t.Run("build", func(t *testing.T) {
		testBuild(t, layout)
	})
}

// checkPkg holds pkg.yaml to the shape of upstream's Go-built service
// packages (tailscale, newt, netbird).
func checkPkg(t *testing.T, p bldrPkg, vars map[string]string, layout map[string]string) {
	t.Helper()
	if p.Name != pkgName || p.Variant != "scratch" || p.Shell != "/bin/bash" {
		t.Errorf("name/variant/shell %q/%q/%q, want %s/scratch//bin/bash", p.Name, p.Variant, p.Shell, pkgName)
	}
	if len(p.Dependencies) == 0 || p.Dependencies[0].Stage != "base" {
		t.Errorf("dependencies %+v: the first is not the base stage (the toolchain and /extensions-validator)", p.Dependencies)
	}
	var sources, downloads, builds int
	var sbom, validates, versionTest bool
	var installs string
	for _, s := range p.Steps {
		for _, src := range s.Sources {
			sources++
			want := "https://github.com/talos-nodeinit/talos-nodeinit/releases/download/" + vars["NODEINIT_AGENT_VERSION"] + "/talos-nodeinit-" + vars["NODEINIT_AGENT_VERSION"] + ".tar.gz"
			if src.URL != want {
				t.Errorf("source url %s, want %s (the release asset source-tarball.sh writes)", src.URL, want)
			}
			if src.SHA256 != vars["NODEINIT_AGENT_SHA256"] || src.SHA512 != vars["NODEINIT_AGENT_SHA512"] {
				t.Errorf("source %s is not pinned by NODEINIT_AGENT_SHA256/SHA512", src.URL)
			}
		}
		all := strings.Join(slices.Concat(s.Prepare, s.Build), "\n")
		if strings.Contains(all, "go mod download") {
			downloads++
			if s.Network != "default" {
				t.Errorf("go mod download in a step with network %q, want default", s.Network)
			}
		}
		if strings.Contains(all, "go build") {
			builds++
			if s.Network != "none" {
				t.Errorf("go build in a step with network %q, want none", s.Network)
			}
			if !strings.Contains(all, "CGO_ENABLED=0") {
				t.Errorf("go build without CGO_ENABLED=0")
			}
		}
		installs += strings.Join(s.Install, "\n")
		if s.SBOM != nil {
			sbom = true
			if s.SBOM.OutputPath != "/"+layout["SBOMPath"] {
				t.Errorf("sbom outputPath %s, want /%s (make extension's)", s.SBOM.OutputPath, layout["SBOMPath"])
			}
			if !slices.Equal(s.SBOM.Licenses, []string{layout["License"]}) || s.SBOM.Version != vars["NODEINIT_AGENT_VERSION"] {
				t.Errorf("sbom licenses %v version %s, want [%s] %s", s.SBOM.Licenses, s.SBOM.Version, layout["License"], vars["NODEINIT_AGENT_VERSION"])
			}
		}
		for _, sh := range s.Test {
			if strings.Contains(sh, `/extensions-validator validate --rootfs=/extensions-validator-rootfs --pkg-name="${PKG_NAME}"`) &&
				strings.Contains(sh, "cp /pkg/manifest.yaml /extensions-validator-rootfs/manifest.yaml") {
				validates = true
			}
			if strings.Contains(sh, "--version") {
				versionTest = true
			}
		}
	}
	if sources != 1 || downloads != 1 || builds != 1 {
		t.Errorf("%d sources, %d go mod download steps, %d go build steps: want one each", sources, downloads, builds)
	}
	for _, want := range []string{"/" + filepath.Dir(layout["BinaryPath"]) + "/", "cp /pkg/" + pkgName + ".yaml /" + filepath.Dir(layout["ServiceSpecPath"]) + "/"} {
		if !strings.Contains(installs, want) {
			t.Errorf("install steps do not name %s", want)
		}
	}
	if !sbom || !validates || !versionTest {
		t.Errorf("sbom %v, extensions-validator test %v, --version test %v: want all", sbom, validates, versionTest)
	}
	fin := []string{}
	for _, f := range p.Finalize {
		fin = append(fin, f.From+"->"+f.To)
	}
	if !slices.Equal(fin, []string{"/rootfs->/rootfs", "/pkg/manifest.yaml->/"}) {
		t.Errorf("finalize %v, want /rootfs->/rootfs and /pkg/manifest.yaml->/", fin)
	}
}

// testBuild runs pkg.yaml's steps on a source tarball of HEAD that
// source-tarball.sh writes, paths under / moved into a temp dir, and
// checks what they install as extensions-validator would.
func testBuild(t *testing.T, layout map[string]string) {
	tmp := t.TempDir()
	version := packageVars(t, nil)["NODEINIT_AGENT_VERSION"]

	// The tarball and the vars lines the release would paste.
	cmd := exec.Command("./siderolabs/source-tarball.sh", "HEAD", filepath.Join(tmp, "dl"))
	cmd.Env = append(os.Environ(), "VERSION="+version)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("source-tarball.sh: %v\n%s", err, exitStderr(err))
	}
	printed := map[string]string{}
	var tarball string
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if f, ok := strings.CutPrefix(line, "# "); ok {
			tarball = f
			continue
		}
		k, v, _ := strings.Cut(line, ": ")
		printed[k] = v
	}
	data, err := os.ReadFile(tarball)
	if err != nil {
		t.Fatalf("source-tarball.sh printed %q: %v", tarball, err)
	}
	s256, s512 := sha256.Sum256(data), sha512.Sum512(data)
	if printed["NODEINIT_AGENT_SHA256"] != hex.EncodeToString(s256[:]) || printed["NODEINIT_AGENT_SHA512"] != hex.EncodeToString(s512[:]) ||
		printed["NODEINIT_AGENT_VERSION"] != version || filepath.Base(tarball) != "talos-nodeinit-"+version+".tar.gz" {
		t.Fatalf("source-tarball.sh printed %v for %s", printed, tarball)
	}
	var again bytes.Buffer
	cmd = exec.Command("./siderolabs/source-tarball.sh", "HEAD", filepath.Join(tmp, "dl2"))
	cmd.Env, cmd.Stdout = append(os.Environ(), "VERSION="+version), &again
	if err := cmd.Run(); err != nil || !strings.Contains(again.String(), printed["NODEINIT_AGENT_SHA512"]) {
		t.Errorf("source-tarball.sh gave other checksums the second time (%v):\n%s", err, again.String())
	}

	vars := packageVars(t, map[string]string{
		"NODEINIT_AGENT_SHA256": printed["NODEINIT_AGENT_SHA256"],
		"NODEINIT_AGENT_SHA512": printed["NODEINIT_AGENT_SHA512"],
	})
	var p bldrPkg
	loadStrict(t, "pkg.yaml", render(t, filepath.Join(pkgDir, "pkg.yaml"), vars), &p)

	// /pkg: the package directory with its rendered manifest; /rootfs.
	pkgRoot, rootfs, work := filepath.Join(tmp, "pkg"), filepath.Join(tmp, "rootfs"), filepath.Join(tmp, "work")
	if err := os.CopyFS(pkgRoot, os.DirFS(pkgDir)); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(pkgRoot, "manifest.yaml"), render(t, filepath.Join(pkgDir, "manifest.yaml.tmpl"), vars), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{rootfs, work} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	moved := regexp.MustCompile(`(^|[\s"'=(])/(rootfs|pkg)\b`)
	move := func(sh string) string { return moved.ReplaceAllString(sh, "${1}"+tmp+"/$2") }
	modcache, err := exec.Command("go", "env", "GOMODCACHE").Output()
	if err != nil {
		t.Fatal(err)
	}
	env := map[string]string{}
	var validatorScripts int
	for i, s := range p.Steps {
		maps.Copy(env, s.Env)
		for _, src := range s.Sources {
			// bldr downloads the URL and checks it against both sums.
			if src.SHA256 != hex.EncodeToString(s256[:]) || src.SHA512 != hex.EncodeToString(s512[:]) {
				t.Fatalf("source %s: its checksums are not the tarball's", src.URL)
			}
			if err := os.WriteFile(filepath.Join(work, src.Destination), data, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		stepEnv := os.Environ()
		for k, v := range env {
			if k == "GOPATH" { // /tmp/go: keep it in the temp dir
				v = filepath.Join(tmp, "gopath")
			}
			stepEnv = append(stepEnv, k+"="+v)
		}
		// The module cache stands in for bldr's cached /tmp/go/pkg; a
		// network: none step may fetch nothing, not even a toolchain.
		stepEnv = append(stepEnv, "GOMODCACHE="+strings.TrimSpace(string(modcache)), "GOTOOLCHAIN=local")
		if s.Network == "none" {
			stepEnv = append(stepEnv, "GOPROXY=off", "GOFLAGS="+strings.TrimSpace(os.Getenv("GOFLAGS")+" -mod=readonly"))
		}
		scripts := slices.Concat(s.Prepare, s.Build, s.Install)
		for _, sh := range s.Test {
			if strings.Contains(sh, "/extensions-validator ") {
				validatorScripts++ // its checks are made below, with its machinery calls
				continue
			}
			scripts = append(scripts, sh)
		}
		for _, sh := range scripts {
			c := exec.Command(p.Shell, "-euo", "pipefail", "-c", move(sh))
			c.Dir, c.Env = work, stepEnv
			if msg, err := c.CombinedOutput(); err != nil {
				t.Fatalf("step %d (network %q):\n%s\n%v\n%s", i, s.Network, move(sh), err, msg)
			}
		}
	}
	if validatorScripts != 1 {
		t.Errorf("%d extensions-validator scripts, want 1", validatorScripts)
	}

	// The image root holds what `make extension`'s does, bar the SBOM
	// (bldr's sbom step writes it upstream).
	var files []string
	if err := filepath.WalkDir(rootfs, func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			rel, _ := filepath.Rel(tmp, p)
			files = append(files, rel)
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if want := []string{layout["ServiceSpecPath"], layout["BinaryPath"]}; !slices.Equal(files, want) {
		t.Errorf("the build installed %v, want %v", files, want)
	}
	binary, err := os.ReadFile(filepath.Join(tmp, layout["BinaryPath"]))
	if err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(filepath.Join(tmp, layout["BinaryPath"])); err != nil || st.Mode().Perm() != 0o755 {
		t.Errorf("installed binary mode %v (%v), want 0755", st.Mode(), err)
	}

	// Built as the Makefile builds it.
	bi, err := buildinfo.Read(bytes.NewReader(binary))
	if err != nil {
		t.Fatal(err)
	}
	settings := map[string]string{}
	for _, s := range bi.Settings {
		settings[s.Key] = s.Value
	}
	makefile, err := os.ReadFile("../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	ldm := regexp.MustCompile(`(?m)^LDFLAGS\s*:=\s*(.+)$`).FindSubmatch(makefile)
	recipe := regexp.MustCompile(`(?m)^\t(CGO_ENABLED=0 \$\(GO\) build .* -o \$\(BIN\)/nodeinit-agent \./agent)$`).FindSubmatch(makefile)
	if ldm == nil || recipe == nil {
		t.Fatal("Makefile: no LDFLAGS := line, or build's nodeinit-agent recipe changed form")
	}
	ldflags := strings.ReplaceAll(strings.TrimSpace(string(ldm[1])), "$(VERSION)", version)
	// With -trimpath Go records no -ldflags: -s -w show as no symbol table
	// and no DWARF, -X in --version below.
	if settings["-trimpath"] != "true" || settings["CGO_ENABLED"] != "0" || bi.Path != "github.com/talos-nodeinit/talos-nodeinit/agent" {
		t.Errorf("pkg.yaml's binary: %s, -trimpath %q CGO_ENABLED %q; the Makefile's: -trimpath, CGO_ENABLED=0",
			bi.Path, settings["-trimpath"], settings["CGO_ENABLED"])
	}
	ef, err := elf.NewFile(bytes.NewReader(binary))
	if err != nil {
		t.Fatal(err)
	}
	for _, sec := range ef.Sections {
		if sec.Name == ".symtab" || strings.HasPrefix(sec.Name, ".debug_") || strings.HasPrefix(sec.Name, ".zdebug_") {
			t.Errorf("pkg.yaml's binary has section %s: not built with the Makefile's -s -w", sec.Name)
		}
	}
	if ef.FileHeader.Type != elf.ET_EXEC || slices.ContainsFunc(ef.Progs, func(p *elf.Prog) bool { return p.Type == elf.PT_INTERP }) {
		t.Errorf("pkg.yaml's binary is not a static executable (type %v)", ef.FileHeader.Type)
	}
	mk := strings.NewReplacer("$(GO)", "go", "$(LDFLAGS)", ldflags, "$(BIN)", filepath.Join(tmp, "make-bin")).Replace(string(recipe[1]))
	c := exec.Command("sh", "-c", mk)
	c.Dir = filepath.Join(work, "talos-nodeinit")
	c.Env = append(os.Environ(), "GOTOOLCHAIN=local", "GOPROXY=off")
	if msg, err := c.CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", mk, err, msg)
	}
	made, err := os.ReadFile(filepath.Join(tmp, "make-bin", "nodeinit-agent"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(made, binary) {
		t.Errorf("pkg.yaml's binary (%d bytes) is not the Makefile's build of the same source (%d bytes)", len(binary), len(made))
	}
	versionOut, err := exec.Command(filepath.Join(tmp, layout["BinaryPath"]), "--version").Output()
	if err != nil || !strings.HasPrefix(string(versionOut), "nodeinit-agent "+version+" ") {
		t.Errorf("nodeinit-agent --version: %q, %v", versionOut, err)
	}

	// extensions-validator validate --rootfs=... --pkg-name=nodeinit-agent,
	// call by call: Load, the name, the version form, every service spec,
	// then constraints and contents against the Talos releases it is for.
	vroot := filepath.Join(tmp, "extensions-validator-rootfs")
	if err := os.CopyFS(filepath.Join(vroot, "rootfs"), os.DirFS(rootfs)); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(pkgRoot, "manifest.yaml"), filepath.Join(vroot, layout["ManifestPath"])); err != nil {
		t.Fatal(err)
	}
	ext, err := extensions.Load(vroot)
	if err != nil {
		t.Fatalf("extensions.Load: %v", err)
	}
	if ext.Manifest.Metadata.Name != p.Name || !validatorSemver.MatchString(ext.Manifest.Metadata.Version) {
		t.Errorf("manifest name %q version %q; pkg name %q", ext.Manifest.Metadata.Name, ext.Manifest.Metadata.Version, p.Name)
	}
	specs, _ := filepath.Glob(filepath.Join(ext.RootfsPath(), "usr/local/etc/containers", "*.yaml"))
	if len(specs) != 1 {
		t.Fatalf("service specs %v, want one", specs)
	}
	specData, err := os.ReadFile(specs[0])
	if err != nil {
		t.Fatal(err)
	}
	var spec services.Spec
	if err := yaml.Unmarshal(specData, &spec); err != nil {
		t.Fatal(err)
	}
	if err := spec.Validate(); err != nil {
		t.Errorf("%s: %v", specs[0], err)
	}
	// Talos runs the entrypoint inside /usr/local/lib/containers/<name>.
	if _, err := os.Stat(filepath.Join(ext.RootfsPath(), "usr/local/lib/containers", spec.Name, spec.Container.Entrypoint)); err != nil {
		t.Errorf("entrypoint %s is not in the installed rootfs: %v", spec.Container.Entrypoint, err)
	}
	for _, v := range []string{"1.13.0", "1.14.1", "1.15.0"} { // 1.15: the next minor, where it would ship
		tv := semver.MustParse(v)
		if err := ext.Validate(extensions.WithValidateConstraints(), extensions.WithValidateContents(), extensions.WithTalosVersion(&tv)); err != nil {
			t.Errorf("Validate against Talos %s: %v", v, err)
		}
	}
	old := semver.MustParse("1.12.0")
	if err := ext.Validate(extensions.WithValidateConstraints(), extensions.WithTalosVersion(&old)); err == nil {
		t.Errorf("Validate against Talos 1.12.0 passed: the compatibility constraint admits a Talos the agent does not support")
	}
}

func exitStderr(err error) string {
	if ee, ok := err.(*exec.ExitError); ok {
		return string(ee.Stderr)
	}
	return ""
}
