// Package extension holds the Talos side of talos-nodeinit: the extension
// service spec and the machine-config patches. This test validates the
// patches with Talos machinery's own config patcher and validators.
package extension_test

import (
	"bytes"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"testing"

	"github.com/siderolabs/talos/pkg/machinery/config/configloader"
	"github.com/siderolabs/talos/pkg/machinery/config/configpatcher"
	"github.com/siderolabs/talos/pkg/machinery/config/generate"
	"github.com/siderolabs/talos/pkg/machinery/config/machine"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"go.yaml.in/yaml/v3"

	"github.com/talos-nodeinit/talos-nodeinit/pkg/agentkey"
	"github.com/talos-nodeinit/talos-nodeinit/pkg/rules"
)

type runtimeMode struct{}

func (runtimeMode) String() string        { return "metal" }
func (runtimeMode) RequiresInstall() bool { return false }
func (runtimeMode) InContainer() bool     { return false }

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

func TestPatchesApplyAndValidate(t *testing.T) {
	in, err := generate.NewInput("nodeinit", "https://10.5.0.1:6443", "1.34.4")
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
		args := cfg.Machine().Kubelet().ExtraArgs()
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
			if got := cfg.Cluster().ControllerManager().ExtraArgs()["allocate-node-cidrs"]; !slices.Equal(got, []string{"false"}) {
				t.Errorf("allocate-node-cidrs = %q", got)
			}
		} else {
			pods := cfg.Machine().Pods()
			if len(pods) != 1 || pods[0]["metadata"].(map[string]any)["name"] != "nodeinit-agent" {
				t.Fatalf("static pods %v", pods)
			}
			container := pods[0]["spec"].(map[string]any)["containers"].([]any)[0].(map[string]any)
			if !slices.Contains(container["args"].([]any), any("--facts=cmdline")) {
				t.Errorf("the static pod must run degraded (--facts=cmdline): %v", container["args"])
			}
			checkStaticPodKeyDir(t, pods[0], cfg.Machine().Kubelet().ExtraMounts())
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

// kubeletConfig114 mirrors Talos 1.14's KubeletConfig document
// (machinery v1.14.1, config/types/k8s/kubelet.go). That machinery cannot be
// built here (it needs a cosi-project/runtime version the module proxy
// refuses), so the document is checked against the schema as published:
// known fields only, an image, and the two flags.
type kubeletConfig114 struct {
	APIVersion                          string            `yaml:"apiVersion"`
	Kind                                string            `yaml:"kind"`
	Image                               string            `yaml:"image"`
	Config                              map[string]any    `yaml:"config,omitempty"`
	ExtraArgs                           map[string]string `yaml:"extraArgs,omitempty"`
	ClusterDNS                          []string          `yaml:"clusterDNS,omitempty"`
	DefaultRuntimeSeccompProfileEnabled *bool             `yaml:"defaultRuntimeSeccompProfileEnabled,omitempty"`
}

func TestKubeletConfigDocumentTalos114(t *testing.T) {
	data, err := os.ReadFile("patches/kubelet-talos-1.14.yaml")
	if err != nil {
		t.Fatal(err)
	}
	type clusterDoc struct {
		Cluster struct {
			ExternalCloudProvider struct {
				Enabled bool `yaml:"enabled"`
			} `yaml:"externalCloudProvider"`
		} `yaml:"cluster"`
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	var v1alpha1 clusterDoc
	var doc kubeletConfig114
	if err := dec.Decode(&v1alpha1); err != nil {
		t.Fatalf("the v1alpha1 document: %v", err)
	}
	if err := dec.Decode(&doc); err != nil {
		t.Fatalf("the KubeletConfig document: %v", err)
	}
	if !v1alpha1.Cluster.ExternalCloudProvider.Enabled {
		t.Error("cluster.externalCloudProvider.enabled is off")
	}
	if doc.APIVersion != "v1alpha1" || doc.Kind != "KubeletConfig" || doc.Image == "" {
		t.Errorf("document %+v: want apiVersion v1alpha1, kind KubeletConfig and an image", doc)
	}
	// The v1alpha1 form must say the same.
	legacy, err := os.ReadFile("patches/kubelet.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var v1 struct {
		clusterDoc `yaml:",inline"`
		Machine    struct {
			Kubelet struct {
				ExtraArgs map[string]string `yaml:"extraArgs"`
			} `yaml:"kubelet"`
		} `yaml:"machine"`
	}
	if err := yaml.Unmarshal(legacy, &v1); err != nil {
		t.Fatal(err)
	}
	if !maps.Equal(v1.Machine.Kubelet.ExtraArgs, doc.ExtraArgs) || v1.Cluster != v1alpha1.Cluster {
		t.Errorf("the two forms differ: %+v vs %+v %v", v1, v1alpha1, doc.ExtraArgs)
	}
	if doc.ExtraArgs["rotate-server-certificates"] != "true" || doc.ExtraArgs["cloud-provider"] != "" {
		t.Errorf("extraArgs %v: want rotate-server-certificates only (Talos sets cloud-provider)", doc.ExtraArgs)
	}
}
