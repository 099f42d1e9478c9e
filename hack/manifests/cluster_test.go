package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	talosconfig "github.com/siderolabs/talos/pkg/machinery/config"
	"github.com/siderolabs/talos/pkg/machinery/config/configpatcher"
	"github.com/siderolabs/talos/pkg/machinery/config/generate"
	"github.com/siderolabs/talos/pkg/machinery/config/machine"
)

// generated is a machine configuration as Talos's own generator writes it
// for a cluster created with that version contract, edited by edit.
func generated(t *testing.T, contract *talosconfig.VersionContract, typ machine.Type, edit func(string) string) []byte {
	t.Helper()
	in, err := generate.NewInput("prod", "https://10.5.0.1:6443", "1.37.0", generate.WithVersionContract(contract))
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := in.Config(typ)
	if err != nil {
		t.Fatal(err)
	}
	b, err := cfg.EncodeBytes()
	if err != nil {
		t.Fatal(err)
	}
	if edit != nil {
		b = []byte(edit(string(b)))
	}
	return b
}

// asResource wraps a configuration as `talosctl get mc -o yaml` prints it.
func asResource(cfg []byte) []byte {
	var b strings.Builder
	b.WriteString("node: 10.5.0.2\nmetadata:\n    namespace: config\n    type: MachineConfigs.config.talos.dev\n    id: v1alpha1\n    version: 1\nspec: |\n")
	for _, l := range strings.Split(strings.TrimRight(string(cfg), "\n"), "\n") {
		b.WriteString("    " + l + "\n")
	}
	return []byte(b.String())
}

func readClusters(t *testing.T, cfgs ...[]byte) []Cluster {
	t.Helper()
	var out []Cluster
	for i, raw := range cfgs {
		c, err := ReadCluster(filepath.Join(t.TempDir(), "mc"+string(rune('0'+i))+".yaml"), raw)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, c)
	}
	return out
}

