// Package imager runs Talos's own imager code (v1.14.1) on what this
// repository builds. It is its own module on purpose: the Talos main module
// must never enter the project's graph.
package imager

import (
	"archive/tar"
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/siderolabs/talos/pkg/imager/profile"
	"github.com/siderolabs/talos/pkg/machinery/config/merge"
	"go.yaml.in/yaml/v4"
)

// Talos's imager takes the extension from `make extension`'s output
// without pushing it first: a profile's systemExtensions entry with
// ociPath: bin/extension/imager-oci. Talos's own ContainerAsset.Pull finds
// both platforms there, and the image holds the extension's manifest and
// service spec. The two-platform oci/ layout (what skopeo pushes) it
// cannot read: its index.json nests the platforms.
func TestImagerReadsTheLocalExtension(t *testing.T) {
	out := t.TempDir()
	if b, err := exec.Command("make", "-C", "../..", "-s", "extension", "VERSION=v0.1.0", "BIN="+out).CombinedOutput(); err != nil {
		t.Fatalf("make extension: %v\n%s", err, b)
	}
	for _, arch := range []string{"amd64", "arm64"} {
		asset := profile.ContainerAsset{OCIPath: filepath.Join(out, "extension", "imager-oci")}
		img, err := asset.Pull(context.Background(), arch, t.Logf)
		if err != nil {
			t.Fatalf("%s: Talos's imager: %v", arch, err)
		}
		cfg, err := img.ConfigFile()
		if err != nil || cfg.Architecture != arch {
			t.Fatalf("%s: the image is for %v (%v)", arch, cfg, err)
		}
		files := map[string]bool{}
		layers, err := img.Layers()
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range layers {
			rc, err := l.Uncompressed()
			if err != nil {
				t.Fatal(err)
			}
			tr := tar.NewReader(rc)
			for {
				h, err := tr.Next()
				if err == io.EOF {
					break
				}
				if err != nil {
					t.Fatal(err)
				}
				files[h.Name] = true
			}
			rc.Close()
		}
		for _, want := range []string{"manifest.yaml", "rootfs/usr/local/etc/containers/nodeinit-agent.yaml", "rootfs/usr/local/lib/containers/nodeinit-agent/nodeinit-agent"} {
			if !files[want] && !files["/"+want] && !files["./"+want] {
				t.Errorf("%s: the extension image lacks %s", arch, want)
			}
		}
	}
	nested := profile.ContainerAsset{OCIPath: filepath.Join(out, "extension", "oci")}
	if _, err := nested.Pull(context.Background(), "amd64", t.Logf); err == nil {
		t.Log("Talos's imager now reads the nested oci/ layout too: imager-oci/ could go")
	}
}

// The README's imager profile, read and resolved as Talos's imager does it
// (imager.go handleProf: merged over the named base profile, defaults
// filled, validated), names the installer output and the local extension.
func TestREADMEImagerProfile(t *testing.T) {
	readme, err := os.ReadFile("../../docs/install.md")
	if err != nil {
		t.Fatal(err)
	}
	text := string(readme)
	start := strings.Index(text, "```yaml\n# imager-profile.yaml\n")
	if start < 0 {
		t.Fatal("the README has no imager-profile.yaml block")
	}
	block := text[start+len("```yaml\n"):]
	block = block[:strings.Index(block, "```")]
	var prof profile.Profile
	if err := yaml.NewDecoder(strings.NewReader(block)).Decode(&prof); err != nil {
		t.Fatal(err)
	}
	base, ok := profile.Default[prof.BaseProfileName]
	if !ok {
		t.Fatalf("no Talos base profile %q", prof.BaseProfileName)
	}
	base = base.DeepCopy()
	if err := merge.Merge(&base, &prof); err != nil {
		t.Fatal(err)
	}
	base.Input.FillDefaults(base.Arch, base.Version, base.SecureBootEnabled())
	base.Output.FillDefaults(base.Arch, base.Version, base.SecureBootEnabled())
	if err := base.Validate(); err != nil {
		t.Fatalf("Talos's imager would refuse the README's profile: %v", err)
	}
	if base.Output.Kind != profile.OutKindInstaller || len(base.Input.SystemExtensions) != 1 || base.Input.SystemExtensions[0].OCIPath != "/extension" {
		t.Errorf("resolved profile: output %v, extensions %+v", base.Output.Kind, base.Input.SystemExtensions)
	}
	if !strings.Contains(text, "-v $PWD/bin/extension/imager-oci:/extension:ro") {
		t.Error("the README's docker run does not mount bin/extension/imager-oci at the profile's ociPath")
	}
}
