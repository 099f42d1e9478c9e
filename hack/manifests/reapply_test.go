package main

import (
	"bytes"
	"strings"
	"testing"

	talosconfig "github.com/siderolabs/talos/pkg/machinery/config"
	"github.com/siderolabs/talos/pkg/machinery/config/machine"
)

// applyAll applies patches in turn, as successive `talosctl patch mc`
// calls do, to a control-plane config generated for a cluster created
// with Talos 1.13, and validates it.
func applyAll(t *testing.T, patches ...[]byte) ([]string, error) {
	t.Helper()
	names, _, err := applyTo(t, talosconfig.TalosVersion1_13, patches...)
	return names, err
}

// applyTo is applyAll for a cluster created with the given Talos (through
// installed, which also validates in container mode); it also returns the
// inline manifests' contents.
func applyTo(t *testing.T, contract *talosconfig.VersionContract, patches ...[]byte) ([]string, []string, error) {
	t.Helper()
	form := FormV1Alpha1
	if contract == talosconfig.TalosVersion1_14 {
		form = FormMultidoc
	}
	c, err := installed(t, form, machine.TypeControlPlane, patches...)
	if err != nil {
		return nil, nil, err
	}
	var names, contents []string
	for _, m := range c.K8sInlineManifestConfigs() {
		names = append(names, m.Name())
		contents = append(contents, m.Contents())
	}
	return names, contents, nil
}

// Applying the Talos patch again, as an upgrade or a second run of the
// install does, must leave one coordinator manifest, and uninstalling none.
// Talos appends inline manifests and refuses two of one name, so the patch
// alone cannot be applied twice: the documented command for both gives
// talos-unpatch.yaml first.
func TestReapplyingThePatch(t *testing.T) {
	_, patch := outputs(t)
	if _, err := applyAll(t, patch, patch); err == nil || !strings.Contains(err.Error(), "is duplicate") {
		t.Fatalf("talos-patch.yaml twice: %v; Talos refused it as a duplicate before (if it no longer does, the README can say so)", err)
	}
	unpatch := TalosUnpatch("test")
	for _, c := range []struct {
		name    string
		patches [][]byte
		want    string
	}{
		{"install", [][]byte{patch}, InlineManifestName},
		{"install, then upgrade", [][]byte{patch, unpatch, patch}, InlineManifestName},
		{"install, upgrade, upgrade", [][]byte{patch, unpatch, patch, unpatch, patch}, InlineManifestName},
		{"install, then uninstall", [][]byte{patch, unpatch}, ""},
		{"uninstall, install again", [][]byte{patch, unpatch, patch}, InlineManifestName},
	} {
		names, err := applyAll(t, c.patches...)
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		if got := strings.Join(names, ","); got != c.want {
			t.Errorf("%s: inline manifests %q, want %q", c.name, got, c.want)
		}
	}
}

// On a cluster created with Talos 1.14 the coordinator's manifest is a
// named document: applying the patch again is a no-op, a newer release's
// replaces it, the unpatch removes it; and the v1alpha1 patch is refused
// there (cluster.controllerManager), as the 1.14 one is on an older cluster.
func TestReapplyingThePatch114(t *testing.T) {
	patch := output(t, "talos-patch-1.14-controlplane.yaml")
	unpatch := output(t, "talos-unpatch-1.14.yaml")
	newer := bytes.Replace(patch, []byte("kind: Namespace"), []byte("kind: Namespace # newer"), 1)
	if bytes.Equal(newer, patch) {
		newer = append(bytes.Clone(patch), []byte("    # a newer release\n")...)
	}
	for _, c := range []struct {
		name    string
		patches [][]byte
		want    string
		newer   bool
	}{
		{"install", [][]byte{patch}, InlineManifestName, false},
		{"install twice", [][]byte{patch, patch}, InlineManifestName, false},
		{"install, then upgrade", [][]byte{patch, newer}, InlineManifestName, true},
		{"install, then uninstall", [][]byte{patch, unpatch}, "", false},
		{"uninstall, install again", [][]byte{patch, unpatch, patch}, InlineManifestName, false},
	} {
		names, contents, err := applyTo(t, talosconfig.TalosVersion1_14, c.patches...)
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		if got := strings.Join(names, ","); got != c.want {
			t.Errorf("%s: inline manifests %q, want %q", c.name, got, c.want)
		}
		if c.newer && (len(contents) != 1 || !strings.Contains(contents[0], "# a newer release") && !strings.Contains(contents[0], "# newer")) {
			t.Errorf("%s: the manifest was not replaced by the newer one", c.name)
		}
	}
	_, old := outputs(t)
	if _, _, err := applyTo(t, talosconfig.TalosVersion1_14, old); err == nil || !strings.Contains(err.Error(), "kube-controller-manager config is already set") {
		t.Errorf("talos-patch.yaml on a Talos 1.14 cluster: %v, want refused", err)
	}
	if _, _, err := applyTo(t, talosconfig.TalosVersion1_13, patch); err == nil || !strings.Contains(err.Error(), "already set") {
		t.Errorf("talos-patch-1.14.yaml on a Talos 1.13 cluster: %v, want refused", err)
	}
}