// TestRendererReadsTheCluster: the form, the mode and the checks come from
// the cluster's own machine configuration, as Talos generates it for each
// version; every combination that would break the cluster is refused with
// its fix, and a cluster created with Talos 1.14 (workloadIsolation on)
// gets a working install with no security setting changed.
func TestRendererReadsTheCluster(t *testing.T) {
	cp14 := generated(t, talosconfig.TalosVersion1_14, machine.TypeControlPlane, nil)
	w14 := generated(t, talosconfig.TalosVersion1_14, machine.TypeWorker, nil)
	if !strings.Contains(string(w14), "workloadIsolation: true") {
		t.Fatal("Talos 1.14's generator no longer turns workloadIsolation on: this test's premise is gone")
	}
	base := func() Install {
		return Install{Coordinator: "registry.example.com/nodeinit-coordinator", AgentImage: "registry.example.com/nodeinit-agent-pod@sha256:" + strings.Repeat("a", 64)}
	}

	t.Run("created with 1.14, isolation on", func(t *testing.T) {
		in := base()
		in.Clusters = readClusters(t, asResource(cp14), w14)
		said, err := in.decide(in.Clusters, "10.244.0.0/16")
		if err != nil {
			t.Fatal(err)
		}
		text := strings.Join(said, "\n")
		if in.Form != FormMultidoc || in.Mode != ModeContainer || !strings.Contains(text, "kernel command line") || !strings.Contains(text, "Nothing is switched off") {
			t.Fatalf("form %s, mode %s, said:\n%s", in.Form, in.Mode, text)
		}
		files, err := in.Render(deployDir, extensionDir)
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range []string{InstallControlPlane, InstallWorker} {
			if !strings.Contains(string(files[name]), "--facts=auto") || strings.Contains(string(files[name]), "kind: SecurityProfileConfig") {
				t.Errorf("%s: want the agent with --facts=auto and no SecurityProfileConfig:\n%s", name, files[name])
			}
		}
	})
	t.Run("created with 1.13: the extension, never a ContainerConfig", func(t *testing.T) {
		w13 := generated(t, talosconfig.TalosVersion1_13, machine.TypeWorker, func(s string) string {
			return strings.Replace(s, "\n    install:\n", "\n    install:\n        image: ghcr.io/siderolabs/installer:v1.13.9\n", 1)
		})
		in := base()
		in.AgentImage = ""
		if _, err := in.decide(readClusters(t, w13), "10.244.0.0/16"); err != nil || in.Mode != ModeExtension || in.Form != FormV1Alpha1 {
			t.Fatalf("mode %s, form %s, %v", in.Mode, in.Form, err)
		}
		in = base()
		in.Mode = ModeContainer
		if _, err := in.decide(readClusters(t, w13), "10.244.0.0/16"); err == nil || !strings.Contains(err.Error(), "ContainerConfig is a Talos 1.14 document") {
			t.Fatalf("MODE=container on 1.13: %v", err)
		}
	})
	t.Run("the v1alpha1 form without a version: refused, the running version decides", func(t *testing.T) {
		// As Talos 1.13's generator writes it: no installer image. Talos 1.13
		// and 1.14 both read it, and 1.13 refuses a ContainerConfig.
		w13 := generated(t, talosconfig.TalosVersion1_13, machine.TypeWorker, nil)
		in := base()
		if _, err := in.decide(readClusters(t, w13), "10.244.0.0/16"); err == nil || !strings.Contains(err.Error(), "get version -o yaml > version.yaml") {
			t.Fatalf("mode %s, %v: want a refusal naming the command that reads the version", in.Mode, err)
		}
		for _, c := range []struct {
			running, installer string
			want               Mode
		}{{"v1.13.9", "", ModeExtension}, {"v1.14.1", "", ModeContainer}, {"v1.14.1", "v1.13.9", ModeContainer}, {"v1.13.9", "v1.14.1", ModeExtension}} {
			in := base()
			in.Running = c.running
			cfg := w13
			if c.installer != "" {
				cfg = generated(t, talosconfig.TalosVersion1_13, machine.TypeWorker, func(s string) string {
					return strings.Replace(s, "\n    install:\n", "\n    install:\n        image: ghcr.io/siderolabs/installer:"+c.installer+"\n", 1)
				})
			}
			said, err := in.decide(readClusters(t, cfg), "10.244.0.0/16")
			if err != nil || in.Mode != c.want || !strings.Contains(strings.Join(said, "\n"), c.running+" (talosctl get version)") {
				t.Errorf("running %s, installer %q: mode %s, %v, said %q", c.running, c.installer, in.Mode, err, said)
			}
		}
		if v, ok := ReadVersion([]byte("node: 10.5.0.2\nmetadata:\n    namespace: runtime\n    type: Versions.runtime.talos.dev\n    id: version\nspec:\n    name: Talos\n    version: v1.13.9\n")); !ok || v != "v1.13.9" {
			t.Errorf("ReadVersion: %q %v", v, ok)
		}
		if _, ok := ReadVersion(asResource(w13)); ok {
			t.Error("ReadVersion took a machine configuration for a version")
		}
	})
	for _, c := range []struct {
		name, pool, want string
		edit             func(string) string
	}{
		{"a pool outside the pod subnets", "10.200.0.0/16", "not inside the cluster's pod subnets", nil},
		{"Talos CCM installed", "10.244.0.0/16", "Talos CCM", func(s string) string {
			return strings.Replace(s, "cluster:\n", "cluster:\n    externalCloudProvider:\n        enabled: true\n        manifests:\n            - https://raw.githubusercontent.com/siderolabs/talos-cloud-controller-manager/main/docs/deploy/cloud-controller-manager.yml\n", 1)
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			in := base()
			cfg := generated(t, talosconfig.TalosVersion1_14, machine.TypeControlPlane, c.edit)
			if _, err := in.decide(readClusters(t, cfg), c.pool); err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("%v, want a refusal naming %q", err, c.want)
			}
		})
	}
	t.Run("replacing Talos CCM, rendered while it still runs", func(t *testing.T) {
		in := base()
		in.ReplacesTalosCCM = true
		cfg := generated(t, talosconfig.TalosVersion1_14, machine.TypeControlPlane, func(s string) string {
			return strings.Replace(s, "cluster:\n", "cluster:\n    externalCloudProvider:\n        enabled: true\n        manifests:\n            - https://raw.githubusercontent.com/siderolabs/talos-cloud-controller-manager/main/docs/deploy/cloud-controller-manager.yml\n", 1)
		})
		said, err := in.decide(readClusters(t, cfg), "10.244.0.0/16")
		if err != nil || !strings.Contains(strings.Join(said, "\n"), "this install replaces it") {
			t.Fatalf("%v, said %q", err, said)
		}
	})
	t.Run("rendered again on a cluster it was installed on", func(t *testing.T) {
		// The install turns externalCloudProvider on and adds its own inline
		// manifest: neither is another cloud controller (from a review).
		in := base()
		in.Clusters = readClusters(t, asResource(cp14), w14)
		if _, err := in.decide(in.Clusters, "10.244.0.0/16"); err != nil {
			t.Fatal(err)
		}
		files, err := in.Render(deployDir, extensionDir)
		if err != nil {
			t.Fatal(err)
		}
		cfg := cp14
		for _, c := range in.Clusters {
			if c.Type == machine.TypeControlPlane {
				patched, err := applyPatch(c.config, files[InstallControlPlane])
				if err != nil {
					t.Fatal(err)
				}
				cfg = patched
			}
		}
		again := base()
		if _, err := again.decide(readClusters(t, cfg), "10.244.0.0/16"); err != nil {
			t.Fatalf("rendering again after the install: %v", err)
		}
	})
	t.Run("not a machine configuration", func(t *testing.T) {
		if _, err := ReadCluster("x.yaml", []byte("apiVersion: v1\nkind: ConfigMap\n")); err == nil || !strings.Contains(err.Error(), "talosctl -n <node> get mc -o yaml") {
			t.Fatalf("%v", err)
		}
	})
}

