// Package ociimage builds the project's FROM-scratch images without Docker,
// with go-containerregistry: static binaries cross-compiled as the
// Dockerfile's build stage does, one reproducible layer per platform, a
// multi-platform OCI image layout (for `skopeo copy --all oci:DIR:TAG`,
// `oras cp --from-oci-layout DIR:TAG` and `crane push DIR`) and a
// docker-archive tarball per platform (for `docker load` and
// `ctr images import`). Only the build tools under hack/ use it.
package ociimage

import (
	"archive/tar"
	"bytes"
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

// Arches are the linux platforms every image is built for.
var Arches = []string{"amd64", "arm64"}

// File is one entry of an image layer. Path has no leading slash; a
// directory's ends in a slash and has no Data.
type File struct {
	Path string
	Mode int64
	Data []byte
}

// GoBuild cross-compiles pkg (e.g. "./agent") as a static linux binary for
// arch with the version stamped in, exactly as the Dockerfile's build stage.
func GoBuild(pkg, arch, version string) ([]byte, error) {
	dir, err := os.MkdirTemp("", "ociimage-build-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	bin := filepath.Join(dir, "bin")
	cmd := exec.Command("go", "build", "-trimpath",
		"-ldflags", "-s -w -X github.com/talos-nodeinit/talos-nodeinit/pkg/version.Version="+version, "-o", bin, pkg)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+arch)
	if msg, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("building %s for linux/%s: %v\n%s", pkg, arch, err, msg)
	}
	return os.ReadFile(bin)
}

// Image is a linux/arch image of one layer holding files (regular files;
// their parent directories are added, mode 0755), owned by root, with a
// fixed timestamp so that the same input gives the same digest. config
// carries what the Dockerfile's USER and ENTRYPOINT say.
func Image(files []File, arch string, config v1.Config) (v1.Image, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	epoch := time.Unix(0, 0)
	dirs := map[string]bool{}
	for _, f := range files {
		for d := filepath.Dir(f.Path); d != "." && !dirs[d]; d = filepath.Dir(d) {
			dirs[d] = true
		}
	}
	for _, d := range slices.Sorted(maps.Keys(dirs)) { // parents sort before children
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: d + "/", Mode: 0o755, ModTime: epoch}); err != nil {
			return nil, err
		}
	}
	for _, f := range files {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: f.Path, Mode: f.Mode, Size: int64(len(f.Data)), ModTime: epoch}); err != nil {
			return nil, err
		}
		if _, err := tw.Write(f.Data); err != nil {
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
	base := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	img, err := mutate.AppendLayers(base, layer)
	if err != nil {
		return nil, err
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cfg = cfg.DeepCopy()
	cfg.OS, cfg.Architecture, cfg.Config = "linux", arch, config
	return mutate.ConfigFile(img, cfg)
}

// RefNameAnnotation names an image in an OCI layout's index.json: the tag
// that skopeo's and oras's `DIR:TAG` references look up.
const RefNameAnnotation = "org.opencontainers.image.ref.name"

// RefName is the layout reference for a version: the tag a registry gets.
func RefName(version string) string { return strings.TrimPrefix(version, "+") }

// WriteLayout replaces dir with an OCI image layout whose index.json holds
// one entry, annotated with ref as its ref.name: a multi-platform image
// index listing imgs, each under the platform its config names.
func WriteLayout(dir, ref string, imgs ...v1.Image) error {
	var adds []mutate.IndexAddendum
	for _, img := range imgs {
		cfg, err := img.ConfigFile()
		if err != nil {
			return err
		}
		adds = append(adds, mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{Platform: cfg.Platform()}})
	}
	idx := mutate.IndexMediaType(mutate.AppendManifests(empty.Index, adds...), types.OCIImageIndex)
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	p, err := layout.Write(dir, mutate.IndexMediaType(empty.Index, types.OCIImageIndex))
	if err != nil {
		return err
	}
	return p.AppendIndex(idx, layout.WithAnnotations(map[string]string{RefNameAnnotation: ref}))
}

// PlatformImage is one entry of a multi-platform index.
type PlatformImage struct {
	Platform v1.Platform
	Image    v1.Image
}

// WritePlatformLayout replaces dir with an OCI image layout whose
// index.json lists each of imgs directly, under its platform: the form
// Talos's imager reads through a profile's `ociPath` (it looks for a
// linux/<arch> entry at the top of index.json, not inside a nested index).
func WritePlatformLayout(dir string, imgs ...v1.Image) error {
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	p, err := layout.Write(dir, mutate.IndexMediaType(empty.Index, types.OCIImageIndex))
	if err != nil {
		return err
	}
	for _, img := range imgs {
		cfg, err := img.ConfigFile()
		if err != nil {
			return err
		}
		if err := p.AppendImage(img, layout.WithPlatform(*cfg.Platform())); err != nil {
			return err
		}
	}
	return nil
}

// LayoutIndex is the image index that the OCI layout at dir names ref.
func LayoutIndex(dir, ref string) (v1.ImageIndex, error) {
	top, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		return nil, err
	}
	tm, err := top.IndexManifest()
	if err != nil {
		return nil, err
	}
	for _, d := range tm.Manifests {
		if d.Annotations[RefNameAnnotation] == ref && d.MediaType.IsIndex() {
			return top.ImageIndex(d.Digest)
		}
	}
	return nil, fmt.Errorf("%s: no image index with %s=%q", dir, RefNameAnnotation, ref)
}

// ReadLayout lists the images of the image index that the OCI layout at dir
// names ref, in its order.
func ReadLayout(dir, ref string) ([]PlatformImage, error) {
	idx, err := LayoutIndex(dir, ref)
	if err != nil {
		return nil, err
	}
	im, err := idx.IndexManifest()
	if err != nil {
		return nil, err
	}
	var imgs []PlatformImage
	for _, d := range im.Manifests {
		if d.Platform == nil {
			return nil, fmt.Errorf("%s: index entry %s names no platform", dir, d.Digest)
		}
		img, err := idx.Image(d.Digest)
		if err != nil {
			return nil, err
		}
		imgs = append(imgs, PlatformImage{Platform: *d.Platform, Image: img})
	}
	return imgs, nil
}

// WriteTarball writes img to path as a docker-archive (`docker save`'s
// format: manifest.json with RepoTags), tagged ref. containerd's importer
// names the image from RepoTags, so `ctr -n k8s.io images import path`
// makes ref available to the kubelet.
func WriteTarball(path, ref string, img v1.Image) error {
	tag, err := name.NewTag(ref, name.StrictValidation)
	if err != nil {
		return fmt.Errorf("image tag %q: %w", ref, err)
	}
	return tarball.WriteToFile(path, tag, img)
}

// Contents lists the entries of img's only layer, in order; it is an error
// if img has any other number of layers.
func Contents(img v1.Image) ([]File, error) {
	layers, err := img.Layers()
	if err != nil {
		return nil, err
	}
	if len(layers) != 1 {
		return nil, fmt.Errorf("image has %d layers, want 1", len(layers))
	}
	rc, err := layers[0].Uncompressed()
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	var files []File
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return files, nil
		}
		if err != nil {
			return nil, err
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			return nil, err
		}
		files = append(files, File{Path: h.Name, Mode: h.Mode, Data: data})
	}
}
