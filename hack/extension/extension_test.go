package main

import (
	"bytes"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/blang/semver/v4"
	"github.com/siderolabs/talos/pkg/machinery/constants"
	"github.com/siderolabs/talos/pkg/machinery/extensions"
	"github.com/siderolabs/talos/pkg/machinery/extensions/services"
	"go.yaml.in/yaml/v4"
	"golang.org/x/mod/modfile"

	"github.com/talos-nodeinit/talos-nodeinit/hack/internal/ociimage"
	"github.com/talos-nodeinit/talos-nodeinit/hack/internal/spdx"
	"github.com/talos-nodeinit/talos-nodeinit/pkg/agentkey"
)

// `make extension` output passes Talos machinery's own validators, holds
// both platforms, and matches the Dockerfile's extension target.
func TestExtensionImage(t *testing.T) {
	if err := os.Chdir("../.."); err != nil {
		t.Fatal(err)
	}
	out := t.TempDir()
	if err := build(out, "v0.1.0-test", "example.com/nodeinit-agent"); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		talos string
		ok    bool
	}{{"1.13.0", true}, {"1.14.2", true}, {"1.12.5", false}} {
		ext, err := extensions.Load(filepath.Join(out, "amd64"))
		if err != nil {
			t.Fatal(err)
		}
		v := semver.MustParse(tc.talos)
		err = ext.Validate(extensions.WithValidateConstraints(), extensions.WithValidateContents(), extensions.WithTalosVersion(&v))
		if (err == nil) != tc.ok {
			t.Errorf("Talos %s: validate = %v, want ok=%v", tc.talos, err, tc.ok)
		}
	}
	if ext, _ := extensions.Load(filepath.Join(out, "amd64")); ext.Manifest.Metadata.Version != "v0.1.0-test" {
		t.Errorf("manifest version %q", ext.Manifest.Metadata.Version)
	}

	data, err := os.ReadFile(filepath.Join(out, "amd64", ServiceSpecPath))
	if err != nil {
		t.Fatal(err)
	}
	var spec services.Spec
	if err := yaml.Unmarshal(data, &spec); err != nil {
		t.Fatal(err)
	}
	if err := spec.Validate(); err != nil {
		t.Errorf("service spec: %v", err)
	}
	if spec.Name != "nodeinit-agent" || spec.Restart != services.RestartAlways {
		t.Errorf("service spec %+v", spec)
	}
	// Read-only, except the agent's key directory, which only this service mounts.
	keyDir := filepath.Dir(agentkey.DefaultFile)
	var keyMount bool
	for _, m := range spec.Container.Mounts {
		if m.Destination == keyDir {
			keyMount = m.Source == keyDir && slices.Contains(m.Options, "rw")
			continue
		}
		if !slices.Contains(m.Options, "ro") {
			t.Errorf("mount %s is not read-only", m.Destination)
		}
	}
	if !keyMount {
		t.Errorf("no read-write bind mount of %s for the agent's key: %+v", keyDir, spec.Container.Mounts)
	}
	if st, err := os.Stat(filepath.Join(out, "arm64", BinaryPath)); err != nil || st.Mode().Perm() != 0o755 {
		t.Errorf("arm64 binary: %v %v", st, err)
	}

	imgs, err := ociimage.ReadLayout(filepath.Join(out, "oci"), "v0.1.0-test")
	if err != nil {
		t.Fatal(err)
	}
	var arches []string
	for _, pi := range imgs {
		arches = append(arches, pi.Platform.Architecture)
		files, err := ociimage.Contents(pi.Image)
		if err != nil {
			t.Fatal(err)
		}
		var paths []string
		for _, f := range files {
			paths = append(paths, f.Path)
		}
		for _, want := range []string{ManifestPath, ServiceSpecPath, BinaryPath, SBOMPath} {
			if !slices.Contains(paths, want) {
				t.Errorf("%s image lacks %s: %v", pi.Platform.Architecture, want, paths)
			}
		}
	}
	slices.Sort(arches)
	if !slices.Equal(arches, []string{"amd64", "arm64"}) {
		t.Errorf("platforms %v", arches)
	}

	checkSBOM(t, out)
	checkDockerfileStage(t, out)
}

