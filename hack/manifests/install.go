package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	talosconfig "github.com/siderolabs/talos/pkg/machinery/config"
	"github.com/siderolabs/talos/pkg/machinery/config/configpatcher"
	"github.com/siderolabs/talos/pkg/machinery/config/generate"
	"github.com/siderolabs/talos/pkg/machinery/config/machine"
	"go.yaml.in/yaml/v3"

	"github.com/talos-nodeinit/talos-nodeinit/coordinator/config"
	"github.com/talos-nodeinit/talos-nodeinit/pkg/rulesource"
)

// Form is how a cluster's machine config is written, which the Talos
// version that created the cluster decides, not the one it runs: Talos
// 1.14 refuses the multi-document kubelet and controller-manager settings
// in a config created before it, and the v1alpha1 sections in one it
// created.
type Form string

const (
	// FormV1Alpha1: created with Talos 1.13 or earlier (machine.kubelet,
	// cluster.controllerManager in the v1alpha1 document).
	FormV1Alpha1 Form = "v1alpha1"
	// FormMultidoc: created with Talos 1.14 (KubeletConfig,
	// KubeControllerManagerConfig documents).
	FormMultidoc Form = "multidoc"
)

// Mode is how the agent runs on the nodes.
type Mode string

const (
	// ModeContainer: a Talos 1.14 ContainerConfig, no image rebuild, no reboot.
	ModeContainer Mode = "container"
	// ModeExtension: the system extension (in the Talos image) with its
	// ExtensionServiceConfig; Talos 1.13 and 1.14.
	ModeExtension Mode = "extension"
)

// Install is what a user chooses; Render turns it into the machine-config
// patches that install talos-nodeinit, nothing else to edit.
type Install struct {
	Form Form
	Mode Mode
	// Coordinator is the repository the coordinator image was pushed to
	// (the tag is the release).
	Coordinator string
	// AgentImage is the agent image reference (container mode), tag or digest.
	AgentImage string
	// Rules is a rules file's content (Talos CCM's transformations); empty: none.
	Rules []byte
	// Env is the agent's NODEINIT_* settings, NAME=value.
	Env []string
	// CoordinatorConfig is coordinator.yaml (or the coordinator's
	// ConfigMap holding it); empty: the shipped one.
	CoordinatorConfig []byte
	// Clusters are the cluster's own machine configurations (one per node
	// type given): decide reads the form and mode from them, and each
	// patch is validated on the configuration of its node type too.
	Clusters []Cluster
	// Running is the Talos version the nodes run, from `talosctl get
	// version -o yaml` in MACHINE_CONFIG ("" when not given).
	Running string
	// ReplacesTalosCCM: the user migrates from Talos CCM, which the
	// clusters' configurations still install (MIGRATING=talos-ccm).
	ReplacesTalosCCM bool
	// SignerQPS is kube-controller-manager's client rate (--kube-api-qps,
	// burst twice it); 0: Talos's default (20), which caps how fast any
	// approver's certificates are signed in a join storm.
	SignerQPS int
	// Replicas is the coordinator Deployment's replicas; 0: as shipped (2).
	// A cluster with a single control-plane node holds one: the replicas
	// share the host network there, and a second stays Pending.
	Replicas int
}

// Install file names.
const (
	InstallAll          = "nodeinit.yaml"              // FormV1Alpha1: every node
	InstallControlPlane = "nodeinit-controlplane.yaml" // FormMultidoc: control-plane nodes
	InstallWorker       = "nodeinit-worker.yaml"       // FormMultidoc: workers
	InstallRemove       = "nodeinit-uninstall.yaml"    // every node
	InstallObjects      = "nodeinit-coordinator.yaml"  // the coordinator's objects, for kubectl
)

