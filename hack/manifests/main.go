// Command manifests renders coordinator/deploy, the single source of the
// coordinator's objects, into the release's install files:
//
//	nodeinit-coordinator.yaml  every object, image pinned to the release (kubectl apply -f)
//	talos-patch.yaml           the same as a Talos machine-config patch (cluster.inlineManifests)
//	talos-unpatch.yaml         removes that inline manifest: before talos-patch.yaml to upgrade, alone to uninstall
//	talos-patch-1.14.yaml      the same for the workers of a cluster created with Talos 1.14 (multi-document config)
//	talos-patch-1.14-controlplane.yaml  and its control-plane nodes (KubeControllerManagerConfig is theirs only)
//	talos-unpatch-1.14.yaml    removes it (uninstall); applying talos-patch-1.14.yaml again replaces it
//
// The Helm chart (coordinator/chart) renders the same objects from values;
// this module's tests prove the three agree.
//
// Usage (make manifests): go -C hack/manifests run . -deploy DIR -out DIR
package main

import (
	"flag"
	"fmt"
	"os"
)

// CoordinatorImage is the image coordinator/deploy names; its kustomization
// pins the tag.
const CoordinatorImage = "ghcr.io/talos-nodeinit/nodeinit-coordinator"

func main() {
	deploy := flag.String("deploy", "../../coordinator/deploy", "the kustomization `DIR` to render")
	out := flag.String("out", "../../bin/manifests", "output `DIR`")
	image := flag.String("image", CoordinatorImage, "the `REPOSITORY` you pushed the coordinator image to; the tag is the release")
	flag.Parse()
	files, err := Write(*deploy, *out, CoordinatorImage, *image)
	if err != nil {
		fmt.Fprintf(os.Stderr, "manifests: %v\n", err)
		os.Exit(1)
	}
	for _, f := range files {
		fmt.Println(f)
	}
}
