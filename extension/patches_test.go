// Package extension holds the Talos side of talos-nodeinit: the extension
// service spec and the machine-config patches. This test validates the
// patches with Talos machinery's own config patcher and validators.
package extension_test

import (
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	talosconfig "github.com/siderolabs/talos/pkg/machinery/config"
	"github.com/siderolabs/talos/pkg/machinery/config/config"
	"github.com/siderolabs/talos/pkg/machinery/config/configloader"
	"github.com/siderolabs/talos/pkg/machinery/config/configpatcher"
	"github.com/siderolabs/talos/pkg/machinery/config/generate"
	"github.com/siderolabs/talos/pkg/machinery/config/machine"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/talos-nodeinit/talos-nodeinit/pkg/agentkey"
	"github.com/talos-nodeinit/talos-nodeinit/pkg/rules"
	"github.com/talos-nodeinit/talos-nodeinit/pkg/rulesource"
)

// runtimeMode stands for Talos's runtime modes in validation: metal, or
// container (the docker provisioner's).
type runtimeMode struct{ container bool }

func (m runtimeMode) String() string {
	if m.container {
		return "container"
	}
	return "metal"
}
func (runtimeMode) RequiresInstall() bool { return false }
func (m runtimeMode) InContainer() bool   { return m.container }

func patch(t *testing.T, name string) configpatcher.Patch {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("patches", name))
	if err != nil {
		t.Fatal(err)
	}
	p, err := configpatcher.LoadPatch(data)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return p
}

// The v1alpha1 forms, on a cluster created with Talos 1.13 (its version
// contract: machine.kubelet and cluster.controllerManager in the v1alpha1
// document), which Talos 1.14 keeps when it upgrades such a cluster.
func TestPatchesApplyAndValidate(t *testing.T) {
	in, err := generate.NewInput("nodeinit", "https://10.5.0.1:6443", "1.36.3", generate.WithVersionContract(talosconfig.TalosVersion1_13))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		typ     machine.Type
		patches []string
	}{
		{machine.TypeWorker, []string{"kubelet.yaml", "rules.yaml", "static-pod.yaml"}},
		{machine.TypeControlPlane, []string{"kubelet.yaml", "rules.yaml", "controller-manager-no-ipam.yaml"}},
	} {
		base, err := in.Config(tc.typ)
		if err != nil {
			t.Fatal(err)
		}
		var ps []configpatcher.Patch
		for _, name := range tc.patches {
			ps = append(ps, patch(t, name))
		}
		out, err := configpatcher.Apply(configpatcher.WithConfig(base), ps)
		if err != nil {
			t.Fatalf("%s: %v", tc.typ, err)
		}
		cfg, err := out.Config()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := cfg.Validate(runtimeMode{}); err != nil {
			t.Errorf("%s config with %v: %v", tc.typ, tc.patches, err)
		}

		// Talos itself starts the kubelet with --cloud-provider=external
		// when the external cloud provider is on (kubelet_spec.go,
		// CloudProviderExternal), and the API server and controller manager
		// too; the patch sets only what Talos does not.
		if !cfg.Cluster().ExternalCloudProvider().Enabled() {
			t.Errorf("%s: cluster.externalCloudProvider.enabled is off", tc.typ)
		}
		args := cfg.K8sKubeletConfig().ExtraArgs()
		if !slices.Equal(args["rotate-server-certificates"], []string{"true"}) {
			t.Errorf("kubelet extraArgs %v: want rotate-server-certificates", args)
		}
		if _, set := args["cloud-provider"]; set {
			t.Errorf("kubelet extraArgs %v: cloud-provider is Talos's to set, from externalCloudProvider", args)
		}
		var found bool
		// The ExtensionServiceConfig document on its own, as Talos loads it.
		escData, err := os.ReadFile("patches/rules.yaml")
		if err != nil {
			t.Fatal(err)
		}
		escCfg, err := configloader.NewFromBytes(escData)
		if err != nil {
			t.Fatalf("rules.yaml: %v", err)
		}
		if _, err := escCfg.Validate(runtimeMode{}); err != nil {
			t.Errorf("rules.yaml ExtensionServiceConfig: %v", err)
		}
		for _, esc := range cfg.ExtensionServiceConfigs() {
			if esc.Name() != "nodeinit-agent" {
				continue
			}
			found = true
			files := esc.ConfigFiles()
			if len(files) != 1 || files[0].MountPath() != defaultRulesFile(t) {
				t.Errorf("rules mounted at %v, want the agent's default --rules-file %s", files, defaultRulesFile(t))
			}
			if _, err := rules.Load([]byte(files[0].Content())); err != nil {
				t.Errorf("the shipped rules do not load: %v", err)
			}
		}
		if !found {
			t.Error("no ExtensionServiceConfig for nodeinit-agent")
		}
		if tc.typ == machine.TypeControlPlane {
			if got := cfg.K8sControllerManagerConfig().ExtraArgs()["allocate-node-cidrs"]; !slices.Equal(got, []string{"false"}) {
				t.Errorf("allocate-node-cidrs = %q", got)
			}
		} else {
			var pods []map[string]any
			for _, sp := range cfg.K8sStaticPodConfigs() {
				pods = append(pods, sp.Pod())
			}
			if len(pods) != 1 || pods[0]["metadata"].(map[string]any)["name"] != "nodeinit-agent" {
				t.Fatalf("static pods %v", pods)
			}
			container := pods[0]["spec"].(map[string]any)["containers"].([]any)[0].(map[string]any)
			if !slices.Contains(container["args"].([]any), any("--facts=cmdline")) {
				t.Errorf("the static pod must run degraded (--facts=cmdline): %v", container["args"])
			}
			checkStaticPodKeyDir(t, pods[0], cfg.K8sKubeletConfig().ExtraMounts())
		}
	}
}

