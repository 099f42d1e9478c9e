package main

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/blang/semver/v4"
	"github.com/siderolabs/talos/pkg/machinery/extensions"
	"github.com/siderolabs/talos/pkg/machinery/extensions/services"
	"go.yaml.in/yaml/v3"

	"github.com/talos-nodeinit/talos-nodeinit/hack/internal/ociimage"
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

	imgs, err := ociimage.ReadLayout(filepath.Join(out, "oci"))
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
		for _, want := range []string{ManifestPath, ServiceSpecPath, BinaryPath} {
			if !slices.Contains(paths, want) {
				t.Errorf("%s image lacks %s: %v", pi.Platform.Architecture, want, paths)
			}
		}
	}
	slices.Sort(arches)
	if !slices.Equal(arches, []string{"amd64", "arm64"}) {
		t.Errorf("platforms %v", arches)
	}

	dockerfile, err := os.ReadFile("Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{ManifestPath, ServiceSpecPath, BinaryPath} {
		if !strings.Contains(string(dockerfile), " /"+p+"\n") {
			t.Errorf("the Dockerfile's extension target does not write /%s", p)
		}
	}
}
