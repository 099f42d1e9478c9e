package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	talosconfig "github.com/siderolabs/talos/pkg/machinery/config"
	"github.com/siderolabs/talos/pkg/machinery/config/configpatcher"
	"github.com/siderolabs/talos/pkg/machinery/config/encoder"
	"github.com/siderolabs/talos/pkg/machinery/config/generate"
	"github.com/siderolabs/talos/pkg/machinery/config/machine"

	"github.com/talos-nodeinit/talos-nodeinit/pkg/harness/gobuild"
	"github.com/talos-nodeinit/talos-nodeinit/pkg/rulesource"
)

const extensionDir = "../../extension"

var inputs = map[Form]*generate.Input{}

// installed applies the patches in turn, as successive `talosctl patch
// mc` calls do, to a config of the form for a node of typ, and returns the
// validated result.
func installed(t *testing.T, form Form, typ machine.Type, patches ...[]byte) (talosconfig.Provider, error) {
	t.Helper()
	contract := talosconfig.TalosVersion1_13
	if form == FormMultidoc {
		contract = talosconfig.TalosVersion1_14
	}
	// One generated cluster per form: configs compare equal when the
	// patches leave them so.
	in, ok := inputs[form]
	if !ok {
		var err error
		if in, err = generate.NewInput("nodeinit", "https://10.5.0.1:6443", "1.37.0", generate.WithVersionContract(contract)); err != nil {
			t.Fatal(err)
		}
		inputs[form] = in
	}
	cfg, err := in.Config(typ)
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range patches {
		p, err := configpatcher.LoadPatch(b)
		if err != nil {
			return nil, err
		}
		out, err := configpatcher.Apply(configpatcher.WithConfig(cfg), []configpatcher.Patch{p})
		if err != nil {
			return nil, err
		}
		if cfg, err = out.Config(); err != nil {
			return nil, err
		}
		for _, m := range []validationMode{{}, {container: true}} {
			if _, err := cfg.Validate(m); err != nil {
				return nil, err
			}
		}
	}
	return cfg, nil
}

// nodeinitDocs is what of talos-nodeinit a config holds: the coordinator's
// manifests and the agent's documents, by kind and name, with the agent
// image and rules.
type nodeinitDocs struct {
	manifests, agents []string
	image, rules      string
}

func docsOf(cfg talosconfig.Provider) nodeinitDocs {
	var d nodeinitDocs
	for _, m := range cfg.K8sInlineManifestConfigs() {
		d.manifests = append(d.manifests, m.Name())
	}
	for _, c := range cfg.ContainerConfigs() {
		d.agents = append(d.agents, "ContainerConfig/"+c.Name())
		d.image = c.Image()
	}
	for _, e := range cfg.ExtensionServiceConfigs() {
		d.agents = append(d.agents, "ExtensionServiceConfig/"+e.Name())
		d.rules = e.ConfigFiles()[0].Content()
	}
	for _, f := range cfg.EtcFileConfigs() {
		if f.Name() == rulesource.EtcFileName {
			d.rules = f.Content()
		}
	}
	return d
}

