package main

import (
	"bufio"
	"bytes"
	"debug/elf"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"go.yaml.in/yaml/v4"

	"github.com/talos-nodeinit/talos-nodeinit/hack/internal/ociimage"
)

// stage is what a FROM-scratch Dockerfile target puts in its image.
type stage struct {
	files      []string // "path mode", as entry below writes them
	user       string
	entrypoint []string
}

// dockerfileStages reads the targets' COPY --from=build, USER and
// ENTRYPOINT lines. The build stage writes binaries with go build's 0755,
// which COPY keeps.
func dockerfileStages(t *testing.T) map[string]*stage {
	t.Helper()
	data, err := os.ReadFile("Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	stages := map[string]*stage{}
	var cur *stage
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		switch {
		case len(f) == 0 || strings.HasPrefix(f[0], "#"):
		case f[0] == "FROM":
			cur = nil
			if len(f) == 4 && f[1] == "scratch" && f[2] == "AS" {
				cur = &stage{}
				stages[f[3]] = cur
			}
		case cur == nil:
		case f[0] == "COPY" && len(f) == 4 && f[1] == "--from=build":
			cur.files = append(cur.files, entry(strings.TrimPrefix(f[3], "/"), 0o755))
		case f[0] == "COPY":
			cur.files = append(cur.files, entry(strings.TrimPrefix(f[len(f)-1], "/"), 0o644))
		case f[0] == "USER":
			cur.user = f[1]
		case f[0] == "ENTRYPOINT":
			if err := json.Unmarshal([]byte(strings.TrimPrefix(sc.Text(), "ENTRYPOINT")), &cur.entrypoint); err != nil {
				t.Fatalf("Dockerfile: %q: %v", sc.Text(), err)
			}
		default:
			t.Fatalf("Dockerfile: %q in a scratch target: this test does not know what it puts in the image", sc.Text())
		}
	}
	return stages
}

func entry(path string, mode int64) string { return fmt.Sprintf("%s %#o", path, mode) }

var elfMachine = map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}

// `make images` builds what the Dockerfile's coordinator and agent-pod
// targets do, for both platforms: the same files and modes in one layer,
// the same USER and ENTRYPOINT, static binaries of the right architecture;
// and each platform's tarball carries the versioned tag.
func TestImagesMatchDockerfile(t *testing.T) {
	t.Chdir("../..")
	stages := dockerfileStages(t)
	out := t.TempDir()
	const version = "v0.1.0-test"
	if err := build(out, version, "example.com/nodeinit"); err != nil {
		t.Fatal(err)
	}
	for _, target := range Targets {
		want := stages[target.Dockerfile]
		if want == nil {
			t.Fatalf("the Dockerfile has no FROM scratch AS %s", target.Dockerfile)
		}
		imgs, err := ociimage.ReadLayout(filepath.Join(out, target.Image), version)
		if err != nil {
			t.Fatal(err)
		}
		var arches []string
		for _, pi := range imgs {
			arch, img := pi.Platform.Architecture, pi.Image
			arches = append(arches, arch)
			cfg, err := img.ConfigFile()
			if err != nil {
				t.Fatal(err)
			}
			if cfg.OS != "linux" || cfg.Architecture != arch || pi.Platform.OS != "linux" {
				t.Errorf("%s %s: config is for %s/%s", target.Image, arch, cfg.OS, cfg.Architecture)
			}
			if cfg.Config.User != want.user || !slices.Equal(cfg.Config.Entrypoint, want.entrypoint) || len(cfg.Config.Cmd) != 0 {
				t.Errorf("%s %s: user %q entrypoint %q cmd %q; the Dockerfile says user %q entrypoint %q",
					target.Image, arch, cfg.Config.User, cfg.Config.Entrypoint, cfg.Config.Cmd, want.user, want.entrypoint)
			}
			files, err := ociimage.Contents(img)
			if err != nil {
				t.Fatalf("%s %s: %v", target.Image, arch, err)
			}
			var got []string
			for _, f := range files {
				got = append(got, entry(f.Path, f.Mode))
			}
			if !slices.Equal(got, want.files) {
				t.Errorf("%s %s: layer holds %q; the Dockerfile's %s target %q", target.Image, arch, got, target.Dockerfile, want.files)
				continue
			}
			for _, f := range files {
				if f.Mode&0o111 != 0 {
					checkBinary(t, target.Image+" "+arch+" /"+f.Path, f.Data, arch, version)
				}
			}

			tarPath := filepath.Join(out, target.Image+"-"+arch+".tar")
			opener := func() (io.ReadCloser, error) { return os.Open(tarPath) }
			m, err := tarball.LoadManifest(opener)
			if err != nil {
				t.Fatal(err)
			}
			if tag := "example.com/nodeinit/" + target.Image + ":" + version; len(m) != 1 || !slices.Equal(m[0].RepoTags, []string{tag}) {
				t.Errorf("%s: manifest.json %+v, want one image tagged %s", tarPath, m, tag)
			}
			tarImg, err := tarball.Image(opener, nil)
			if err != nil {
				t.Fatal(err)
			}
			tarCfg, err := tarImg.ConfigName()
			if err != nil {
				t.Fatal(err)
			}
			if layoutCfg, _ := img.ConfigName(); tarCfg != layoutCfg {
				t.Errorf("%s holds config %s, the OCI layout's %s image %s", tarPath, tarCfg, arch, layoutCfg)
			}
		}
		if !slices.Equal(arches, ociimage.Arches) {
			t.Errorf("%s: index platforms %v, want %v", target.Image, arches, ociimage.Arches)
		}
	}
}

