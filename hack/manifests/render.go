package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"go.yaml.in/yaml/v3"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
)

// InlineManifestName names the coordinator's manifest in the machine
// config's cluster.inlineManifests (Talos applies each once, by name).
const InlineManifestName = "nodeinit-coordinator"

// Kustomize renders the kustomization in dir as `kubectl apply -k` sends
// it. kustomize's Go API, pinned in this module's go.mod, makes the output
// the same on every machine whatever kubectl is installed.
func Kustomize(fs filesys.FileSystem, dir string) ([]byte, error) {
	m, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(fs, dir)
	if err != nil {
		return nil, fmt.Errorf("kustomize %s: %w", dir, err)
	}
	return m.AsYaml()
}

// Release is the coordinator image tag a kustomization pins (its images:
// newTag for the coordinator image).
func Release(kustomization []byte, image string) (string, error) {
	var k struct {
		Images []struct {
			Name   string `yaml:"name"`
			NewTag string `yaml:"newTag"`
		} `yaml:"images"`
	}
	if err := yaml.Unmarshal(kustomization, &k); err != nil {
		return "", fmt.Errorf("kustomization.yaml: %w", err)
	}
	for _, i := range k.Images {
		if i.Name == image && i.NewTag != "" {
			return i.NewTag, nil
		}
	}
	return "", fmt.Errorf("kustomization.yaml pins no tag for %s: add it under images: with newTag", image)
}

// Manifest is the single-file install: a header saying what it is, then
// the rendered objects.
func Manifest(release string, rendered []byte) []byte {
	header := fmt.Sprintf(`# nodeinit-coordinator %s: the objects of coordinator/deploy, rendered by
# make manifests. Install with
#   kubectl apply --server-side -f nodeinit-coordinator.yaml
# or carry it in the machine config (talos-patch.yaml).
`, release)
	return append([]byte(header), rendered...)
}