// Render renders the install patches from deployDir (the coordinator's
// objects) and extensionDir (the shipped agent documents), and validates
// each with Talos's machinery, applied to a config of its form and node
// type as `talosctl patch mc` would, before returning them.
func (in Install) Render(deployDir, extensionDir string) (map[string][]byte, error) {
	rulesText, env, err := in.check()
	if err != nil {
		return nil, err
	}
	release, rendered, err := renderCoordinator(deployDir, CoordinatorImage, in.Coordinator)
	if err != nil {
		return nil, err
	}
	if len(in.CoordinatorConfig) > 0 {
		if rendered, err = withCoordinatorConfig(rendered, in.CoordinatorConfig); err != nil {
			return nil, err
		}
	}
	if _, err := config.Parse(rendered); err != nil {
		return nil, fmt.Errorf("the coordinator's configuration: %w", err)
	}
	if in.Replicas != 0 {
		if rendered, err = withReplicas(rendered, in.Replicas); err != nil {
			return nil, err
		}
	}
	allocates, err := IPAMEnabled(rendered)
	if err != nil {
		return nil, err
	}
	agent, err := in.agentDocs(extensionDir, rulesText, env)
	if err != nil {
		return nil, err
	}
	manifest := Manifest(release, rendered)
	// The coordinator as a named document (merged by name: applying again
	// replaces it) wherever Talos 1.14 reads the patch; as
	// cluster.inlineManifests only for the extension on a config Talos
	// 1.13 may still read.
	named := in.Mode == ModeContainer || in.Form == FormMultidoc
	again := upgradeHint(named)
	if in.Mode == ModeContainer {
		again += ".\nUnder SecurityProfileConfig.workloadIsolation, Talos v1.14.0-v1.14.1 refuse the agent's container on machined's socket: it then publishes the kernel command line's facts (--facts=auto)"
	}
	header := fmt.Sprintf("talos-nodeinit %s: installs the agent (%s) and the coordinator. Rendered by `make install-patch`;\n"+
		"apply with `talosctl patch mc --patch @FILE`. %s.\n%s removes the documents it added.", release, in.Mode, again, InstallRemove)
	out := map[string][]byte{}
	kinds := map[string]machine.Type{InstallAll: machine.TypeUnknown}
	if in.Form == FormMultidoc {
		kinds = map[string]machine.Type{InstallControlPlane: machine.TypeControlPlane, InstallWorker: machine.TypeWorker}
	}
	for name, typ := range kinds {
		var docs []*yaml.Node
		v1 := mapping("cluster", mapping("externalCloudProvider", mapping("enabled", scalar("true", "!!bool"))))
		if in.Form == FormV1Alpha1 {
			v1 = mapping("machine", mapping("kubelet", mapping("extraArgs", mapping("rotate-server-certificates", scalar("true", "!!str")))),
				"cluster", mapping("externalCloudProvider", mapping("enabled", scalar("true", "!!bool"))))
			cluster := v1.Content[3]
			if args := in.controllerManagerArgs(allocates); len(args) > 0 {
				cluster.Content = append(cluster.Content, mapping("controllerManager", mapping("extraArgs", mapping(args...))).Content...)
			}
			if !named {
				cluster.Content = append(cluster.Content, mapping("inlineManifests", &yaml.Node{Kind: yaml.SequenceNode, Content: []*yaml.Node{
					mapping("name", scalar(InlineManifestName, "!!str"), "contents", literal(manifest))}}).Content...)
			}
		}
		docs = append(docs, &yaml.Node{Kind: yaml.DocumentNode, HeadComment: header + "\nFor " + nodesOf(name) + ".", Content: []*yaml.Node{v1}})
		if in.Form == FormMultidoc {
			docs = append(docs, document("KubeletConfig", "", "extraArgs", mapping("rotate-server-certificates", scalar("true", "!!str"))))
			if args := in.controllerManagerArgs(allocates); len(args) > 0 && typ == machine.TypeControlPlane {
				docs = append(docs, document("KubeControllerManagerConfig", "", "extraArgs", mapping(args...)))
			}
		}
		if named {
			docs = append(docs, replacing(document("KubeInlineManifestConfig", InlineManifestName, "manifest", literal(manifest)))...)
		}
		for _, d := range agent {
			docs = append(docs, replacing(d)...)
		}
		b, err := encode(docs)
		if err != nil {
			return nil, err
		}
		if err := validateInstall(in.Form, typ, b); err != nil {
			return nil, fmt.Errorf("%s does not pass Talos's validation: %w", name, err)
		}
		for _, c := range in.Clusters {
			if typ == machine.TypeUnknown || c.Type == typ {
				if err := c.validateOn(b); err != nil {
					return nil, fmt.Errorf("%s does not pass Talos's validation on the cluster's own configuration: %w", name, err)
				}
			}
		}
		out[name] = b
	}
	out[InstallRemove] = in.uninstall(release, named)
	// The same objects for kubectl: Talos creates an inline manifest's
	// missing objects but never updates existing ones, so after applying a
	// newer patch `kubectl apply --server-side -f` this file updates them.
	out[InstallObjects] = manifest
	return out, nil
}

