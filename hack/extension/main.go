// Command extension is `make extension`: it builds static nodeinit-agent
// binaries for linux/amd64 and linux/arm64 and writes the Talos system
// extension without Docker:
//
//	<out>/<arch>/             the image root: /manifest.yaml and /rootfs/...
//	<out>/oci/                an OCI image layout with a two-platform index
//	<out>/nodeinit-agent-<arch>.tar   one docker-format tarball per platform
//
// `crane push --index <out>/oci <registry>/nodeinit-agent:<version>` publishes
// it; Talos's imager takes the pushed reference with --system-extension-image.
package main

import (
	"archive/tar"
	"bytes"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// The image layout, as the Dockerfile's extension target writes it too.
const (
	ManifestPath    = "manifest.yaml"
	ServiceSpecPath = "rootfs/usr/local/etc/containers/nodeinit-agent.yaml"
	BinaryPath      = "rootfs/usr/local/lib/containers/nodeinit-agent/nodeinit-agent"
)

// Arches are the platforms built.
var Arches = []string{"amd64", "arm64"}

func main() {
	out := flag.String("out", "bin/extension", "output `DIR`")
	version := flag.String("version", "dev", "version stamped into the binary and manifest")
	repo := flag.String("image", "ghcr.io/talos-nodeinit/nodeinit-agent", "image name for the tarballs' tag")
	flag.Parse()
	if err := build(*out, *version, *repo); err != nil {
		fmt.Fprintln(os.Stderr, "extension:", err)
		os.Exit(1)
	}
}

// files is the image content for one architecture, path → (mode, bytes).
type file struct {
	path string
	mode int64
	data []byte
}

func content(binary []byte, version string) ([]file, error) {
	manifest, err := os.ReadFile("manifest.yaml")
	if err != nil {
		return nil, err
	}
	spec, err := os.ReadFile("extension/nodeinit-agent.yaml")
	if err != nil {
		return nil, err
	}
	if version != "dev" {
		manifest = bytes.Replace(manifest, []byte("version: v0.1.0"), []byte("version: "+version), 1)
	}
	return []file{{ManifestPath, 0o644, manifest}, {ServiceSpecPath, 0o644, spec}, {BinaryPath, 0o755, binary}}, nil
}

func build(out, version, repo string) error {
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	var adds []mutate.IndexAddendum
	for _, arch := range Arches {
		bin := filepath.Join(out, "nodeinit-agent-linux-"+arch)
		cmd := exec.Command("go", "build", "-trimpath",
			"-ldflags", "-s -w -X github.com/talos-nodeinit/talos-nodeinit/pkg/version.Version="+version, "-o", bin, "./agent")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+arch)
		if msg, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("building for %s: %v\n%s", arch, err, msg)
		}
		binary, err := os.ReadFile(bin)
		if err != nil {
			return err
		}
		files, err := content(binary, version)
		if err != nil {
			return err
		}
		root := filepath.Join(out, arch)
		_ = os.RemoveAll(root)
		for _, f := range files {
			p := filepath.Join(root, f.path)
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				return err
			}
			if err := os.WriteFile(p, f.data, os.FileMode(f.mode)); err != nil {
				return err
			}
		}
		img, err := image(files, arch)
		if err != nil {
			return err
		}
		tag, err := name.NewTag(repo + ":" + strings.TrimPrefix(version, "+"))
		if err != nil {
			return err
		}
		if err := tarball.WriteToFile(filepath.Join(out, "nodeinit-agent-"+arch+".tar"), tag, img); err != nil {
			return err
		}
		adds = append(adds, mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: arch}}})
	}
	idx := mutate.IndexMediaType(mutate.AppendManifests(empty.Index, adds...), types.OCIImageIndex)
	_ = os.RemoveAll(filepath.Join(out, "oci"))
	if _, err := layout.Write(filepath.Join(out, "oci"), idx); err != nil {
		return err
	}
	fmt.Printf("extension %s written to %s (oci/, %s/, nodeinit-agent-<arch>.tar)\n", version, out, strings.Join(Arches, "/, "))
	return nil
}

// image is one layer holding the files, with a reproducible timestamp.
func image(files []file, arch string) (v1.Image, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	dirs := map[string]bool{}
	epoch := time.Unix(0, 0)
	for _, f := range files {
		for d := filepath.Dir(f.path); d != "." && !dirs[d]; d = filepath.Dir(d) {
			dirs[d] = true
		}
	}
	for _, d := range sortedKeys(dirs) {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: d + "/", Mode: 0o755, ModTime: epoch}); err != nil {
			return nil, err
		}
	}
	for _, f := range files {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: f.path, Mode: f.mode, Size: int64(len(f.data)), ModTime: epoch}); err != nil {
			return nil, err
		}
		if _, err := tw.Write(f.data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	data := buf.Bytes()
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(data)), nil },
		tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return nil, err
	}
	img, err := mutate.AppendLayers(mutate.MediaType(empty.Image, types.OCIManifestSchema1), layer)
	if err != nil {
		return nil, err
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cfg = cfg.DeepCopy()
	cfg.OS, cfg.Architecture = "linux", arch
	return mutate.ConfigFile(img, cfg)
}

func sortedKeys(m map[string]bool) []string { return slices.Sorted(maps.Keys(m)) } // parents sort before children
