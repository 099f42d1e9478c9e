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
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// CoordinatorImage is the image coordinator/deploy names; its kustomization
// pins the tag.
const CoordinatorImage = "ghcr.io/talos-nodeinit/nodeinit-coordinator"

func main() {
	if len(os.Args) > 1 && os.Args[1] == "install" {
		os.Exit(installMain(os.Args[2:]))
	}
	if len(os.Args) > 1 && os.Args[1] == "release" {
		os.Exit(releaseMain(os.Args[2:]))
	}
	deploy := flag.String("deploy", "../../coordinator/deploy", "the kustomization `DIR` to render")
	out := flag.String("out", "../../bin/manifests", "output `DIR`")
	image := flag.String("image", "", "the `REPOSITORY` you pushed the coordinator image to; the tag is the release (required: nothing is published yet)")
	flag.Parse()
	if *image == "" {
		fmt.Fprintf(os.Stderr, "manifests: IMAGE=REPO is required: the repository you pushed the coordinator image to (make images, then push it).\n"+
			"Nothing is published under %s yet, so a Deployment naming it would never start;\n"+
			"IMAGE=%s renders that name anyway.\n", CoordinatorImage, CoordinatorImage)
		os.Exit(2)
	}
	files, err := Write(*deploy, *out, CoordinatorImage, *image)
	if err != nil {
		fmt.Fprintf(os.Stderr, "manifests: %v\n", err)
		os.Exit(1)
	}
	for _, f := range files {
		fmt.Println(f)
	}
}

// installMain is `make install-patch`: the patches that install
// talos-nodeinit, rendered from the user's settings and validated with
// Talos's machinery before they are written.
func installMain(args []string) int {
	fs := flag.NewFlagSet("install", flag.ContinueOnError)
	deploy := fs.String("deploy", "../../coordinator/deploy", "the coordinator's kustomization `DIR`")
	extension := fs.String("extension", "../../extension", "the shipped agent documents' `DIR`")
	out := fs.String("out", "../../bin/install", "output `DIR`")
	machineConfigs := fs.String("machine-config", "", "comma-separated `FILES`: the cluster's own machine configurations (`talosctl -n <node> get mc -o yaml`, a control-plane node's and a worker's), and the Talos version they run (`talosctl -n <node> get version -o yaml`); the form, mode and checks are read from them")
	form := fs.String("form", "", "how the cluster's machine config is written: multidoc (created with Talos 1.14) or v1alpha1 (created with 1.13 or earlier); read from -machine-config when given")
	mode := fs.String("mode", "", "container (Talos 1.14 ContainerConfig: no image rebuild, no reboot) or extension; read from -machine-config when given (default container)")
	image := fs.String("image", "", "the `REPOSITORY` you pushed the coordinator image to (required)")
	agentImage := fs.String("agent-image", "", "the agent image `REF` you pushed (required with -mode container)")
	rulesFile := fs.String("rules", "", "a rules `FILE` (Talos CCM's transformations); none when empty")
	configFile := fs.String("coordinator-config", "", "the coordinator's coordinator.yaml `FILE`; the shipped one when empty")
	env := fs.String("env", "", "the agent's settings, space-separated NODEINIT_NAME=value")
	signerQPS := fs.Int("signer-qps", 0, "kube-controller-manager's client `QPS` (--kube-api-qps, burst twice it); 0: Talos's default, 20, which caps how fast certificates are signed in a join storm")
	migrating := fs.String("migrating", "", "talos-ccm: this install replaces Talos CCM, which MACHINE_CONFIG still installs (docs/migrating.md)")
	replicas := fs.String("replicas", "", "the coordinator's `N` of replicas (default: as shipped, 2); 1 on a cluster with one control-plane node")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	n := 0
	if *replicas != "" {
		var err error
		if n, err = strconv.Atoi(*replicas); err != nil || n < 1 {
			fmt.Fprintf(os.Stderr, "install: REPLICAS=%s: want 1 or more\n", *replicas)
			return 2
		}
	}
	if *migrating != "" && *migrating != "talos-ccm" {
		fmt.Fprintf(os.Stderr, "install: MIGRATING=%s: want talos-ccm\n", *migrating)
		return 2
	}
	in := Install{Form: Form(*form), Mode: Mode(*mode), Coordinator: *image, AgentImage: *agentImage, Env: strings.Fields(*env), Replicas: n, ReplacesTalosCCM: *migrating == "talos-ccm", SignerQPS: *signerQPS}
	var err error
	if *rulesFile != "" {
		if in.Rules, err = os.ReadFile(*rulesFile); err != nil {
			fmt.Fprintf(os.Stderr, "install: RULES: %v\n", err)
			return 2
		}
	}
	if *configFile != "" {
		if in.CoordinatorConfig, err = os.ReadFile(*configFile); err != nil {
			fmt.Fprintf(os.Stderr, "install: CONFIG: %v\n", err)
			return 2
		}
	}
	if *machineConfigs != "" {
		for _, f := range strings.Split(*machineConfigs, ",") {
			raw, err := os.ReadFile(f)
			if err != nil {
				fmt.Fprintf(os.Stderr, "install: MACHINE_CONFIG: %v\n", err)
				return 2
			}
			if v, ok := ReadVersion(raw); ok {
				in.Running = v
				continue
			}
			c, err := ReadCluster(f, raw)
			if err != nil {
				fmt.Fprintf(os.Stderr, "install: MACHINE_CONFIG: %v\n", err)
				return 2
			}
			in.Clusters = append(in.Clusters, c)
		}
		if len(in.Clusters) == 0 {
			fmt.Fprintln(os.Stderr, "install: MACHINE_CONFIG holds no machine configuration: add `talosctl -n <a control-plane node> get mc -o yaml > cp.yaml` and a worker's")
			return 2
		}
		pool, err := in.ipv4Pool(*deploy)
		if err != nil {
			fmt.Fprintf(os.Stderr, "install: %v\n", err)
			return 1
		}
		said, err := in.decide(in.Clusters, pool)
		for _, s := range said {
			fmt.Println("decided: " + s)
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "install: refused, nothing written:\n%v\n", err)
			return 1
		}
	} else {
		if in.Form == "" {
			in.Form = FormMultidoc
		}
		if in.Mode == "" {
			in.Mode = ModeContainer
		}
		fmt.Println("no MACHINE_CONFIG: the form (" + string(in.Form) + ") and mode (" + string(in.Mode) + ") are as given or defaulted, not read from your cluster; " +
			"give MACHINE_CONFIG=cp.yaml,worker.yaml (talosctl -n <node> get mc -o yaml > cp.yaml) to have them read and checked")
	}
	files, err := in.Render(*deploy, *extension)
	if err != nil {
		fmt.Fprintf(os.Stderr, "install: %v\n", err)
		return 1
	}
	if in.Mode == ModeContainer && !strings.Contains(in.AgentImage, "@sha256:") {
		fmt.Fprintf(os.Stderr, "warning: AGENT_IMAGE=%s is a tag: whoever can push that tag runs code on every node with the node's kubelet credentials and machined access. "+
			"Pin it by digest: AGENT_IMAGE=%s@sha256:<digest> (crane digest %s)\n", in.AgentImage, strings.SplitN(in.AgentImage, ":", 2)[0], in.AgentImage)
	}
	for _, stale := range []string{InstallAll, InstallControlPlane, InstallWorker, InstallRemove, InstallObjects} {
		_ = os.Remove(filepath.Join(*out, stale)) // an earlier render's, of another form
	}
	if err := os.MkdirAll(*out, 0o755); err != nil {
		fmt.Fprintf(os.Stderr, "install: %v\n", err)
		return 1
	}
	names := slices.Sorted(maps.Keys(files))
	for _, name := range names {
		path := filepath.Join(*out, name)
		if err := os.WriteFile(path, files[name], 0o644); err != nil {
			fmt.Fprintf(os.Stderr, "install: %v\n", err)
			return 1
		}
	}
	fmt.Printf("validated with Talos's machinery against a generated %s config (%s, on metal and in container mode); apply with:\n", in.Form, map[bool]string{true: "every node", false: "control plane and workers"}[in.Form == FormV1Alpha1])
	if in.Form == FormMultidoc {
		fmt.Printf("  talosctl -n <control-plane nodes> patch mc --patch @%s\n", filepath.Join(*out, InstallControlPlane))
		fmt.Printf("  talosctl -n <worker nodes> patch mc --patch @%s\n", filepath.Join(*out, InstallWorker))
	} else {
		fmt.Printf("  talosctl -n <every node> patch mc --patch @%s\n", filepath.Join(*out, InstallAll))
	}
	fmt.Println(upgradeHint(in.Mode == ModeContainer || in.Form == FormMultidoc))
	fmt.Printf("uninstall: talosctl -n <every node> patch mc --patch @%s (its header says what it leaves)\n", filepath.Join(*out, InstallRemove))
	return 0
}

