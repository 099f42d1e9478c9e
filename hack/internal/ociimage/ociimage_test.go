package ociimage

import (
	"io"
	"log"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// The layout is what registries and their tools expect: OCI media types all
// the way down (index, manifests, config, layer), the index named by its
// ref.name, and skopeo pushes it by that name to a registry that then
// serves both platforms.
func TestLayoutPushesWithSkopeo(t *testing.T) {
	var imgs []v1.Image
	for _, arch := range Arches {
		img, err := Image([]File{{Path: "hello", Mode: 0o755, Data: []byte("#!/bin/true\n" + arch)}}, arch, v1.Config{Entrypoint: []string{"/hello"}})
		if err != nil {
			t.Fatal(err)
		}
		imgs = append(imgs, img)
	}
	dir := filepath.Join(t.TempDir(), "oci")
	if err := WriteLayout(dir, "v1.2.3", imgs...); err != nil {
		t.Fatal(err)
	}
	top, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		t.Fatal(err)
	}
	tm, err := top.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(tm.Manifests) != 1 || tm.Manifests[0].Annotations[RefNameAnnotation] != "v1.2.3" || tm.Manifests[0].MediaType != types.OCIImageIndex {
		t.Fatalf("index.json entries %+v: want one OCI image index named v1.2.3", tm.Manifests)
	}
	if _, err := ReadLayout(dir, "v9"); err == nil {
		t.Error("ReadLayout found a ref the layout does not name")
	}
	got, err := ReadLayout(dir, "v1.2.3")
	if err != nil {
		t.Fatal(err)
	}
	checkOCI(t, "layout", got)

	skopeo := needSkopeo(t)
	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	defer srv.Close()
	host := strings.TrimPrefix(srv.URL, "http://")
	dest := host + "/nodeinit-agent:v1.2.3"
	cmd := exec.Command(skopeo, "copy", "--all", "--dest-tls-verify=false", "oci:"+dir+":v1.2.3", "docker://"+dest)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("skopeo copy: %v\n%s", err, out)
	}
	ref, err := name.ParseReference(dest, name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	idx, err := remote.Index(ref)
	if err != nil {
		t.Fatalf("the registry does not serve an index at %s: %v", dest, err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	var pushed []PlatformImage
	for _, d := range im.Manifests {
		img, err := idx.Image(d.Digest)
		if err != nil {
			t.Fatal(err)
		}
		pushed = append(pushed, PlatformImage{Platform: *d.Platform, Image: img})
	}
	checkOCI(t, "pushed", pushed)
}

func checkOCI(t *testing.T, what string, imgs []PlatformImage) {
	t.Helper()
	var arches []string
	for _, pi := range imgs {
		arches = append(arches, pi.Platform.Architecture)
		m, err := pi.Image.Manifest()
		if err != nil {
			t.Fatal(err)
		}
		if m.MediaType != types.OCIManifestSchema1 || m.Config.MediaType != types.OCIConfigJSON {
			t.Errorf("%s %s: manifest %s, config %s; want OCI media types", what, pi.Platform.Architecture, m.MediaType, m.Config.MediaType)
		}
		for _, l := range m.Layers {
			if l.MediaType != types.OCILayer {
				t.Errorf("%s %s: layer %s", what, pi.Platform.Architecture, l.MediaType)
			}
		}
	}
	if !slices.Equal(arches, Arches) {
		t.Errorf("%s platforms %v, want %v", what, arches, Arches)
	}
}

// needSkopeo returns skopeo's path, installing Debian's package as root
// when it is missing.
func needSkopeo(t *testing.T) string {
	if p, err := exec.LookPath("skopeo"); err == nil {
		return p
	}
	if os.Geteuid() != 0 {
		t.Fatal("skopeo is missing: install it (apt-get install skopeo) or run the tests as root, which installs it")
	}
	t.Log("installing skopeo with apt")
	for _, args := range [][]string{{"install", "-y", "--no-install-recommends", "skopeo"}, {"update"}, {"install", "-y", "--no-install-recommends", "skopeo"}} {
		cmd := exec.Command("apt-get", args...)
		cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
		out, err := cmd.CombinedOutput()
		if err == nil && args[0] == "install" {
			break
		}
		if err != nil && args[0] == "update" {
			t.Fatalf("apt-get update: %v\n%s", err, out)
		}
	}
	p, err := exec.LookPath("skopeo")
	if err != nil {
		t.Fatal("skopeo is missing and apt-get install skopeo did not install it")
	}
	return p
}
