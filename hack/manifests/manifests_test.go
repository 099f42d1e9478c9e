package main

import (
	"bytes"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	talosconfig "github.com/siderolabs/talos/pkg/machinery/config"
	"github.com/siderolabs/talos/pkg/machinery/config/configpatcher"
	"github.com/siderolabs/talos/pkg/machinery/config/generate"
	"github.com/siderolabs/talos/pkg/machinery/config/machine"
	"go.yaml.in/yaml/v3"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	"helm.sh/helm/v3/pkg/releaseutil"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
	"sigs.k8s.io/kustomize/kyaml/filesys"

	"github.com/talos-nodeinit/talos-nodeinit/pkg/harness/kubeapply"
	"github.com/talos-nodeinit/talos-nodeinit/pkg/harness/testcluster"
)

const (
	deployDir = "../../coordinator/deploy"
	chartDir  = "../../coordinator/chart/nodeinit-coordinator"
)

// outputs renders the three install files from the repository as shipped:
// the single-file manifest, the Talos patch, and the chart with the values
// given (nil: its defaults) installed in kube-system.
func outputs(t *testing.T) (manifest, patch []byte) {
	t.Helper()
	dir := t.TempDir()
	if _, err := Write(deployDir, dir, CoordinatorImage, ""); err != nil {
		t.Fatal(err)
	}
	manifest, err := os.ReadFile(filepath.Join(dir, "nodeinit-coordinator.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	patch, err = os.ReadFile(filepath.Join(dir, "talos-patch.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	return manifest, patch
}

// output renders the install files and returns one of them.
func output(t *testing.T, name string) []byte {
	t.Helper()
	dir := t.TempDir()
	if _, err := Write(deployDir, dir, CoordinatorImage, ""); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// helmTemplate renders the chart as `helm template -n NAMESPACE` does, in
// Helm's install order.
func helmTemplate(t *testing.T, namespace string, values map[string]any) ([]byte, error) {
	t.Helper()
	chrt, err := loader.Load(chartDir)
	if err != nil {
		t.Fatal(err)
	}
	if err := chrt.Validate(); err != nil {
		t.Fatal(err)
	}
	caps := chartutil.DefaultCapabilities
	vals, err := chartutil.ToRenderValues(chrt, values, chartutil.ReleaseOptions{Name: "nodeinit-coordinator", Namespace: namespace, IsInstall: true, Revision: 1}, caps)
	if err != nil {
		return nil, err
	}
	files, err := engine.Render(chrt, vals)
	if err != nil {
		return nil, err
	}
	var all []string
	for name, content := range files {
		if strings.HasSuffix(name, ".yaml") && strings.TrimSpace(content) != "" {
			all = append(all, fmt.Sprintf("---\n# Source: %s\n%s\n", name, content))
		}
	}
	slices.Sort(all)
	_, manifests, err := releaseutil.SortManifests(releaseutil.SplitManifests(strings.Join(all, "")), caps.APIVersions, releaseutil.InstallOrder)
	if err != nil {
		return nil, err
	}
	var out bytes.Buffer
	for _, m := range manifests {
		fmt.Fprintf(&out, "---\n%s\n", m.Content)
	}
	return out.Bytes(), nil
}

func objects(t *testing.T, what string, data []byte) []*unstructured.Unstructured {
	t.Helper()
	objs, err := kubeapply.Objects(data)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	return objs
}

func key(o *unstructured.Unstructured) string {
	return fmt.Sprintf("%s %s/%s", o.GetKind(), o.GetNamespace(), o.GetName())
}

// normalized is an object without what a chart adds for its own
// bookkeeping (labels, annotations, the pod template's metadata): what
// remains must be the same whichever way it is installed.
func normalized(o *unstructured.Unstructured) map[string]any {
	c := o.DeepCopy()
	unstructured.RemoveNestedField(c.Object, "metadata", "labels")
	unstructured.RemoveNestedField(c.Object, "metadata", "annotations")
	unstructured.RemoveNestedField(c.Object, "spec", "template", "metadata")
	return c.Object
}

func byKey(objs []*unstructured.Unstructured) map[string]*unstructured.Unstructured {
	m := map[string]*unstructured.Unstructured{}
	for _, o := range objs {
		m[key(o)] = o
	}
	return m
}

func deployment(t *testing.T, objs []*unstructured.Unstructured) *appsv1.Deployment {
	t.Helper()
	for _, o := range objs {
		if o.GetKind() == "Deployment" {
			var d appsv1.Deployment
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &d); err != nil {
				t.Fatal(err)
			}
			return &d
		}
	}
	t.Fatal("no Deployment")
	return nil
}

// inlineManifest applies the Talos patch to a generated machine config of
// the given type and returns the validated config's inline manifest.
// contract is the Talos version the cluster was created with (its config's form).
func talosConfig(t *testing.T, typ machine.Type, contract *talosconfig.VersionContract, patches ...[]byte) (inline []byte, cloudProvider bool, cmArgs map[string][]string) {
	t.Helper()
	in, err := generate.NewInput("nodeinit", "https://10.5.0.1:6443", "1.36.3", generate.WithVersionContract(contract))
	if err != nil {
		t.Fatal(err)
	}
	base, err := in.Config(typ)
	if err != nil {
		t.Fatal(err)
	}
	var ps []configpatcher.Patch
	for _, data := range patches {
		p, err := configpatcher.LoadPatch(data)
		if err != nil {
			t.Fatalf("talos-patch.yaml does not load as a patch: %v", err)
		}
		ps = append(ps, p)
	}
	out, err := configpatcher.Apply(configpatcher.WithConfig(base), ps)
	if err != nil {
		t.Fatalf("%s: %v", typ, err)
	}
	cfg, err := out.Config()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cfg.Validate(validationMode{}); err != nil {
		t.Errorf("%s config (Talos %s) with the Talos patch: %v", typ, contract, err)
	}
	ims := cfg.K8sInlineManifestConfigs()
	if len(ims) != 1 || ims[0].Name() != InlineManifestName {
		t.Fatalf("%s: inline manifests %v, want one named %s", typ, ims, InlineManifestName)
	}
	return []byte(ims[0].Contents()), cfg.Cluster().ExternalCloudProvider().Enabled(), cfg.K8sControllerManagerConfig().ExtraArgs()
}

// The three ways to install agree: the single-file manifest, the Talos
// patch's inline manifest and the chart with its default values hold the
// same objects, the same RBAC rules and the same Deployment pod spec; the
// patch loads, applies and validates with Talos machinery on generated
// control-plane and worker configs.
func TestThreeOutputsAgree(t *testing.T) {
	manifest, patch := outputs(t)
	chart, err := helmTemplate(t, "kube-system", nil)
	if err != nil {
		t.Fatal(err)
	}
	kustomized := objects(t, "nodeinit-coordinator.yaml", manifest)
	if len(kustomized) < 10 {
		t.Fatalf("the manifest holds %d objects", len(kustomized))
	}
	noIPAM, err := os.ReadFile("../../extension/patches/controller-manager-no-ipam.yaml")
	if err != nil {
		t.Fatal(err)
	}
	kubelet, err := os.ReadFile("../../extension/patches/kubelet.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var want struct {
		Cluster struct {
			ControllerManager struct {
				ExtraArgs map[string]string `yaml:"extraArgs"`
			} `yaml:"controllerManager"`
		} `yaml:"cluster"`
	}
	if err := yaml.Unmarshal(noIPAM, &want); err != nil {
		t.Fatal(err)
	}
	patch114 := map[machine.Type][]byte{machine.TypeWorker: output(t, "talos-patch-1.14.yaml"), machine.TypeControlPlane: output(t, "talos-patch-1.14-controlplane.yaml")}
	kubelet114, err := os.ReadFile("../../extension/patches/kubelet-talos-1.14.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, form := range []struct {
		contract *talosconfig.VersionContract
		patch    map[machine.Type][]byte
		kubelet  []byte
	}{{talosconfig.TalosVersion1_13, map[machine.Type][]byte{machine.TypeWorker: patch, machine.TypeControlPlane: patch}, kubelet}, {talosconfig.TalosVersion1_14, patch114, kubelet114}} {
		for _, typ := range []machine.Type{machine.TypeControlPlane, machine.TypeWorker} {
			inline, external, cmArgs := talosConfig(t, typ, form.contract, form.patch[typ], form.kubelet)
			if !bytes.Equal(inline, manifest) {
				t.Errorf("%s (Talos %s): the inline manifest differs from nodeinit-coordinator.yaml", typ, form.contract)
			}
			if !external {
				t.Errorf("%s (Talos %s): cluster.externalCloudProvider.enabled is off", typ, form.contract)
			}
			// The shipped ConfigMap has ipam.enabled: the patch turns the
			// controller manager's allocation off, as extension/patches does
			// (on 1.14, on the control plane: the document is theirs only).
			if form.contract == talosconfig.TalosVersion1_14 && typ == machine.TypeWorker {
				continue
			}
			for k, v := range want.Cluster.ControllerManager.ExtraArgs {
				if !slices.Equal(cmArgs[k], []string{v}) {
					t.Errorf("%s (Talos %s): controller manager %s = %v, want %s (extension/patches/controller-manager-no-ipam.yaml)", typ, form.contract, k, cmArgs[k], v)
				}
			}
		}
	}

	for name, objs := range map[string][]*unstructured.Unstructured{
		"the chart":              objects(t, "chart", chart),
		"the Talos patch's copy": objects(t, "inline manifest", manifest),
	} {
		got, want := byKey(objs), byKey(kustomized)
		if !slices.Equal(slices.Sorted(maps.Keys(got)), slices.Sorted(maps.Keys(want))) {
			t.Errorf("%s holds %v,\nnodeinit-coordinator.yaml %v", name, slices.Sorted(maps.Keys(got)), slices.Sorted(maps.Keys(want)))
			continue
		}
		for k, w := range want {
			if g := got[k]; !equality.Semantic.DeepEqual(normalized(g), normalized(w)) {
				gy, _ := yaml.Marshal(normalized(g))
				wy, _ := yaml.Marshal(normalized(w))
				t.Errorf("%s: %s differs from nodeinit-coordinator.yaml's:\n%s\nwant:\n%s", name, k, gy, wy)
			}
		}
		if !equality.Semantic.DeepEqual(deployment(t, objs).Spec.Template.Spec, deployment(t, kustomized).Spec.Template.Spec) {
			t.Errorf("%s: the Deployment's pod spec differs", name)
		}
	}
}

// The release is one number: the kustomization's tag pins the manifest's
// image, and the chart installs the same (its appVersion; the chart's own
// version is the release without the v).
func TestChartVersionIsTheRelease(t *testing.T) {
	k, err := os.ReadFile(filepath.Join(deployDir, "kustomization.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	release, err := Release(k, CoordinatorImage)
	if err != nil {
		t.Fatal(err)
	}
	chrt, err := loader.Load(chartDir)
	if err != nil {
		t.Fatal(err)
	}
	if chrt.Metadata.AppVersion != release || "v"+chrt.Metadata.Version != release {
		t.Errorf("Chart.yaml version %s appVersion %s, want %s and %s", chrt.Metadata.Version, chrt.Metadata.AppVersion, strings.TrimPrefix(release, "v"), release)
	}
	manifest, _ := outputs(t)
	if c := deployment(t, objects(t, "manifest", manifest)).Spec.Template.Spec.Containers; c[0].Image != CoordinatorImage+":"+release {
		t.Errorf("nodeinit-coordinator.yaml runs %s, want %s:%s", c[0].Image, CoordinatorImage, release)
	}
}

func env(c corev1.Container) map[string]string {
	m := map[string]string{}
	for _, e := range c.Env {
		m[e.Name] = e.Value
	}
	return m
}

// The coordinator must run on a control-plane node that has just booted:
// no CNI, not ready, not initialized (the coordinator is what initializes
// it), and reach the API server without a ClusterIP.
func TestRunsOnANewControlPlaneNode(t *testing.T) {
	manifest, _ := outputs(t)
	spec := deployment(t, objects(t, "manifest", manifest)).Spec.Template.Spec
	if !spec.HostNetwork {
		t.Error("not on the host network: pod networking needs the pod CIDRs the coordinator allocates")
	}
	newNode := []corev1.Taint{
		{Key: "node.cloudprovider.kubernetes.io/uninitialized", Value: "true", Effect: corev1.TaintEffectNoSchedule},
		{Key: "node.kubernetes.io/not-ready", Effect: corev1.TaintEffectNoSchedule},
		{Key: "node.kubernetes.io/not-ready", Effect: corev1.TaintEffectNoExecute},
		{Key: "node.kubernetes.io/network-unavailable", Effect: corev1.TaintEffectNoSchedule},
		{Key: "node-role.kubernetes.io/control-plane", Effect: corev1.TaintEffectNoSchedule},
	}
	for _, taint := range newNode {
		if !slices.ContainsFunc(spec.Tolerations, func(tol corev1.Toleration) bool { return tol.ToleratesTaint(klog.Background(), &taint, false) }) {
			t.Errorf("does not tolerate %s:%s, which a new control-plane node has", taint.Key, taint.Effect)
		}
	}
	if e := env(spec.Containers[0]); e["KUBERNETES_SERVICE_HOST"] != "127.0.0.1" || e["KUBERNETES_SERVICE_PORT"] != "7445" {
		t.Errorf("env %v: the API server must be reached through KubePrism (127.0.0.1:7445) by default", e)
	}
}

// The documented way out of KubePrism: the without-kubeprism component in a
// kustomization of one's own, or the chart with apiServer unset. Both give
// the same pod spec, which reaches the API server the in-cluster way.
func TestWithoutKubePrism(t *testing.T) {
	fs := filesys.MakeFsInMemory()
	for _, dir := range []string{"", "without-kubeprism"} {
		files, err := filepath.Glob(filepath.Join(deployDir, dir, "*.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range files {
			data, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			if err := fs.WriteFile(filepath.Join("/src/coordinator/deploy", dir, filepath.Base(f)), data); err != nil {
				t.Fatal(err)
			}
		}
	}
	user := "resources: [../src/coordinator/deploy]\ncomponents: [../src/coordinator/deploy/without-kubeprism]\n"
	if err := fs.WriteFile("/mine/kustomization.yaml", []byte(user)); err != nil {
		t.Fatal(err)
	}
	rendered, err := Kustomize(fs, "/mine")
	if err != nil {
		t.Fatal(err)
	}
	kustomized := deployment(t, objects(t, "kustomize", rendered)).Spec.Template.Spec
	if e := env(kustomized.Containers[0]); e["KUBERNETES_SERVICE_HOST"] != "" || e["KUBERNETES_SERVICE_PORT"] != "" || len(e) != 1 {
		t.Errorf("with the without-kubeprism component, env %v", e)
	}
	chart, err := helmTemplate(t, "kube-system", map[string]any{"apiServer": map[string]any{"host": "", "port": ""}})
	if err != nil {
		t.Fatal(err)
	}
	if got := deployment(t, objects(t, "chart", chart)).Spec.Template.Spec; !equality.Semantic.DeepEqual(got, kustomized) {
		t.Errorf("the chart with apiServer unset differs from the without-kubeprism component:\n%v\n%v", got, kustomized)
	}
}

// Each output applies to a real API server as shipped, and what the server
// stores (after its defaulting) is the same Deployment pod spec and the
// same RBAC rules whichever was applied.
func TestEachAppliesToTheAPIServer(t *testing.T) {
	cluster, err := testcluster.Start(t.Context(), testcluster.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cluster.Close)
	manifest, patch := outputs(t)
	inline, _, _ := talosConfig(t, machine.TypeControlPlane, talosconfig.TalosVersion1_13, patch)
	chart, err := helmTemplate(t, "kube-system", nil)
	if err != nil {
		t.Fatal(err)
	}
	admin := kubernetes.NewForConfigOrDie(cluster.Admin())
	type stored struct {
		pod         corev1.PodSpec
		clusterRole []rbacv1.PolicyRule
		roles       map[string][]rbacv1.PolicyRule
	}
	var first *stored
	for _, out := range []struct {
		name string
		data []byte
	}{
		{"nodeinit-coordinator.yaml", manifest},
		{"talos-patch.yaml's inline manifest", inline},
		{"the chart", chart},
	} {
		if err := kubeapply.Apply(t.Context(), cluster.Admin(), objects(t, out.name, out.data)); err != nil {
			t.Fatalf("applying %s: %v", out.name, err)
		}
		dep, err := admin.AppsV1().Deployments("kube-system").Get(t.Context(), "nodeinit-coordinator", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		cr, err := admin.RbacV1().ClusterRoles().Get(t.Context(), "nodeinit-coordinator", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		got := &stored{pod: dep.Spec.Template.Spec, clusterRole: cr.Rules, roles: map[string][]rbacv1.PolicyRule{}}
		for _, ns := range []string{"kube-system", "default"} {
			r, err := admin.RbacV1().Roles(ns).Get(t.Context(), "nodeinit-coordinator", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			got.roles[ns] = r.Rules
		}
		if first == nil {
			first = got
			continue
		}
		if !equality.Semantic.DeepEqual(got.pod, first.pod) {
			t.Errorf("%s: the stored pod spec differs from nodeinit-coordinator.yaml's:\n%v\n%v", out.name, got.pod, first.pod)
		}
		if !equality.Semantic.DeepEqual(got.clusterRole, first.clusterRole) || !equality.Semantic.DeepEqual(got.roles, first.roles) {
			t.Errorf("%s: the stored RBAC rules differ from nodeinit-coordinator.yaml's", out.name)
		}
	}
}

// The chart's values change what they say and nothing else.
func TestChartValues(t *testing.T) {
	for _, tc := range []struct {
		name      string
		namespace string
		values    map[string]any
		check     func(t *testing.T, objs []*unstructured.Unstructured, d *appsv1.Deployment)
		fails     string
	}{{
		name:   "image",
		values: map[string]any{"image": map[string]any{"repository": "registry.example/nodeinit-coordinator", "tag": "v9.9.9", "pullPolicy": "Always"}},
		check: func(t *testing.T, _ []*unstructured.Unstructured, d *appsv1.Deployment) {
			if c := d.Spec.Template.Spec.Containers[0]; c.Image != "registry.example/nodeinit-coordinator:v9.9.9" || c.ImagePullPolicy != corev1.PullAlways {
				t.Errorf("image %s pull %s", c.Image, c.ImagePullPolicy)
			}
		},
	}, {
		name:   "replicas and resources",
		values: map[string]any{"replicas": 3, "resources": map[string]any{"requests": map[string]any{"cpu": "100m"}}},
		check: func(t *testing.T, _ []*unstructured.Unstructured, d *appsv1.Deployment) {
			r := d.Spec.Template.Spec.Containers[0].Resources
			if *d.Spec.Replicas != 3 || r.Requests.Cpu().String() != "100m" {
				t.Errorf("replicas %d requests %v", *d.Spec.Replicas, r.Requests)
			}
		},
	}, {
		name: "placement",
		// Helm merges maps with the defaults: null drops a default key.
		values: map[string]any{"nodeSelector": map[string]any{"pool": "system", "node-role.kubernetes.io/control-plane": nil}, "tolerations": []any{map[string]any{"operator": "Exists"}}},
		check: func(t *testing.T, _ []*unstructured.Unstructured, d *appsv1.Deployment) {
			s := d.Spec.Template.Spec
			if !maps.Equal(s.NodeSelector, map[string]string{"pool": "system"}) || len(s.Tolerations) != 1 || s.Tolerations[0].Operator != corev1.TolerationOpExists {
				t.Errorf("nodeSelector %v tolerations %v", s.NodeSelector, s.Tolerations)
			}
		},
	}, {
		name:   "configuration",
		values: map[string]any{"config": "ipam:\n  enabled: false\n"},
		check: func(t *testing.T, objs []*unstructured.Unstructured, d *appsv1.Deployment) {
			cm := byKey(objs)["ConfigMap kube-system/nodeinit-coordinator"]
			data, _, _ := unstructured.NestedStringMap(cm.Object, "data")
			if data["coordinator.yaml"] != "ipam:\n  enabled: false\n" {
				t.Errorf("coordinator.yaml %q", data["coordinator.yaml"])
			}
			if d.Spec.Template.Annotations["checksum/config"] == "" {
				t.Error("no checksum/config annotation: a new configuration would not roll the pods")
			}
		},
	}, {
		name:   "another API endpoint",
		values: map[string]any{"apiServer": map[string]any{"host": "10.5.0.1", "port": 6443}},
		check: func(t *testing.T, _ []*unstructured.Unstructured, d *appsv1.Deployment) {
			if e := env(d.Spec.Template.Spec.Containers[0]); e["KUBERNETES_SERVICE_HOST"] != "10.5.0.1" || e["KUBERNETES_SERVICE_PORT"] != "6443" {
				t.Errorf("env %v", e)
			}
		},
	}, {
		name:   "half an API endpoint",
		values: map[string]any{"apiServer": map[string]any{"port": ""}},
		fails:  "apiServer: set both host and port",
	}, {
		name:   "no admission policy",
		values: map[string]any{"admissionPolicy": map[string]any{"enabled": false}},
		check: func(t *testing.T, objs []*unstructured.Unstructured, _ *appsv1.Deployment) {
			for _, o := range objs {
				if strings.HasPrefix(o.GetKind(), "ValidatingAdmissionPolicy") {
					t.Errorf("%s rendered", key(o))
				}
			}
		},
	}, {
		name:      "another namespace",
		namespace: "nodeinit-system",
		check: func(t *testing.T, objs []*unstructured.Unstructured, d *appsv1.Deployment) {
			if !slices.Contains(d.Spec.Template.Spec.Containers[0].Args, "--lease-namespace=nodeinit-system") {
				t.Errorf("args %v: the Lease must follow the release's namespace", d.Spec.Template.Spec.Containers[0].Args)
			}
			for _, o := range objs {
				want := "nodeinit-system"
				if o.GetKind() == "Role" || o.GetKind() == "RoleBinding" {
					if o.GetNamespace() == "default" {
						continue // the kubernetes Service's EndpointSlices live there
					}
				}
				if ns := o.GetNamespace(); ns != "" && ns != want {
					t.Errorf("%s in %s", key(o), ns)
				}
			}
		},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			ns := tc.namespace
			if ns == "" {
				ns = "kube-system"
			}
			out, err := helmTemplate(t, ns, tc.values)
			if tc.fails != "" {
				if err == nil || !strings.Contains(err.Error(), tc.fails) {
					t.Fatalf("rendered with %v (err %v), want an error saying %q", tc.values, err, tc.fails)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			objs := objects(t, "chart", out)
			tc.check(t, objs, deployment(t, objs))
		})
	}
}

// make manifests IMAGE=REPO points the rendered Deployment, and the Talos
// patch's copy, at the repository the user pushed to, keeping the release
// tag; anything but a plain repository is refused with what to write.
func TestPushedImage(t *testing.T) {
	deployDir, err := filepath.Abs("../../coordinator/deploy")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if _, err := Write(deployDir, dir, CoordinatorImage, "registry.example.com:5000/team/nodeinit-coordinator"); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"nodeinit-coordinator.yaml", "talos-patch.yaml"} {
		data, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Contains(data, []byte("image: registry.example.com:5000/team/nodeinit-coordinator:v0.1.0\n")) || bytes.Contains(data, []byte(CoordinatorImage+":")) {
			t.Errorf("%s does not run the pushed image at the release tag", f)
		}
	}
	for _, bad := range []string{"registry.example.com/x:v1", "Registry.example.com/x", "x@sha256:abc", "registry.example.com/x y", "nodeinit"} {
		if _, err := Write(deployDir, t.TempDir(), CoordinatorImage, bad); err == nil || !strings.Contains(err.Error(), "want a repository without a tag") {
			t.Errorf("IMAGE=%q: err = %v", bad, err)
		}
	}
}

// TestChartAsHelmUsersExpect: the values Helm users reach for render, and
// a value the chart does not have is refused by values.schema.json instead
// of being ignored.
func TestChartAsHelmUsersExpect(t *testing.T) {
	out, err := helmTemplate(t, "kube-system", map[string]any{
		"config":           map[string]any{"clusterName": "prod", "adoptExisting": true},
		"imagePullSecrets": []any{map[string]any{"name": "regcred"}},
		"extraArgs":        []any{"--node-workers=32"},
		"serviceMonitor":   map[string]any{"enabled": true},
		"prometheusRule":   map[string]any{"enabled": true},
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"clusterName: prod", "adoptExisting: true", "name: regcred", `- "--node-workers=32"`, "kind: ServiceMonitor", "kind: PrometheusRule", "NodeinitNoLeader"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("the chart rendered without %q", want)
		}
	}
	for _, bad := range []map[string]any{{"replica": 3}, {"replicas": 0}, {"extraArgs": []any{"node-workers=32"}}, {"image": map[string]any{"digest": "latest"}}} {
		if _, err := helmTemplate(t, "kube-system", bad); err == nil || !strings.Contains(err.Error(), "schema") {
			t.Errorf("values %v: %v, want a schema error", bad, err)
		}
	}
}

// TestChartREADMEListsEveryValue: the chart's README names every
// top-level value of values.yaml.
func TestChartREADMEListsEveryValue(t *testing.T) {
	values, err := os.ReadFile(filepath.Join(chartDir, "values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile(filepath.Join(chartDir, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range regexp.MustCompile(`(?m)^([a-zA-Z]+):`).FindAllStringSubmatch(string(values), -1) {
		if !strings.Contains(string(readme), "`"+m[1]) {
			t.Errorf("the chart's README does not name the value %s", m[1])
		}
	}
}