// releaseMain is `make release`: push the images and the chart, write the
// install assets pinned by digest.
func releaseMain(args []string) int {
	fs := flag.NewFlagSet("release", flag.ContinueOnError)
	p := Publish{}
	fs.StringVar(&p.Version, "version", "", "the release `TAG` (vX.Y.Z)")
	fs.StringVar(&p.Registry, "registry", "", "`HOST[:PORT]/PATH` to push to")
	fs.StringVar(&p.Bin, "bin", "../../bin", "make's BIN `DIR` (images/ and extension/oci built)")
	fs.StringVar(&p.Deploy, "deploy", "../../coordinator/deploy", "the coordinator's kustomization `DIR`")
	fs.StringVar(&p.Chart, "chart", "../../coordinator/chart/nodeinit-coordinator", "the Helm chart `DIR`")
	fs.StringVar(&p.Extdir, "extension", "../../extension", "the shipped agent documents' `DIR`")
	fs.StringVar(&p.Out, "out", "../../bin/release", "where the release assets go")
	fs.StringVar(&p.SignKey, "sign-key", "", "a cosign private key `FILE`: sign every image and the chart, and verify (COSIGN_PASSWORD: its password)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	pub, err := p.Run()
	if err != nil {
		fmt.Fprintf(os.Stderr, "release: %v\n", err)
		return 1
	}
	for _, x := range pub {
		fmt.Printf("pushed %s@%s\n", x.Ref, x.Digest)
	}
	fmt.Printf("assets (pinned by digest) in %s\n", p.Out)
	return 0
}
