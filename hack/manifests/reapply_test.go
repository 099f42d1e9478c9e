package main

import (
	"strings"
	"testing"

	"github.com/siderolabs/talos/pkg/machinery/config/configpatcher"
	"github.com/siderolabs/talos/pkg/machinery/config/generate"
	"github.com/siderolabs/talos/pkg/machinery/config/machine"
)

// applyAll applies patches in turn, as successive `talosctl patch mc`
// calls do, to a generated control-plane config, and validates it.
func applyAll(t *testing.T, patches ...[]byte) ([]string, error) {
	t.Helper()
	in, err := generate.NewInput("nodeinit", "https://10.5.0.1:6443", "1.34.4")
	if err != nil {
		t.Fatal(err)
	}
	base, err := in.Config(machine.TypeControlPlane)
	if err != nil {
		t.Fatal(err)
	}
	cfg := configpatcher.WithConfig(base)
	for _, data := range patches {
		p, err := configpatcher.LoadPatch(data)
		if err != nil {
			t.Fatal(err)
		}
		out, err := configpatcher.Apply(cfg, []configpatcher.Patch{p})
		if err != nil {
			return nil, err
		}
		c, err := out.Config()
		if err != nil {
			return nil, err
		}
		if _, err := c.Validate(runtimeMode{}); err != nil {
			return nil, err
		}
		cfg = configpatcher.WithConfig(c)
	}
	c, err := cfg.Config()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, m := range c.Cluster().InlineManifests() {
		names = append(names, m.Name())
	}
	return names, nil
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