// Every form and mode renders patches Talos accepts, and they behave as
// the README says under Talos's own patcher and validators: applying one
// again changes nothing, a newer one replaces the old (no duplicate),
// the uninstall patch removes every document the install added, and a
// reinstall works; applying the other form's patch is refused.
func TestInstallPatches(t *testing.T) {
	const rulesA = "transformations:\n  - name: a\n    labels: {example.com/a: \"1\"}\n"
	const rulesB = "transformations:\n  - name: b\n    labels: {example.com/b: \"1\"}\n"
	for _, form := range []Form{FormMultidoc, FormV1Alpha1} {
		for _, mode := range []Mode{ModeContainer, ModeExtension} {
			t.Run(string(form)+"/"+string(mode), func(t *testing.T) {
				render := func(agentImage, rules string) map[string][]byte {
					t.Helper()
					in := Install{Form: form, Mode: mode, Coordinator: "registry.example.com/nodeinit-coordinator", Rules: []byte(rules),
						Env: []string{"NODEINIT_PROVIDER_ID_POLICY=talos-fallback"}}
					if mode == ModeContainer {
						in.AgentImage = agentImage
					}
					files, err := in.Render(deployDir, extensionDir)
					if err != nil {
						t.Fatal(err)
					}
					return files
				}
				a, b := render("registry.example.com/nodeinit-agent:v0.1.0", rulesA), render("registry.example.com/nodeinit-agent@sha256:"+strings.Repeat("b", 64), rulesB)
				types := map[machine.Type]string{machine.TypeControlPlane: InstallAll, machine.TypeWorker: InstallAll}
				if form == FormMultidoc {
					types = map[machine.Type]string{machine.TypeControlPlane: InstallControlPlane, machine.TypeWorker: InstallWorker}
				}
				named := mode == ModeContainer || form == FormMultidoc
				wantAgent := "ExtensionServiceConfig/nodeinit-agent"
				if mode == ModeContainer {
					wantAgent = "ContainerConfig/nodeinit-agent"
				}
				for typ, name := range types {
					one, err := installed(t, form, typ, a[name])
					if err != nil {
						t.Fatalf("%s on a %s: %v", name, typ, err)
					}
					got := docsOf(one)
					if strings.Join(got.manifests, ",") != InlineManifestName || strings.Join(got.agents, ",") != wantAgent || got.rules != rulesA {
						t.Errorf("%s installed: %+v", typ, got)
					}
					if !one.Cluster().ExternalCloudProvider().Enabled() || strings.Join(one.K8sKubeletConfig().ExtraArgs()["rotate-server-certificates"], "") != "true" {
						t.Errorf("%s: external cloud provider %v, kubelet args %v", typ, one.Cluster().ExternalCloudProvider().Enabled(), one.K8sKubeletConfig().ExtraArgs())
					}
					if typ == machine.TypeControlPlane && strings.Join(one.K8sControllerManagerConfig().ExtraArgs()["allocate-node-cidrs"], "") != "false" {
						t.Errorf("control plane: allocate-node-cidrs %v", one.K8sControllerManagerConfig().ExtraArgs())
					}
					uninstall := a[InstallRemove]
					if named {
						// Again: nothing changes.
						twice, err := installed(t, form, typ, a[name], a[name])
						if err != nil {
							t.Fatalf("%s twice: %v", name, err)
						}
						if !sameConfig(t, one, twice) {
							t.Errorf("%s: applying %s again changed the config", typ, name)
						}
						// A newer one replaces.
						upgraded, err := installed(t, form, typ, a[name], b[name])
						if err != nil {
							t.Fatalf("%s, then a newer one: %v", name, err)
						}
						if got := docsOf(upgraded); len(got.manifests) != 1 || len(got.agents) != 1 || got.rules != rulesB || mode == ModeContainer && !strings.Contains(got.image, "@sha256:") {
							t.Errorf("%s upgraded: %+v", typ, got)
						}
					} else {
						// Talos appends cluster.inlineManifests: the header says
						// to give the uninstall patch first, in the same command.
						if _, err := installed(t, form, typ, a[name], a[name]); err == nil || !strings.Contains(err.Error(), "duplicate") {
							t.Errorf("%s twice: %v, want Talos's duplicate refusal (the header says so)", name, err)
						}
						if !bytes.Contains(a[name], []byte("with "+InstallRemove+" first in the same command")) {
							t.Errorf("%s does not say how to upgrade", name)
						}
						upgraded, err := installed(t, form, typ, a[name], uninstall, b[name])
						if err != nil {
							t.Fatalf("%s, uninstall, newer: %v", name, err)
						}
						if got := docsOf(upgraded); len(got.manifests) != 1 || got.rules != rulesB {
							t.Errorf("%s upgraded: %+v", typ, got)
						}
					}
					removed, err := installed(t, form, typ, a[name], uninstall)
					if err != nil {
						t.Fatalf("%s, then %s: %v", name, InstallRemove, err)
					}
					if got := docsOf(removed); len(got.manifests)+len(got.agents) != 0 {
						t.Errorf("%s after uninstall still holds %+v", typ, got)
					}
					if _, err := installed(t, form, typ, a[name], uninstall, a[name]); err != nil {
						t.Errorf("reinstall: %v", err)
					}
				}
			})
		}
	}
	// Each form's patch on the other's cluster: Talos refuses it.
	in := Install{Form: FormMultidoc, Mode: ModeContainer, Coordinator: "registry.example.com/nodeinit-coordinator", AgentImage: "registry.example.com/nodeinit-agent:v1"}
	multi, err := in.Render(deployDir, extensionDir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := installed(t, FormV1Alpha1, machine.TypeWorker, multi[InstallWorker]); err == nil || !strings.Contains(err.Error(), "already set") {
		t.Errorf("the multidoc patch on a v1alpha1 config: %v, want refused", err)
	}
	in.Form = FormV1Alpha1
	v1, err := in.Render(deployDir, extensionDir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := installed(t, FormMultidoc, machine.TypeWorker, v1[InstallAll]); err == nil || !strings.Contains(err.Error(), "already set") {
		t.Errorf("the v1alpha1 patch on a multidoc config: %v, want refused", err)
	}
}

// sameConfig: the two configs hold the same documents (in any order: a
// replaced document moves to the end).
func sameConfig(t *testing.T, a, b talosconfig.Provider) bool {
	t.Helper()
	docs := func(c talosconfig.Provider) []string {
		out, err := c.EncodeBytes(encoder.WithComments(encoder.CommentsDisabled))
		if err != nil {
			t.Fatal(err)
		}
		d := strings.Split(string(out), "\n---\n")
		slices.Sort(d)
		return d
	}
	da, db := docs(a), docs(b)
	if !slices.Equal(da, db) {
		t.Logf("documents differ:\n%s\nvs\n%s", strings.Join(da, "\n---\n"), strings.Join(db, "\n---\n"))
		return false
	}
	return true
}

// Bad input is refused with what to do, before anything is written.
func TestInstallRefuses(t *testing.T) {
	ok := Install{Form: FormMultidoc, Mode: ModeContainer, Coordinator: "registry.example.com/nodeinit-coordinator", AgentImage: "registry.example.com/nodeinit-agent:v1"}
	for _, tc := range []struct {
		name string
		edit func(*Install)
		want string
	}{
		{"no coordinator image", func(i *Install) { i.Coordinator = "" }, "IMAGE is required"},
		{"a coordinator image with a tag", func(i *Install) { i.Coordinator = "r.example.com/c:v1" }, "want a repository without a tag"},
		{"no agent image", func(i *Install) { i.AgentImage = "" }, "AGENT_IMAGE is required with MODE=container"},
		{"an agent image for the extension", func(i *Install) { i.Mode = ModeExtension }, "AGENT_IMAGE is for MODE=container"},
		{"an unknown form", func(i *Install) { i.Form = "1.14" }, `TALOS_CONFIG="1.14": want multidoc`},
		{"an unknown mode", func(i *Install) { i.Mode = "pod" }, `MODE="pod"`},
		{"bad rules", func(i *Install) { i.Rules = []byte("transformations:\n  - name: x\n    labels: [a]\n") }, "RULES: "},
		{"a bad setting", func(i *Install) { i.Env = []string{"PROVIDER_ID_POLICY=never"} }, "want NODEINIT_NAME=value"},
		{"a bad coordinator configuration", func(i *Install) { i.CoordinatorConfig = []byte("clusterName: \"bad name!\"\n") }, "the coordinator's configuration"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := ok
			tc.edit(&in)
			_, err := in.Render(deployDir, extensionDir)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Render: %v, want an error containing %q", err, tc.want)
			}
		})
	}
	// The command writes nothing when it refuses.
	out := filepath.Join(t.TempDir(), "install")
	if code := installMain([]string{"-deploy", deployDir, "-extension", extensionDir, "-out", out, "-image", "registry.example.com/nodeinit-coordinator"}); code != 1 {
		t.Errorf("install without -agent-image: exit %d, want 1", code)
	}
	if _, err := os.Stat(out); !os.IsNotExist(err) {
		t.Errorf("install refused but wrote %s: %v", out, err)
	}
}

