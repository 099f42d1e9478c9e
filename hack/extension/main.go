// Command extension is `make extension`: it builds static nodeinit-agent
// binaries for linux/amd64 and linux/arm64 and writes the Talos system
// extension without Docker:
//
//	<out>/<arch>/             the image root: /manifest.yaml and /rootfs/...
//	<out>/oci/                an OCI image layout with a two-platform index
//	<out>/imager-oci/         the same images listed flat, as Talos's imager reads a profile's ociPath
//	<out>/nodeinit-agent-<arch>.tar   one docker-format tarball per platform
//
// `skopeo copy --all oci:<out>/oci:<version> docker://<registry>/nodeinit-agent:<version>`
// publishes it; Talos's imager takes the pushed reference with
// --system-extension-image.
//
// With -stage DIR -binary FILE it only writes one image root for a binary
// built elsewhere: the Dockerfile's extension target copies exactly that,
// so both builds stamp the same version and carry the same SBOM.
package main

import (
	"bytes"
	"debug/buildinfo"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/talos-nodeinit/talos-nodeinit/hack/internal/ociimage"
	"github.com/talos-nodeinit/talos-nodeinit/hack/internal/spdx"
)

// The image layout, as the Dockerfile's extension target writes it too.
const (
	ManifestPath    = "manifest.yaml"
	ServiceSpecPath = "rootfs/usr/local/etc/containers/nodeinit-agent.yaml"
	BinaryPath      = "rootfs/usr/local/lib/containers/nodeinit-agent/nodeinit-agent"
	// SBOMPath is where Talos looks for an extension's SPDX documents
	// (constants.ExtensionSPDXPath) and lists them in `talosctl get sbom`.
	SBOMPath = "rootfs/usr/local/share/spdx/nodeinit-agent.spdx.json"
	// License is the project's license (LICENSE), declared in the SBOM.
	License = "Apache-2.0"
)

func main() {
	out := flag.String("out", "bin/extension", "output `DIR`")
	version := flag.String("version", "dev", "version stamped into the binary and manifest")
	repo := flag.String("image", "ghcr.io/talos-nodeinit/nodeinit-agent", "image name for the tarballs' tag")
	stageDir := flag.String("stage", "", "only write the image root for -binary into `DIR` (the Dockerfile's extension target)")
	binary := flag.String("binary", "", "with -stage: the nodeinit-agent `FILE` already built")
	flag.Parse()
	var err error
	if *stageDir != "" {
		err = stage(*stageDir, *binary, *version)
	} else {
		err = build(*out, *version, *repo)
	}
	if err != nil {
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
	release := "v0.1.0"
	if version != "dev" {
		manifest = bytes.Replace(manifest, []byte("version: v0.1.0"), []byte("version: "+version), 1)
		release = version
	}
	bi, err := buildinfo.Read(bytes.NewReader(binary))
	if err != nil {
		return nil, fmt.Errorf("the agent binary has no Go build information for its SBOM: %w", err)
	}
	doc, err := spdx.For(spdx.Binary{Name: "nodeinit-agent", Version: release, License: License,
		Namespace: "https://github.com/talos-nodeinit/talos-nodeinit/spdx"}, bi)
	if err != nil {
		return nil, err
	}
	sbom, err := doc.JSON()
	if err != nil {
		return nil, err
	}
	return []ociimage.File{
		{Path: ManifestPath, Mode: 0o644, Data: manifest},
		{Path: ServiceSpecPath, Mode: 0o644, Data: spec},
		{Path: BinaryPath, Mode: 0o755, Data: binary},
		{Path: SBOMPath, Mode: 0o644, Data: sbom},
	}, nil
}

// writeRoot writes files under root, replacing what was there.
func writeRoot(root string, files []ociimage.File) error {
	if err := os.RemoveAll(root); err != nil {
		return err
	}
	for _, f := range files {
		p := filepath.Join(root, f.Path)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(p, f.Data, os.FileMode(f.Mode)); err != nil {
			return err
		}
	}
	return nil
}

// stage writes the image root for an agent binary built elsewhere.
func stage(dir, binaryFile, version string) error {
	if binaryFile == "" {
		return fmt.Errorf("-stage needs -binary FILE")
	}
	binary, err := os.ReadFile(binaryFile)
	if err != nil {
		return err
	}
	files, err := content(binary, version)
	if err != nil {
		return err
	}
	return writeRoot(dir, files)
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
		if err := writeRoot(filepath.Join(out, arch), files); err != nil {
			return err
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
	// For Talos's imager, without pushing first (a profile's systemExtensions: [{ociPath: …}]).
	if err := ociimage.WritePlatformLayout(filepath.Join(out, "imager-oci"), imgs...); err != nil {
		return err
	}
	if err := ociimage.WriteLayout(filepath.Join(out, "oci"), ociimage.RefName(version), imgs...); err != nil {
		return err
	}
	fmt.Printf("extension %s written to %s (oci/, imager-oci/, %s/, nodeinit-agent-<arch>.tar)\n", version, out, strings.Join(ociimage.Arches, "/, "))
	return nil
}