// controllerManagerArgs are the kube-controller-manager flags the install
// sets, as mapping pairs: node IPAM off when the coordinator allocates,
// and the signer's client rate when SIGNER_QPS asks for one.
func (in Install) controllerManagerArgs(allocates bool) []any {
	var args []any
	if allocates {
		args = append(args, "allocate-node-cidrs", scalar("false", "!!str"))
	}
	if in.SignerQPS > 0 {
		args = append(args, "kube-api-qps", scalar(strconv.Itoa(in.SignerQPS), "!!str"), "kube-api-burst", scalar(strconv.Itoa(2*in.SignerQPS), "!!str"))
	}
	return args
}

// ipv4Pool is the coordinator configuration's ipam.ipv4Pool, as Render
// will ship it ("" when it allocates none).
func (in Install) ipv4Pool(deployDir string) (string, error) {
	_, rendered, err := renderCoordinator(deployDir, CoordinatorImage, in.Coordinator)
	if err != nil {
		return "", err
	}
	if len(in.CoordinatorConfig) > 0 {
		if rendered, err = withCoordinatorConfig(rendered, in.CoordinatorConfig); err != nil {
			return "", err
		}
	}
	cfg, err := config.Parse(rendered)
	if err != nil {
		return "", fmt.Errorf("the coordinator's configuration: %w", err)
	}
	if !cfg.IPAMEnabled() {
		return "", nil
	}
	return cfg.IPAM.IPv4Pool, nil
}

// check refuses what cannot be installed, every problem at once; it returns
// the rules and the agent's environment RULES and AGENT_ENV give.
func (in Install) check() ([]byte, []string, error) {
	var errs []error
	if in.Form != FormV1Alpha1 && in.Form != FormMultidoc {
		errs = append(errs, fmt.Errorf("TALOS_CONFIG=%q: want multidoc (a cluster created with Talos 1.14) or v1alpha1 (created with 1.13 or earlier; `talosctl get mc -o yaml | grep -c 'kind: KubeletConfig'` prints 0)", in.Form))
	}
	if in.Mode != ModeContainer && in.Mode != ModeExtension {
		errs = append(errs, fmt.Errorf("MODE=%q: want container (Talos 1.14: the agent as a ContainerConfig) or extension (the agent in the Talos image)", in.Mode))
	}
	if in.Coordinator == "" {
		errs = append(errs, errors.New("IMAGE is required: the repository you pushed the coordinator image to (nothing is published yet), e.g. IMAGE=registry.example.com/nodeinit-coordinator"))
	}
	if in.Mode == ModeContainer && in.AgentImage == "" {
		errs = append(errs, errors.New("AGENT_IMAGE is required with MODE=container: the agent image you pushed, e.g. AGENT_IMAGE=registry.example.com/nodeinit-agent-pod:v0.1.0 or …@sha256:…"))
	}
	if in.Mode == ModeExtension && in.AgentImage != "" {
		errs = append(errs, errors.New("AGENT_IMAGE is for MODE=container: the extension's agent is in the Talos image"))
	}
	rulesText, env, err := in.rulesAndEnv()
	if err != nil {
		errs = append(errs, err)
	}
	for _, e := range env {
		if k, _, ok := strings.Cut(e, "="); !ok || !strings.HasPrefix(k, "NODEINIT_") {
			errs = append(errs, fmt.Errorf("AGENT_ENV entry %q: want NODEINIT_NAME=value", e))
		}
	}
	return rulesText, env, errors.Join(errs...)
}