// `nodeinit-agent validate` accepts what the installer wrote: it finds the
// rules in every file (the EtcFileConfig or the ExtensionServiceConfig
// among the other documents) and the settings in its environment.
func TestAgentValidatesTheInstallPatches(t *testing.T) {
	agent := gobuild.Binary(t, "../../agent")
	rules, err := os.ReadFile("../../agent/testdata/talos-ccm-rules.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, mode := range []Mode{ModeContainer, ModeExtension} {
		in := Install{Form: FormMultidoc, Mode: mode, Coordinator: "registry.example.com/nodeinit-coordinator", Rules: rules, Env: []string{"NODEINIT_PROVIDER_ID_POLICY=talos-fallback"}}
		if mode == ModeContainer {
			in.AgentImage = "registry.example.com/nodeinit-agent:v1"
		}
		files, err := in.Render(deployDir, extensionDir)
		if err != nil {
			t.Fatal(err)
		}
		dir := t.TempDir()
		for _, name := range []string{InstallControlPlane, InstallWorker} {
			path := filepath.Join(dir, name)
			if err := os.WriteFile(path, files[name], 0o644); err != nil {
				t.Fatal(err)
			}
			out, err := exec.Command(agent, "validate", "--rules-file", path).CombinedOutput()
			if err != nil || !strings.Contains(string(out), "2 rules") {
				t.Errorf("%s (%s): nodeinit-agent validate: %v\n%s", name, mode, err, out)
			}
		}
	}
}

