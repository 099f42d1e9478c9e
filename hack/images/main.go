// Command images is `make images`: the Dockerfile's coordinator and
// agent-pod targets for linux/amd64 and linux/arm64, built without Docker:
//
//	<out>/<image>/              an OCI image layout with a two-platform index
//	<out>/<image>-<arch>.tar    a docker-archive of one platform, tagged
//	                            <registry>/<image>:<version>
//
// `crane push --index <out>/<image> <registry>/<image>:<version>` publishes an
// image; `ctr -n k8s.io images import <out>/<image>-<arch>.tar` loads one
// platform into a node's containerd under its tag.
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/talos-nodeinit/talos-nodeinit/hack/internal/ociimage"
)

// Registry is where the manifests (coordinator/deploy, the static-pod
// patch) expect the images.
const Registry = "ghcr.io/talos-nodeinit"

// Target is one FROM-scratch target of the Dockerfile: a static binary
// at /<Binary>, which is the entrypoint.
type Target struct {
	Dockerfile string // the target's name in the Dockerfile
	Image      string // the repository, under the registry
	Binary     string
	Package    string
	User       string // USER, if the target sets one
}

// Targets are the images `make images` builds.
var Targets = []Target{
	{Dockerfile: "coordinator", Image: "nodeinit-coordinator", Binary: "nodeinit-coordinator", Package: "./coordinator", User: "65532:65532"},
	{Dockerfile: "agent-pod", Image: "nodeinit-agent-pod", Binary: "nodeinit-agent", Package: "./agent"},
}

func main() {
	out := flag.String("out", "bin/images", "output `DIR`")
	version := flag.String("version", "dev", "version stamped into the binaries and the images' tag")
	registry := flag.String("registry", Registry, "registry and namespace in the tarballs' tags")
	flag.Parse()
	if err := build(*out, *version, *registry); err != nil {
		fmt.Fprintln(os.Stderr, "images:", err)
		os.Exit(1)
	}
}

func build(out, version, registry string) error {
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	for _, t := range Targets {
		ref := registry + "/" + t.Image + ":" + version
		var imgs []v1.Image
		for _, arch := range ociimage.Arches {
			binary, err := ociimage.GoBuild(t.Package, arch, version)
			if err != nil {
				return err
			}
			img, err := ociimage.Image([]ociimage.File{{Path: t.Binary, Mode: 0o755, Data: binary}}, arch,
				v1.Config{Entrypoint: []string{"/" + t.Binary}, User: t.User})
			if err != nil {
				return err
			}
			if err := ociimage.WriteTarball(filepath.Join(out, t.Image+"-"+arch+".tar"), ref, img); err != nil {
				return err
			}
			imgs = append(imgs, img)
		}
		if err := ociimage.WriteLayout(filepath.Join(out, t.Image), ociimage.RefName(version), imgs...); err != nil {
			return err
		}
		fmt.Printf("%s written to %s/%s/ and %s-<arch>.tar\n", ref, out, t.Image, t.Image)
	}
	return nil
}