// TalosPatch is a machine-config patch for every node of a Talos cluster:
// the coordinator as an inline manifest Talos applies at bootstrap, the
// external cloud provider on (Talos then starts the kubelet, API server and
// controller manager with --cloud-provider=external), and, when the
// coordinator allocates pod CIDRs, kube-controller-manager's own allocation
// off. Talos ignores the cluster section on workers except what concerns
// the kubelet, so the same patch serves both kinds of node.
func TalosPatch(release string, manifest []byte, coordinatorAllocates bool) ([]byte, error) {
	contents := &yaml.Node{Kind: yaml.ScalarNode, Style: yaml.LiteralStyle, Value: string(manifest)}
	cluster := mapping(
		"externalCloudProvider", mapping("enabled", scalar("true", "!!bool")),
	)
	if coordinatorAllocates {
		cluster.Content = append(cluster.Content, mapping(
			"controllerManager", mapping("extraArgs", mapping("allocate-node-cidrs", scalar("false", "!!str"))),
		).Content...)
		cluster.Content[len(cluster.Content)-2].HeadComment = "The coordinator allocates pod CIDRs (ipam.enabled in its ConfigMap)."
	}
	cluster.Content = append(cluster.Content, mapping(
		"inlineManifests", &yaml.Node{Kind: yaml.SequenceNode, Content: []*yaml.Node{
			mapping("name", scalar(InlineManifestName, "!!str"), "contents", contents),
		}},
	).Content...)
	doc := &yaml.Node{Kind: yaml.DocumentNode, HeadComment: fmt.Sprintf(`nodeinit-coordinator %s for Talos, on every node:
  talosctl gen config ... --config-patch @talos-patch.yaml
  talosctl patch mc --nodes <all nodes> --patch @talos-patch.yaml
To upgrade or apply again, remove the previous one in the same command (Talos appends inline manifests):
  talosctl patch mc --nodes <all nodes> --patch @talos-unpatch.yaml --patch @talos-patch.yaml
Rendered by make manifests from coordinator/deploy.`, release),
		Content: []*yaml.Node{mapping("cluster", cluster)}}
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(doc); err != nil {
		return nil, err
	}
	if err := enc.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

func scalar(v, tag string) *yaml.Node { return &yaml.Node{Kind: yaml.ScalarNode, Tag: tag, Value: v} }

// mapping builds a mapping node from alternating keys and value nodes.
func mapping(kv ...any) *yaml.Node {
	n := &yaml.Node{Kind: yaml.MappingNode}
	for i := 0; i < len(kv); i += 2 {
		n.Content = append(n.Content, scalar(kv[i].(string), "!!str"), kv[i+1].(*yaml.Node))
	}
	return n
}

// IPAMEnabled reads ipam.enabled from the rendered coordinator ConfigMap
// (the coordinator's default is on).
func IPAMEnabled(rendered []byte) (bool, error) {
	dec := yaml.NewDecoder(bytes.NewReader(rendered))
	for {
		var obj struct {
			Kind     string `yaml:"kind"`
			Metadata struct{ Name string }
			Data     map[string]string `yaml:"data"`
		}
		if err := dec.Decode(&obj); err != nil {
			return false, fmt.Errorf("no ConfigMap nodeinit-coordinator with coordinator.yaml in the rendered objects: %w", err)
		}
		if obj.Kind != "ConfigMap" || obj.Metadata.Name != "nodeinit-coordinator" {
			continue
		}
		var cfg struct {
			IPAM struct {
				Enabled *bool `yaml:"enabled"`
			} `yaml:"ipam"`
		}
		if err := yaml.Unmarshal([]byte(obj.Data["coordinator.yaml"]), &cfg); err != nil {
			return false, fmt.Errorf("ConfigMap nodeinit-coordinator coordinator.yaml: %w", err)
		}
		return cfg.IPAM.Enabled == nil || *cfg.IPAM.Enabled, nil
	}
}

// TalosUnpatch is the patch that removes the coordinator's inline
// manifest (Talos's strategic merge deletes a list item by name). Talos
// appends inline manifests, so a second talos-patch.yaml alone is refused
// as a duplicate: an upgrade, or applying again, gives this one first, in
// the same command; alone it uninstalls the coordinator. On a config
// without the manifest Talos refuses it (nothing to delete): a first
// install gives talos-patch.yaml alone.
func TalosUnpatch(release string) []byte {
	return []byte(fmt.Sprintf(`# nodeinit-coordinator %s: removes the coordinator's inline manifest.
# Upgrade, or apply again (Talos appends inline manifests; two of one name are refused):
#   talosctl patch mc --nodes <all nodes> --patch @talos-unpatch.yaml --patch @talos-patch.yaml
# Uninstall (then delete what it created: kubectl delete -f nodeinit-coordinator.yaml;
# that deletes the NodeRecord CRD, every record and enrolled agent key with it):
#   talosctl patch mc --nodes <all nodes> --patch @talos-unpatch.yaml
cluster:
  inlineManifests:
    - name: %s
      $patch: delete
`, release, InlineManifestName))
}

// TalosPatch114 is TalosPatch for a cluster created with Talos 1.14, whose
// machine config is multi-document, for one kind of node. Talos refuses
// the v1alpha1 cluster.controllerManager section there (the
// KubeControllerManagerConfig document holds it), and refuses that
// document on workers, so the control-plane form (controlPlane) carries
// the controller manager's flag and the worker form does not. The
// coordinator's manifest is its own named document, merged by name:
// applying the patch again, or a newer release's, replaces it instead of
// adding a second (no unpatch needed to upgrade). externalCloudProvider
// stays in the v1alpha1 document, as Talos 1.14 has it.
func TalosPatch114(release string, manifest []byte, coordinatorAllocates, controlPlane bool) ([]byte, error) {
	name, other, nodes := "talos-patch-1.14.yaml", "talos-patch-1.14-controlplane.yaml", "<worker nodes>"
	if controlPlane {
		name, other, nodes = other, name, "<control-plane nodes>"
	}
	docs := []*yaml.Node{
		{Kind: yaml.DocumentNode, HeadComment: fmt.Sprintf(`nodeinit-coordinator %s for a cluster created with Talos 1.14, on %s
(%s is for the others):
  talosctl gen config ... --config-patch-%s @%s
  talosctl patch mc --nodes %s --patch @%s
Applying it again, or a newer release's, replaces the manifest (a named document merges).
Uninstall: talosctl patch mc --nodes <all nodes> --patch @talos-unpatch-1.14.yaml
A cluster created with Talos 1.13 or earlier (machine.kubelet in its v1alpha1 document) takes talos-patch.yaml.
Rendered by make manifests from coordinator/deploy.`, release, strings.Trim(nodes, "<>"), other, map[bool]string{true: "control-plane", false: "worker"}[controlPlane], name, nodes, name),
			Content: []*yaml.Node{mapping("cluster", mapping("externalCloudProvider", mapping("enabled", scalar("true", "!!bool"))))}},
	}
	if coordinatorAllocates && controlPlane {
		docs = append(docs, &yaml.Node{Kind: yaml.DocumentNode, HeadComment: "The coordinator allocates pod CIDRs (ipam.enabled in its ConfigMap).",
			Content: []*yaml.Node{mapping("apiVersion", scalar("v1alpha1", "!!str"), "kind", scalar("KubeControllerManagerConfig", "!!str"),
				"extraArgs", mapping("allocate-node-cidrs", scalar("false", "!!str")))}})
	}
	docs = append(docs, &yaml.Node{Kind: yaml.DocumentNode,
		Content: []*yaml.Node{mapping("apiVersion", scalar("v1alpha1", "!!str"), "kind", scalar("KubeInlineManifestConfig", "!!str"),
			"name", scalar(InlineManifestName, "!!str"),
			"manifest", &yaml.Node{Kind: yaml.ScalarNode, Style: yaml.LiteralStyle, Value: string(manifest)})}})
	return encode(docs)
}

// TalosUnpatch114 removes the coordinator's KubeInlineManifestConfig
// document: uninstall on a cluster created with Talos 1.14.
func TalosUnpatch114(release string) []byte {
	return []byte(fmt.Sprintf(`# nodeinit-coordinator %s, a cluster created with Talos 1.14: removes the coordinator's
# inline manifest. Uninstall (then delete what it created: kubectl delete -f nodeinit-coordinator.yaml;
# that deletes the NodeRecord CRD, every record and enrolled agent key with it):
#   talosctl patch mc --nodes <all nodes> --patch @talos-unpatch-1.14.yaml
apiVersion: v1alpha1
kind: KubeInlineManifestConfig
name: %s
$patch: delete
`, release, InlineManifestName))
}

// renderCoordinator renders deployDir's objects with the coordinator image
// pushedTo (a repository; the tag is the release the kustomization pins),
// or image when pushedTo is empty.
func renderCoordinator(deployDir, image, pushedTo string) (release string, rendered []byte, err error) {
	k, err := os.ReadFile(filepath.Join(deployDir, "kustomization.yaml"))
	if err != nil {
		return "", nil, err
	}
	if release, err = Release(k, image); err != nil {
		return "", nil, err
	}
	if rendered, err = Kustomize(filesys.MakeFsOnDisk(), deployDir); err != nil {
		return "", nil, err
	}
	if !bytes.Contains(rendered, []byte("image: "+image+":"+release+"\n")) {
		return "", nil, fmt.Errorf("the rendered Deployment does not run %s:%s", image, release)
	}
	if pushedTo != "" && pushedTo != image {
		if !repository.MatchString(pushedTo) {
			return "", nil, fmt.Errorf("IMAGE=%q: want a repository without a tag, like registry.example.com/nodeinit-coordinator (the tag is the release, %s)", pushedTo, release)
		}
		rendered = bytes.ReplaceAll(rendered, []byte("image: "+image+":"+release+"\n"), []byte("image: "+pushedTo+":"+release+"\n"))
	}
	return release, rendered, nil
}

// repository is an image repository without tag or digest:
// host[:port]/path, lower case.
var repository = regexp.MustCompile(`^[a-z0-9]+([._-][a-z0-9]+)*(\.[a-z0-9-]+)*(:[0-9]+)?(/[a-z0-9]+([._-]|__|[-]*[a-z0-9]+)*)+$`)

// Write renders deployDir into outDir: nodeinit-coordinator.yaml,
// talos-patch.yaml and talos-unpatch.yaml (clusters created with Talos 1.13
// or earlier), talos-patch-1.14.yaml (workers),
// talos-patch-1.14-controlplane.yaml and talos-unpatch-1.14.yaml (created
// with Talos 1.14). image is the coordinator image the kustomization names;
// pushedTo, when not empty, is the repository the rendered Deployment pulls
// it from instead (the tag stays the release).
func Write(deployDir, outDir, image, pushedTo string) (files []string, err error) {
	release, rendered, err := renderCoordinator(deployDir, image, pushedTo)
	if err != nil {
		return nil, err
	}
	allocates, err := IPAMEnabled(rendered)
	if err != nil {
		return nil, err
	}
	manifest := Manifest(release, rendered)
	patch, err := TalosPatch(release, manifest, allocates)
	if err != nil {
		return nil, err
	}
	patch114, err := TalosPatch114(release, manifest, allocates, false)
	if err != nil {
		return nil, err
	}
	patch114cp, err := TalosPatch114(release, manifest, allocates, true)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(outDir, 0o755); err != nil {
		return nil, err
	}
	for _, f := range []struct {
		name string
		data []byte
	}{{"nodeinit-coordinator.yaml", manifest}, {"talos-patch.yaml", patch}, {"talos-unpatch.yaml", TalosUnpatch(release)},
		{"talos-patch-1.14.yaml", patch114}, {"talos-patch-1.14-controlplane.yaml", patch114cp}, {"talos-unpatch-1.14.yaml", TalosUnpatch114(release)}} {
		path := filepath.Join(outDir, f.name)
		if err := os.WriteFile(path, f.data, 0o644); err != nil {
			return nil, err
		}
		files = append(files, path)
	}
	return files, nil
}