// Every `make install-patch` command the README gives, as written there,
// renders the files it says: the install's (its rules and configuration
// files made here) and the migration walk-through's (its files made as the
// walk-through makes them: `nodeinit-agent migrate` of its Talos CCM
// ConfigMap).
func TestREADMEInstallPatchCommand(t *testing.T) {
	text := ""
	for _, doc := range []string{"../../README.md", "../../docs/install.md", "../../docs/migrating.md"} {
		b, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		text += string(b)
	}
	var cmds []string
	for _, line := range strings.Split(strings.ReplaceAll(text, "\\\n", ""), "\n") {
		if l := strings.TrimSpace(line); strings.HasPrefix(l, "make install-patch ") && !slices.Contains(cmds, strings.Join(strings.Fields(l), " ")) {
			cmds = append(cmds, strings.Join(strings.Fields(l), " "))
		}
	}
	if len(cmds) != 3 {
		t.Fatalf("the README and docs give %d `make install-patch` commands, want the install's on Talos 1.14 and on 1.13, and the migration's: %q", len(cmds), cmds)
	}
	dir := t.TempDir()
	write := func(name, content string) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		return path
	}
	files := map[string]string{
		"my-rules.yaml":       write("my-rules.yaml", "transformations:\n  - name: web\n    labels: {example.com/tier: web}\n"),
		"my-coordinator.yaml": write("my-coordinator.yaml", "adoptExisting: true\nipam: {ipv4Pool: 10.244.0.0/16}\n"),
	}
	// The walk-through's ConfigMap, converted as its step 2 does.
	start := strings.Index(text, "```yaml\n# ccm-configmap.yaml\n")
	if start < 0 {
		t.Fatal("the README's walk-through has no ccm-configmap.yaml block")
	}
	block := text[start+len("```yaml\n"):]
	block = block[:strings.Index(block, "```")]
	agent := gobuild.Binary(t, "../../agent")
	cm := write("ccm-configmap.yaml", block)
	migrated, err := exec.Command(agent, "migrate", "--from-talos-ccm", cm, "--coordinator-out", filepath.Join(dir, "coordinator-fragment.yaml")).Output()
	if err != nil {
		t.Fatalf("nodeinit-agent migrate: %v", err)
	}
	files["nodeinit-rules.yaml"] = write("nodeinit-rules.yaml", string(migrated))
	files["coordinator-fragment.yaml"] = filepath.Join(dir, "coordinator-fragment.yaml")
	// The cluster's own configurations, as Talos generates them: created
	// with 1.14 for the install; created with 1.13 and upgraded to 1.14 for
	// the migration (a cluster that ran Talos CCM long enough).
	upgraded := func(s string) string {
		s = strings.Replace(s, "\n    install:\n", "\n    install:\n        image: ghcr.io/siderolabs/installer:v1.14.1\n", 1)
		return strings.Replace(s, "\ncluster:\n", "\ncluster:\n    externalCloudProvider:\n        enabled: true\n        manifests:\n            - https://raw.githubusercontent.com/siderolabs/talos-cloud-controller-manager/main/docs/deploy/cloud-controller-manager.yml\n", 1)
	}
	version := func(v string) string {
		return write("version-"+v+".yaml", "node: 10.5.0.2\nmetadata:\n    namespace: runtime\n    type: Versions.runtime.talos.dev\n    id: version\n    version: 1\n    phase: running\nspec:\n    name: Talos\n    version: "+v+"\n")
	}
	on113 := func(s string) string {
		return strings.Replace(s, "\n    install:\n", "\n    install:\n        image: ghcr.io/siderolabs/installer:v1.13.9\n", 1)
	}
	// Each command's cluster: created with 1.14; created with 1.13 and
	// running it (no AGENT_IMAGE: the extension); created with 1.13 and
	// upgraded to 1.14, with Talos CCM (the migration).
	clusters := map[string][3]string{
		"1.14":      {write("cp14.yaml", string(asResource(generated(t, talosconfig.TalosVersion1_14, machine.TypeControlPlane, nil)))), write("w14.yaml", string(generated(t, talosconfig.TalosVersion1_14, machine.TypeWorker, nil))), version("v1.14.1")},
		"1.13":      {write("cp13.yaml", string(generated(t, talosconfig.TalosVersion1_13, machine.TypeControlPlane, on113))), write("w13.yaml", string(generated(t, talosconfig.TalosVersion1_13, machine.TypeWorker, on113))), version("v1.13.9")},
		"migration": {write("cp13u.yaml", string(generated(t, talosconfig.TalosVersion1_13, machine.TypeControlPlane, upgraded))), write("w13u.yaml", string(generated(t, talosconfig.TalosVersion1_13, machine.TypeWorker, upgraded))), version("v1.14.1")},
	}
	for i, cmd := range cmds {
		kind := "1.14"
		switch {
		case strings.Contains(cmd, "MIGRATING=talos-ccm"):
			kind = "migration"
		case !strings.Contains(cmd, "AGENT_IMAGE="):
			kind = "1.13"
		}
		out := filepath.Join(dir, strconv.Itoa(i))
		args := []string{"-C", "../..", "-s", "BIN=" + out}
		for _, f := range strings.Fields(strings.TrimPrefix(cmd, "make "))[1:] {
			if k, v, ok := strings.Cut(f, "="); ok && files[v] != "" {
				f = k + "=" + files[v]
			}
			if k, v, ok := strings.Cut(f, "="); ok && k == "MACHINE_CONFIG" {
				if v != "cp.yaml,worker.yaml,version.yaml" {
					t.Fatalf("%s: MACHINE_CONFIG=%s, want cp.yaml,worker.yaml,version.yaml (the version decides the mode)", cmd, v)
				}
				c := clusters[kind]
				f = k + "=" + strings.Join(c[:], ",")
			}
			args = append(args, f)
		}
		args = append(args, "install-patch")
		output, err := exec.Command("make", args...).CombinedOutput()
		if err != nil {
			t.Fatalf("%s: %v\n%s", cmd, err, output)
		}
		want, others := InstallWorker, []string{InstallControlPlane, InstallRemove, InstallObjects}
		if kind != "1.14" {
			want, others = InstallAll, []string{InstallRemove, InstallObjects}
		}
		if !strings.Contains(string(output), "decided: config form") {
			t.Errorf("%s: the renderer did not say what it read from the cluster:\n%s", cmd, output)
		}
		worker, err := os.ReadFile(filepath.Join(out, "install", want))
		if err != nil {
			t.Fatalf("%s: %v\n%s", cmd, err, output)
		}
		for _, f := range others {
			if _, err := os.Stat(filepath.Join(out, "install", f)); err != nil {
				t.Errorf("%s: %v", cmd, err)
			}
		}
		if !bytes.Contains(worker, []byte("adoptExisting: true")) {
			t.Errorf("%s: the coordinator's configuration did not reach %s", cmd, want)
		}
		if strings.Contains(cmd, "nodeinit-rules.yaml") && !bytes.Contains(worker, []byte("NODEINIT_PROVIDER_ID_POLICY=talos-fallback")) {
			t.Errorf("%s: the migrated provider-ID policy did not reach the agent's environment", cmd)
		}
		if !strings.Contains(string(output), "patch mc --patch @"+filepath.Join(out, "install", want)) {
			t.Errorf("%s does not print the talosctl commands:\n%s", cmd, output)
		}
	}
}