// rulesAndEnv reads RULES as the agent's validate does (a rules file, the
// ExtensionServiceConfig `nodeinit-agent migrate` writes, an EtcFileConfig,
// a machine config holding one, Talos CCM's ConfigMap): the rules text,
// and the environment the document gives the agent followed by AGENT_ENV's
// (the agent takes the last of a name, so AGENT_ENV wins).
func (in Install) rulesAndEnv() ([]byte, []string, error) {
	if len(bytes.TrimSpace(in.Rules)) == 0 {
		return nil, in.Env, nil
	}
	_, src, err := rulesource.Load(in.Rules)
	if err != nil {
		return nil, nil, fmt.Errorf("RULES: %w", err)
	}
	if src.Root != nil {
		return nil, nil, fmt.Errorf("RULES is %s: convert it first with `nodeinit-agent migrate --from-talos-ccm FILE`", src.Describe())
	}
	var env []string
	for _, e := range src.Environment {
		env = append(env, e.Entry)
	}
	return src.Content, append(env, in.Env...), nil
}

// agentDocs are the agent's documents: the shipped ContainerConfig patch
// (its UserVolumeConfig and EtcFileConfig) or ExtensionServiceConfig, with
// the user's image, rules and environment.
func (in Install) agentDocs(extensionDir string, rulesBytes []byte, env []string) ([]*yaml.Node, error) {
	file := "rules.yaml"
	if in.Mode == ModeContainer {
		file = "container-config-talos-1.14.yaml"
	}
	data, err := os.ReadFile(filepath.Join(extensionDir, "patches", file))
	if err != nil {
		return nil, err
	}
	var docs []*yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(data))
	for {
		var d yaml.Node
		if err := dec.Decode(&d); err != nil {
			break
		}
		docs = append(docs, &d)
	}
	rulesText := string(rulesBytes)
	if strings.TrimSpace(rulesText) == "" {
		rulesText = "transformations: []\n"
	}
	var changed int
	for _, d := range docs {
		root := d.Content[0]
		switch kind := field(root, "kind"); {
		case kind != nil && kind.Value == "ContainerConfig":
			field(root, "image").Value = in.AgentImage
			if len(env) > 0 {
				root.Content = append(root.Content, scalar("environment", "!!str"), strings2seq(env))
			}
			changed++
		case kind != nil && kind.Value == "EtcFileConfig" && field(root, "name").Value == rulesource.EtcFileName:
			*field(root, "contents") = *literal([]byte(rulesText))
			changed++
		case kind != nil && kind.Value == "ExtensionServiceConfig":
			files := field(root, "configFiles")
			*field(files.Content[0], "content") = *literal([]byte(rulesText))
			if len(env) > 0 {
				*field(root, "environment") = *strings2seq(env)
			}
			changed++
		}
		d.HeadComment = ""
	}
	if want := map[Mode]int{ModeContainer: 2, ModeExtension: 1}[in.Mode]; changed != want {
		return nil, fmt.Errorf("extension/patches/%s no longer holds the documents the installer fills in", file)
	}
	return docs, nil
}

// uninstall deletes every document the install added, by name.
// cluster.externalCloudProvider and the kubelet's flag stay: another
// cloud controller needs them too.
func (in Install) uninstall(release string, named bool) []byte {
	var b strings.Builder
	fmt.Fprintf(&b, "# talos-nodeinit %s: removes what %s added, on every node:\n#   talosctl patch mc --patch @%s\n", release, installFiles(in.Form), InstallRemove)
	b.WriteString("# Then delete the coordinator's objects: kubectl delete -f nodeinit-coordinator.yaml (that deletes\n" +
		"# the NodeRecord CRD and every record with it: the enrolled agent keys are gone, a reinstall enrols\n" +
		"# them again). This file leaves the external cloud provider, the kubelet's rotate-server-certificates\n" +
		"# and kube-controller-manager's allocate-node-cidrs=false in place: until another cloud controller\n" +
		"# runs, new nodes stay uninitialized and get no pod CIDR; set allocate-node-cidrs back to true if\n" +
		"# nothing else allocates them. The agent's key volume (UserVolumeConfig nodeinit) stays.\n" +
		"# Serving certificates stop being approved: each kubelet's works until it expires, then kubectl\n" +
		"# logs/exec to that node fail. Every step, and what to do about that: docs/operations.md, Uninstall.\n")
	sep := ""
	del := func(kind, name string) {
		fmt.Fprintf(&b, "%sapiVersion: v1alpha1\nkind: %s\nname: %s\n$patch: delete\n", sep, kind, name)
		sep = "---\n"
	}
	if named {
		del("KubeInlineManifestConfig", InlineManifestName)
	} else {
		fmt.Fprintf(&b, "cluster:\n  inlineManifests:\n    - name: %s\n      $patch: delete\n", InlineManifestName)
		sep = "---\n"
	}
	if in.Mode == ModeContainer {
		del("ContainerConfig", "nodeinit-agent")
		del("EtcFileConfig", rulesource.EtcFileName)
	} else {
		del("ExtensionServiceConfig", rulesource.ServiceName)
	}
	return []byte(b.String())
}

