package realnode

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/talos-nodeinit/talos-nodeinit/pkg/harness/kubeapply"
	"github.com/talos-nodeinit/talos-nodeinit/pkg/harness/testcluster"
)

// ShippedImage is the coordinator image coordinator/deploy names.
const ShippedImage = "ghcr.io/talos-nodeinit/nodeinit-coordinator"

// CoordinatorManifests renders coordinator/deploy as a user installs it from
// their own build: `kubectl kustomize` of an overlay whose only change is
// kustomize's images: entry, pointing the Deployment at image
// (REPOSITORY:TAG, here what `make images` tagged).
func CoordinatorManifests(image string) ([]*unstructured.Unstructured, error) {
	kubectl, err := exec.LookPath("kubectl")
	if err != nil {
		return nil, fmt.Errorf("coordinator/deploy is rendered with `kubectl kustomize`: install kubectl")
	}
	root, err := testcluster.RepoRoot()
	if err != nil {
		return nil, err
	}
	i := strings.LastIndex(image, ":")
	if i < 0 || strings.Contains(image[i:], "/") {
		return nil, fmt.Errorf("image %q has no tag", image)
	}
	overlay, err := os.MkdirTemp("", "rn-kustomize-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(overlay)
	// kustomize takes a base only by a relative path.
	base, err := filepath.Rel(overlay, filepath.Join(root, "coordinator", "deploy"))
	if err != nil {
		return nil, err
	}
	kustomization := fmt.Sprintf(`apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources: [%q]
images:
  - {name: %q, newName: %q, newTag: %q}
`, base, ShippedImage, image[:i], image[i+1:])
	if err := os.WriteFile(filepath.Join(overlay, "kustomization.yaml"), []byte(kustomization), 0o644); err != nil {
		return nil, err
	}
	out, err := exec.Command(kubectl, "kustomize", overlay).Output()
	if err != nil {
		var stderr []byte
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = ee.Stderr
		}
		return nil, fmt.Errorf("kubectl kustomize coordinator/deploy with image %s: %w: %s", image, err, stderr)
	}
	return kubeapply.Objects(out)
}