// RULES takes what `nodeinit-agent migrate` writes (an
// ExtensionServiceConfig with its environment) as well as a bare rules
// file: its rules and settings reach the agent, ENV after them.
func TestInstallTakesMigratedRules(t *testing.T) {
	migrated := []byte(`apiVersion: v1alpha1
kind: ExtensionServiceConfig
name: nodeinit-agent
configFiles:
  - mountPath: /usr/local/etc/nodeinit/rules.yaml
    content: |
      global:
        betaTopologyLabels: true
      transformations:
        - name: web
          labels: {example.com/tier: frontend}
environment:
  - NODEINIT_PROVIDER_ID_POLICY=talos-fallback
`)
	in := Install{Form: FormMultidoc, Mode: ModeContainer, Coordinator: "registry.example.com/nodeinit-coordinator",
		AgentImage: "registry.example.com/nodeinit-agent-pod:v1", Rules: migrated, Env: []string{"NODEINIT_LOG_FORMAT=json"}}
	files, err := in.Render(deployDir, extensionDir)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := installed(t, FormMultidoc, machine.TypeWorker, files[InstallWorker])
	if err != nil {
		t.Fatal(err)
	}
	got := docsOf(cfg)
	if !strings.Contains(got.rules, "betaTopologyLabels: true") || !strings.Contains(got.rules, "example.com/tier: frontend") || strings.Contains(got.rules, "configFiles") {
		t.Errorf("rules in the EtcFileConfig:\n%s", got.rules)
	}
	env := cfg.ContainerConfigs()[0].Environment()
	if strings.Join(env, " ") != "NODEINIT_PROVIDER_ID_POLICY=talos-fallback NODEINIT_LOG_FORMAT=json" {
		t.Errorf("the container's environment %q", env)
	}
	in.Rules = []byte("replicaCount: 1\ntransformations: []\n")
	if _, err := in.Render(deployDir, extensionDir); err == nil || !strings.Contains(err.Error(), "nodeinit-agent migrate") {
		t.Errorf("Talos CCM's Helm values as RULES: %v, want a pointer to migrate", err)
	}
}