func installFiles(f Form) string {
	if f == FormMultidoc {
		return InstallControlPlane + " and " + InstallWorker
	}
	return InstallAll
}

func nodesOf(name string) string {
	switch name {
	case InstallControlPlane:
		return "control-plane nodes (" + InstallWorker + " is for workers)"
	case InstallWorker:
		return "worker nodes (" + InstallControlPlane + " is for control-plane nodes)"
	}
	return "every node, control plane and workers"
}

// validateInstall applies patch to a generated config of the form (and
// node type; TypeUnknown: both), as `talosctl patch mc` does, and
// validates it as Talos does on metal and in container mode.
func validateInstall(form Form, typ machine.Type, patch []byte) error {
	contract := talosconfig.TalosVersion1_13
	if form == FormMultidoc {
		contract = talosconfig.TalosVersion1_14
	}
	types := []machine.Type{typ}
	if typ == machine.TypeUnknown {
		types = []machine.Type{machine.TypeControlPlane, machine.TypeWorker}
	}
	in, err := generate.NewInput("nodeinit", "https://10.5.0.1:6443", "1.37.0", generate.WithVersionContract(contract))
	if err != nil {
		return err
	}
	p, err := configpatcher.LoadPatch(patch)
	if err != nil {
		return err
	}
	for _, t := range types {
		base, err := in.Config(t)
		if err != nil {
			return err
		}
		out, err := configpatcher.Apply(configpatcher.WithConfig(base), []configpatcher.Patch{p})
		if err != nil {
			return fmt.Errorf("%s: %w", t, err)
		}
		cfg, err := out.Config()
		if err != nil {
			return fmt.Errorf("%s: %w", t, err)
		}
		for _, m := range []validationMode{{}, {container: true}} {
			if _, err := cfg.Validate(m); err != nil {
				return fmt.Errorf("%s (%s): %w", t, m, err)
			}
		}
	}
	return nil
}

// validationMode is Talos's runtime mode for validation: metal, or
// container (the docker provisioner's).
type validationMode struct{ container bool }

func (m validationMode) String() string {
	if m.container {
		return "container"
	}
	return "metal"
}
func (validationMode) RequiresInstall() bool { return false }
func (m validationMode) InContainer() bool   { return m.container }

// withCoordinatorConfig puts cfg in the rendered ConfigMap's coordinator.yaml.
// cfg is coordinator.yaml itself, or a ConfigMap holding it (as
// coordinator/deploy/configmap.yaml does).
func withCoordinatorConfig(rendered, cfg []byte) ([]byte, error) {
	var cm struct {
		Kind string            `yaml:"kind"`
		Data map[string]string `yaml:"data"`
	}
	if yaml.Unmarshal(cfg, &cm) == nil && cm.Kind == "ConfigMap" {
		inner, ok := cm.Data["coordinator.yaml"]
		if !ok {
			return nil, errors.New("CONFIG is a ConfigMap without data.coordinator.yaml")
		}
		cfg = []byte(inner)
	}
	out, err := editObject(rendered, "ConfigMap", "nodeinit-coordinator", func(root *yaml.Node) bool {
		c := field(field(root, "data"), "coordinator.yaml")
		if c != nil {
			*c = *literal(cfg)
		}
		return c != nil
	})
	if err != nil {
		return nil, errors.New("the rendered objects hold no ConfigMap nodeinit-coordinator with coordinator.yaml")
	}
	return out, nil
}

