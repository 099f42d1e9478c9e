// Package extension holds the Talos side of talos-nodeinit: the extension
// service spec and the machine-config patches. This test validates the
// patches with Talos machinery's own config patcher and validators.
package extension_test

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"testing"

	"github.com/siderolabs/talos/pkg/machinery/config/configpatcher"
	"github.com/siderolabs/talos/pkg/machinery/config/generate"
	"github.com/siderolabs/talos/pkg/machinery/config/machine"

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

		args := cfg.Machine().Kubelet().ExtraArgs()
		if !slices.Equal(args["cloud-provider"], []string{"external"}) || !slices.Equal(args["rotate-server-certificates"], []string{"true"}) {
			t.Errorf("kubelet extraArgs %v", args)
		}
		var found bool
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
		}
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