// CONFIG may be the coordinator's ConfigMap (coordinator/deploy/configmap.yaml,
// what `nodeinit-coordinator validate --config` also reads) as well as the
// coordinator.yaml it holds.
func TestInstallTakesTheConfigMap(t *testing.T) {
	cm, err := os.ReadFile(filepath.Join(deployDir, "configmap.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	cm = bytes.Replace(cm, []byte("adoptExisting: false"), []byte("adoptExisting: true"), 1)
	in := Install{Form: FormV1Alpha1, Mode: ModeExtension, Coordinator: "registry.example.com/nodeinit-coordinator", CoordinatorConfig: cm}
	files, err := in.Render(deployDir, extensionDir)
	if err != nil {
		t.Fatal(err)
	}
	b := files[InstallAll]
	if !bytes.Contains(b, []byte("adoptExisting: true")) || bytes.Contains(b, []byte("coordinator.yaml: |\n        apiVersion")) {
		t.Errorf("the ConfigMap's coordinator.yaml did not become the coordinator's configuration")
	}
}

// REPLICAS sets the coordinator Deployment's replicas in every file that
// carries it (a single control-plane node holds one: the replicas share
// the host network), and a count that is not one or more is refused.
func TestInstallSetsReplicas(t *testing.T) {
	in := Install{Form: FormMultidoc, Mode: ModeExtension, Coordinator: "registry.example.com/nodeinit-coordinator", Replicas: 1}
	files, err := in.Render(deployDir, extensionDir)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{InstallControlPlane, InstallObjects} {
		if !regexp.MustCompile(`(?m)^\s*replicas: 1$`).Match(files[name]) || regexp.MustCompile(`(?m)^\s*replicas: 2$`).Match(files[name]) {
			t.Errorf("%s: the Deployment's replicas are not 1", name)
		}
	}
	in.Replicas = -1
	if _, err := in.Render(deployDir, extensionDir); err == nil || !strings.Contains(err.Error(), "REPLICAS=-1") {
		t.Errorf("REPLICAS=-1: %v, want it refused", err)
	}
	// REPLICAS=0 is refused by the command, not taken as unset.
	if code := installMain([]string{"-deploy", deployDir, "-extension", extensionDir, "-out", filepath.Join(t.TempDir(), "out"), "-image", "registry.example.com/nodeinit-coordinator", "-mode", "extension", "-replicas", "0"}); code != 2 {
		t.Errorf("-replicas 0: exit %d, want 2", code)
	}
	// Unset: as shipped.
	in.Replicas = 0
	files, err = in.Render(deployDir, extensionDir)
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`(?m)^\s*replicas: 2$`).Match(files[InstallObjects]) {
		t.Errorf("REPLICAS unset: the shipped two replicas are gone")
	}
}