// checkStaticPodKeyDir: the static pod keeps the agent's key where the
// extension does, read-write, in a directory the kubelet sees (its hostPath
// checks run in its own mount namespace).
func checkStaticPodKeyDir(t *testing.T, pod map[string]any, kubeletMounts []specs.Mount) {
	t.Helper()
	dir := filepath.Dir(agentkey.DefaultFile)
	spec := pod["spec"].(map[string]any)
	var volume string
	for _, v := range spec["volumes"].([]any) {
		v := v.(map[string]any)
		if hp, ok := v["hostPath"].(map[string]any); ok && hp["path"] == dir && hp["type"] == "DirectoryOrCreate" {
			volume = v["name"].(string)
		}
	}
	if volume == "" {
		t.Fatalf("the static pod has no DirectoryOrCreate hostPath volume for %s", dir)
	}
	var mounted bool
	for _, m := range spec["containers"].([]any)[0].(map[string]any)["volumeMounts"].([]any) {
		m := m.(map[string]any)
		if m["name"] == volume {
			mounted = m["mountPath"] == dir && m["readOnly"] != true
		}
	}
	if !mounted {
		t.Errorf("volume %s must be mounted read-write at %s", volume, dir)
	}
	if !slices.ContainsFunc(kubeletMounts, func(m specs.Mount) bool {
		return m.Source == dir && m.Destination == dir && slices.Contains(m.Options, "rw")
	}) {
		t.Errorf("the kubelet does not see %s read-write: extraMounts %v", dir, kubeletMounts)
	}
}

// defaultRulesFile reads the agent's default --rules-file from its source,
// so the patch and the binary cannot drift apart.
func defaultRulesFile(t *testing.T) string {
	src, err := os.ReadFile("../agent/main.go")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`DefaultRulesFile = "([^"]+)"`).FindSubmatch(src)
	if m == nil {
		t.Fatal("agent/main.go has no DefaultRulesFile")
	}
	return string(m[1])
}