// withReplicas sets the coordinator Deployment's replicas in the rendered
// objects.
func withReplicas(rendered []byte, n int) ([]byte, error) {
	if n < 1 {
		return nil, fmt.Errorf("REPLICAS=%d: want 1 or more (1 on a cluster with one control-plane node)", n)
	}
	return editObject(rendered, "Deployment", "nodeinit-coordinator", func(root *yaml.Node) bool {
		r := field(field(root, "spec"), "replicas")
		if r == nil {
			return false
		}
		*r = *scalar(strconv.Itoa(n), "!!int")
		return true
	})
}

// editObject re-encodes the rendered objects with edit applied to the one
// of that kind and name; it fails when edit changed none.
func editObject(rendered []byte, kind, name string, edit func(root *yaml.Node) bool) ([]byte, error) {
	var out bytes.Buffer
	enc := yaml.NewEncoder(&out)
	enc.SetIndent(2)
	dec := yaml.NewDecoder(bytes.NewReader(rendered))
	edited := false
	for {
		var d yaml.Node
		if err := dec.Decode(&d); err != nil {
			break
		}
		root := d.Content[0]
		if k, n := field(root, "kind"), field(field(root, "metadata"), "name"); k != nil && k.Value == kind && n != nil && n.Value == name {
			edited = edit(root) || edited
		}
		if err := enc.Encode(&d); err != nil {
			return nil, err
		}
	}
	if err := enc.Close(); err != nil {
		return nil, err
	}
	if !edited {
		return nil, fmt.Errorf("the rendered objects hold no %s %s to change", kind, name)
	}
	return out.Bytes(), nil
}

// upgradeHint says how to change or upgrade an install: the coordinator's
// objects first (Talos never updates objects it created; they are Talos's
// server-side apply, hence --force-conflicts), then the patch, which
// replaces the agent's documents; with cluster.inlineManifests (named
// false) the uninstall file goes first, in the same command.
func upgradeHint(named bool) string {
	h := "To change or upgrade: `kubectl apply --server-side --force-conflicts -f " + InstallObjects + "`\n" +
		"(the coordinator first: Talos never updates objects it created), then apply this file again"
	if !named {
		h += "\nwith " + InstallRemove + " first in the same command (Talos appends cluster.inlineManifests)"
	}
	return h
}

// replacing is a named document preceded by its deletion, so that the
// patch replaces whatever an earlier one left instead of merging with it:
// Talos merges a named document's lists by appending (a ContainerConfig's
// mounts, which it then refuses as duplicates; an environment, whose
// first entry of a name wins), and deleting a document that is not there
// is no error. Unnamed documents are returned as they are.
func replacing(d *yaml.Node) []*yaml.Node {
	root := d.Content[0]
	kind, name := field(root, "kind"), field(root, "name")
	if kind == nil || name == nil || kind.Value == "UserVolumeConfig" { // the agent's key lives on it: never deleted
		return []*yaml.Node{d}
	}
	del := document(kind.Value, name.Value, "$patch", scalar("delete", "!!str"))
	return []*yaml.Node{del, d}
}

// field is a mapping node's value for key, or nil.
func field(m *yaml.Node, key string) *yaml.Node {
	if m == nil || m.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			return m.Content[i+1]
		}
	}
	return nil
}

func literal(b []byte) *yaml.Node {
	s := string(b)
	if !strings.HasSuffix(s, "\n") {
		s += "\n"
	}
	return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Style: yaml.LiteralStyle, Value: s}
}

func strings2seq(ss []string) *yaml.Node {
	n := &yaml.Node{Kind: yaml.SequenceNode}
	for _, s := range ss {
		n.Content = append(n.Content, scalar(s, "!!str"))
	}
	return n
}

// document is a Talos config document of kind (named when name is set)
// with the given fields.
func document(kind, name string, kv ...any) *yaml.Node {
	head := []any{"apiVersion", scalar("v1alpha1", "!!str"), "kind", scalar(kind, "!!str")}
	if name != "" {
		head = append(head, "name", scalar(name, "!!str"))
	}
	return &yaml.Node{Kind: yaml.DocumentNode, Content: []*yaml.Node{mapping(slices.Concat(head, kv)...)}}
}

func encode(docs []*yaml.Node) ([]byte, error) {
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	for _, d := range docs {
		if err := enc.Encode(d); err != nil {
			return nil, err
		}
	}
	if err := enc.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