// checkBinary: a static ELF executable for arch, stamped with version.
func checkBinary(t *testing.T, what string, data []byte, arch, version string) {
	t.Helper()
	f, err := elf.NewFile(bytes.NewReader(data))
	if err != nil {
		t.Errorf("%s: %v", what, err)
		return
	}
	if f.Machine != elfMachine[arch] || f.Type != elf.ET_EXEC {
		t.Errorf("%s: ELF %s %s, want %s %s", what, f.Machine, f.Type, elfMachine[arch], elf.ET_EXEC)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP || p.Type == elf.PT_DYNAMIC {
			t.Errorf("%s is dynamically linked: nothing in a scratch image can load it", what)
		}
	}
	if !bytes.Contains(data, []byte(version)) {
		t.Errorf("%s does not carry version %s", what, version)
	}
}

// The release is written once per file that needs it: manifest.yaml's
// version, the coordinator image tag in coordinator/deploy and the
// agent-pod tag in the static-pod patch. They agree, and nothing names
// :latest.
func TestReleaseTagsAgree(t *testing.T) {
	t.Chdir("../..")
	var manifest struct {
		Metadata struct{ Version string }
	}
	var kustomization struct {
		Images []struct {
			Name    string
			NewName string `yaml:"newName"`
			NewTag  string `yaml:"newTag"`
		}
	}
	var deployment struct {
		Spec struct {
			Template struct {
				Spec struct{ Containers []struct{ Image string } }
			}
		}
	}
	var patch struct {
		Machine struct {
			Pods []struct {
				Spec struct{ Containers []struct{ Image string } }
			}
		}
	}
	for path, v := range map[string]any{
		"manifest.yaml":                         &manifest,
		"coordinator/deploy/kustomization.yaml": &kustomization,
		"coordinator/deploy/deployment.yaml":    &deployment,
		"extension/patches/static-pod.yaml":     &patch,
	} {
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if err := yaml.Unmarshal(data, v); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if bytes.Contains(data, []byte(":latest")) {
			t.Errorf("%s names a :latest image; use the release tag", path)
		}
	}
	release := manifest.Metadata.Version
	if !strings.HasPrefix(release, "v") {
		t.Fatalf("manifest.yaml version %q", release)
	}
	coordinator := Registry + "/nodeinit-coordinator"
	if len(kustomization.Images) != 1 || kustomization.Images[0].Name != coordinator ||
		kustomization.Images[0].NewName != "" || kustomization.Images[0].NewTag != release {
		t.Errorf("kustomization.yaml images %+v, want name %s newTag %s", kustomization.Images, coordinator, release)
	}
	if c := deployment.Spec.Template.Spec.Containers; len(c) != 1 || c[0].Image != coordinator+":"+release {
		t.Errorf("deployment.yaml containers %+v, want image %s:%s", c, coordinator, release)
	}
	if p := patch.Machine.Pods; len(p) != 1 || len(p[0].Spec.Containers) != 1 || p[0].Spec.Containers[0].Image != Registry+"/nodeinit-agent-pod:"+release {
		t.Errorf("static-pod.yaml pods %+v, want image %s/nodeinit-agent-pod:%s", p, Registry, release)
	}
}
