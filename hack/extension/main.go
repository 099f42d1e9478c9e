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
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/talos-nodeinit/talos-nodeinit/hack/internal/ociimage"
)

// The image layout, as the Dockerfile's extension target writes it too.
const (
	ManifestPath    = "manifest.yaml"
	ServiceSpecPath = "rootfs/usr/local/etc/containers/nodeinit-agent.yaml"
	BinaryPath      = "rootfs/usr/local/lib/containers/nodeinit-agent/nodeinit-agent"
)

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

// content is the image for one architecture.
func content(binary []byte, version string) ([]ociimage.File, error) {
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
	return []ociimage.File{{Path: ManifestPath, Mode: 0o644, Data: manifest}, {Path: ServiceSpecPath, Mode: 0o644, Data: spec}, {Path: BinaryPath, Mode: 0o755, Data: binary}}, nil
}

func build(out, version, repo string) error {
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	var imgs []v1.Image
	for _, arch := range ociimage.Arches {
		binary, err := ociimage.GoBuild("./agent", arch, version)
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(out, "nodeinit-agent-linux-"+arch), binary, 0o755); err != nil {
			return err
		}
		files, err := content(binary, version)
		if err != nil {
			return err
		}
		root := filepath.Join(out, arch)
		_ = os.RemoveAll(root)
		for _, f := range files {
			p := filepath.Join(root, f.Path)
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				return err
			}
			if err := os.WriteFile(p, f.Data, os.FileMode(f.Mode)); err != nil {
				return err
			}
		}
		img, err := ociimage.Image(files, arch, v1.Config{})
		if err != nil {
			return err
		}
		if err := ociimage.WriteTarball(filepath.Join(out, "nodeinit-agent-"+arch+".tar"), repo+":"+strings.TrimPrefix(version, "+"), img); err != nil {
			return err
		}
		imgs = append(imgs, img)
	}
	if err := ociimage.WriteLayout(filepath.Join(out, "oci"), imgs...); err != nil {
		return err
	}
	fmt.Printf("extension %s written to %s (oci/, %s/, nodeinit-agent-<arch>.tar)\n", version, out, strings.Join(ociimage.Arches, "/, "))
	return nil
}