// TestREADMEPrefillsNoAnswer: the README's and docs' install commands hold no answer
// the renderer reads from the cluster (it once pre-filled
// WORKLOAD_ISOLATION=off, which broke every cluster created with 1.14).
func TestREADMEPrefillsNoAnswer(t *testing.T) {
	docs, _ := filepath.Glob("../../docs/*.md")
	for _, doc := range append([]string{"../../README.md"}, docs...) {
		b, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		for _, answer := range []string{"WORKLOAD_ISOLATION", "TALOS_CONFIG=", "MODE=container make", "IsolationOff"} {
			if strings.Contains(string(b), answer) {
				t.Errorf("%s holds %q: the renderer reads it from MACHINE_CONFIG", doc, answer)
			}
		}
	}
}

// TestSignerRate: SIGNER_QPS sets kube-controller-manager's client rate on
// the control-plane nodes, beside allocate-node-cidrs, in either form.
func TestSignerRate(t *testing.T) {
	for _, form := range []Form{FormMultidoc, FormV1Alpha1} {
		in := Install{Form: form, Mode: ModeContainer, Coordinator: "registry.example.com/nodeinit-coordinator", AgentImage: "registry.example.com/nodeinit-agent-pod:v1", SignerQPS: 200}
		files, err := in.Render(deployDir, extensionDir)
		if err != nil {
			t.Fatal(err)
		}
		name := InstallControlPlane
		if form == FormV1Alpha1 {
			name = InstallAll
		}
		for _, want := range []string{"kube-api-qps: \"200\"", "kube-api-burst: \"400\"", "allocate-node-cidrs: \"false\""} {
			if !strings.Contains(string(files[name]), want) {
				t.Errorf("%s %s lacks %s", form, name, want)
			}
		}
	}
}

// applyPatch applies patch to cfg as `talosctl patch mc` does.
func applyPatch(cfg, patch []byte) ([]byte, error) {
	p, err := configpatcher.LoadPatch(patch)
	if err != nil {
		return nil, err
	}
	out, err := configpatcher.Apply(configpatcher.WithBytes(cfg), []configpatcher.Patch{p})
	if err != nil {
		return nil, err
	}
	return out.Bytes()
}