// Talos 1.14's documents, loaded, patched into a config generated for a
// Talos 1.14 cluster (multi-document: KubeletConfig,
// KubeControllerManagerConfig…) and validated by Talos machinery v1.14.1
// itself (its configpatcher, configloader and validators), in container
// mode and on metal: the KubeletConfig and KubeControllerManagerConfig
// documents, the ContainerConfig and its UserVolumeConfig and
// EtcFileConfig. Then what the agent needs of them.
func TestTalos114Patches(t *testing.T) {
	in, err := generate.NewInput("nodeinit", "https://10.5.0.1:6443", "1.37.0", generate.WithVersionContract(talosconfig.TalosVersion1_14))
	if err != nil {
		t.Fatal(err)
	}
	base, err := in.Config(machine.TypeControlPlane)
	if err != nil {
		t.Fatal(err)
	}
	generatedImage := base.K8sKubeletConfig().Image()
	ps := []configpatcher.Patch{patch(t, "kubelet-talos-1.14.yaml"), patch(t, "controller-manager-no-ipam-talos-1.14.yaml"), patch(t, "container-config-talos-1.14.yaml")}
	out, err := configpatcher.Apply(configpatcher.WithConfig(base), ps)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := out.Config()
	if err != nil {
		t.Fatal(err)
	}
	for _, mode := range []runtimeMode{{}, {container: true}} {
		if _, err := cfg.Validate(mode); err != nil {
			t.Errorf("validated as %s: %v", mode, err)
		}
	}
	// The documents alone, as `talosctl patch mc` loads them.
	for _, name := range []string{"kubelet-talos-1.14.yaml", "controller-manager-no-ipam-talos-1.14.yaml", "container-config-talos-1.14.yaml"} {
		data, err := os.ReadFile(filepath.Join("patches", name))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := configloader.NewFromBytes(data, configloader.WithNoValidation()); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	// Merged into the cluster's own documents: its kubelet image is kept.
	if got := cfg.K8sKubeletConfig().Image(); got != generatedImage {
		t.Errorf("kubelet image %q after the patch, want the cluster's %q", got, generatedImage)
	}
	if got := cfg.K8sControllerManagerConfig().ExtraArgs()["allocate-node-cidrs"]; !slices.Equal(got, []string{"false"}) {
		t.Errorf("allocate-node-cidrs = %q", got)
	}
	if !cfg.Cluster().ExternalCloudProvider().Enabled() {
		t.Error("cluster.externalCloudProvider.enabled is off")
	}
	kc := cfg.K8sKubeletConfig()
	if kc == nil {
		t.Fatal("no KubeletConfig document")
	}
	if args := kc.ExtraArgs(); !slices.Equal(args["rotate-server-certificates"], []string{"true"}) || args["cloud-provider"] != nil {
		t.Errorf("KubeletConfig extraArgs %v: want rotate-server-certificates only (Talos sets cloud-provider)", args)
	}

	var agent config.ContainerConfig
	for _, c := range cfg.ContainerConfigs() {
		if c.Name() == "nodeinit-agent" {
			agent = c
		}
	}
	if agent == nil {
		t.Fatalf("no ContainerConfig nodeinit-agent among %d", len(cfg.ContainerConfigs()))
	}
	// --facts=auto: the kernel command line's facts while machined refuses
	// the container (workloadIsolation on Talos v1.14.0-v1.14.1).
	if !agent.Security().MachinedAccess() || !slices.Equal(agent.Args(), []string{"run", "--facts=auto"}) {
		t.Errorf("ContainerConfig: machinedAccess %v, args %v; want true, [run --facts=auto]", agent.Security().MachinedAccess(), agent.Args())
	}
	// The rules: Talos writes the EtcFileConfig to /etc/<name>, mounted
	// at the agent's default --rules-file, and the container waits for it.
	var rulesDoc config.EtcFileConfig
	for _, f := range cfg.EtcFileConfigs() {
		if f.Name() == rulesource.EtcFileName {
			rulesDoc = f
		}
	}
	if rulesDoc == nil {
		t.Fatalf("no EtcFileConfig %s", rulesource.EtcFileName)
	}
	if _, err := rules.Load([]byte(rulesDoc.Content())); err != nil {
		t.Errorf("the shipped rules do not load: %v", err)
	}
	hostRules := "/etc/" + rulesource.EtcFileName
	var mounted, keyMounted bool
	for _, m := range agent.Mounts() {
		if hp, ok := m.HostPath().Get(); ok && hp.Source() == filepath.Dir(hostRules) && hp.Destination() == filepath.Dir(defaultRulesFile(t)) {
			mounted = true
		}
		if uv, ok := m.UserVolume().Get(); ok && uv.Destination() == filepath.Dir(agentkey.DefaultFile) {
			keyMounted = true
		}
	}
	if !mounted || !keyMounted {
		t.Errorf("ContainerConfig mounts: the rules' directory mounted at %s: %v; a user volume at the key's directory %s: %v",
			filepath.Dir(defaultRulesFile(t)), mounted, filepath.Dir(agentkey.DefaultFile), keyMounted)
	}
	if !slices.Contains(agent.DependsOn().Paths(), hostRules) {
		t.Errorf("the container does not wait for %s: dependsOn.paths %v", hostRules, agent.DependsOn().Paths())
	}

	// The v1alpha1 forms (Talos 1.13) say the same, and a 1.14 cluster
	// refuses them, as a 1.13 one refuses the 1.14 forms: the README and
	// the installer must pick the form by how the cluster was created.
	in13, err := generate.NewInput("nodeinit", "https://10.5.0.1:6443", "1.36.3", generate.WithVersionContract(talosconfig.TalosVersion1_13))
	if err != nil {
		t.Fatal(err)
	}
	base13, err := in13.Config(machine.TypeControlPlane)
	if err != nil {
		t.Fatal(err)
	}
	out13, err := configpatcher.Apply(configpatcher.WithConfig(base13), []configpatcher.Patch{patch(t, "kubelet.yaml")})
	if err != nil {
		t.Fatal(err)
	}
	cfg13, err := out13.Config()
	if err != nil {
		t.Fatal(err)
	}
	if !maps.EqualFunc(cfg13.K8sKubeletConfig().ExtraArgs(), kc.ExtraArgs(), slices.Equal) {
		t.Errorf("the two forms differ: %v vs %v", cfg13.K8sKubeletConfig().ExtraArgs(), kc.ExtraArgs())
	}
	for _, c := range []struct {
		base  talosconfig.Provider
		patch string
		want  string
	}{
		{base, "kubelet.yaml", "kubelet config is already set"},
		{base, "controller-manager-no-ipam.yaml", "kube-controller-manager config is already set"},
		{base13, "kubelet-talos-1.14.yaml", "kubelet config is already set"},
		{base13, "controller-manager-no-ipam-talos-1.14.yaml", "kube-controller-manager config is already set"},
	} {
		out, err := configpatcher.Apply(configpatcher.WithConfig(c.base), []configpatcher.Patch{patch(t, c.patch)})
		if err == nil {
			var cfg talosconfig.Provider
			if cfg, err = out.Config(); err == nil {
				_, err = cfg.Validate(runtimeMode{})
			}
		}
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s on the other Talos's config: %v, want refused (%s)", c.patch, err, c.want)
		}
	}
}