// The SBOM sits where Talos reads extension SBOMs, and lists what Talos's
// SBOMItem controller decodes: the agent at its release with the project's
// license, Go, and the modules linked in at the versions go.mod pins.
func checkSBOM(t *testing.T, out string) {
	if filepath.Dir("/"+SBOMPath) != "/rootfs"+constants.ExtensionSPDXPath {
		t.Errorf("SBOM at /%s; Talos reads %s", SBOMPath, constants.ExtensionSPDXPath)
	}
	if !strings.HasSuffix(SBOMPath, ".spdx.json") {
		t.Errorf("Talos skips SBOM files not named *.spdx.json: %s", SBOMPath)
	}
	data, err := os.ReadFile(filepath.Join(out, "arm64", SBOMPath))
	if err != nil {
		t.Fatal(err)
	}
	items, err := spdx.AsTalosReads(data)
	if err != nil {
		t.Fatalf("SBOM: %v", err)
	}
	if !bytes.Contains(data, []byte(`"spdxVersion": "SPDX-2.3"`)) {
		t.Error("the SBOM is not SPDX 2.3")
	}
	gomod, err := os.ReadFile("go.mod")
	if err != nil {
		t.Fatal(err)
	}
	mf, err := modfile.Parse("go.mod", gomod, nil)
	if err != nil {
		t.Fatal(err)
	}
	pinned := map[string]string{}
	for _, r := range mf.Require {
		pinned[r.Mod.Path] = r.Mod.Version
	}
	// A replaced module is linked at its replacement's version (go.mod's
	// replace block says why), and the SBOM must say that one.
	for _, r := range mf.Replace {
		if r.New.Version != "" {
			pinned[r.Old.Path] = r.New.Version
		}
	}
	got := map[string]string{}
	for _, p := range items {
		got[p.Name] = p.Version
		if len(p.PURLs) != 1 || !strings.HasPrefix(p.PURLs[0], "pkg:golang/") {
			t.Errorf("SBOM package %s has no Go purl: %+v", p.Name, p.PURLs)
		}
		if p.Name == "nodeinit-agent" && p.License != License {
			t.Errorf("the agent's declared license is %q, want %s", p.License, License)
		}
	}
	if got["nodeinit-agent"] != "v0.1.0-test" || got["go"] == "" {
		t.Errorf("SBOM: agent %q, go %q", got["nodeinit-agent"], got["go"])
	}
	for _, m := range []string{"k8s.io/client-go", "google.golang.org/grpc", "google.golang.org/protobuf"} {
		if got[m] == "" || got[m] != pinned[m] {
			t.Errorf("SBOM lists %s at %q; go.mod pins %q", m, got[m], pinned[m])
		}
	}
	// The agent reads machined in the wire form: Talos's machinery and
	// COSI are the coordinator's and the tests', not in the agent's image.
	for _, m := range []string{"github.com/siderolabs/talos/pkg/machinery", "github.com/cosi-project/runtime"} {
		if v, ok := got[m]; ok {
			t.Errorf("SBOM lists %s at %q: the agent binary links it", m, v)
		}
	}
}

// The Dockerfile's extension target copies what `-stage` writes, run as its
// build stage runs it; that is byte for byte `make extension`'s image root.
func checkDockerfileStage(t *testing.T, out string) {
	dockerfile, err := os.ReadFile("Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range []string{
		"RUN go run ./hack/extension -stage /out/extension -binary /out/nodeinit-agent -version ${VERSION}\n",
		"FROM scratch AS extension\nCOPY --from=build /out/extension/ /\n\n",
	} {
		if !strings.Contains(string(dockerfile), line) {
			t.Errorf("the Dockerfile does not say %q", line)
		}
	}
	staged := t.TempDir()
	if err := stage(staged, filepath.Join(out, "amd64", BinaryPath), "v0.1.0-test"); err != nil {
		t.Fatal(err)
	}
	want, got := tree(t, filepath.Join(out, "amd64")), tree(t, staged)
	if !maps.Equal(want, got) {
		t.Errorf("-stage wrote %d files, make extension %d, or their contents differ", len(got), len(want))
	}
}

// tree maps each regular file under root to its mode and contents.
func tree(t *testing.T, root string) map[string]string {
	files := map[string]string{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		data, err := os.ReadFile(p)
		rel, _ := filepath.Rel(root, p)
		files[rel] = info.Mode().String() + string(data)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}
