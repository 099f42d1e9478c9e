package explain_test

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/resources/hardware"
	"github.com/siderolabs/talos/pkg/machinery/resources/runtime"

	"github.com/talos-nodeinit/talos-nodeinit/coordinator/explain"
	"github.com/talos-nodeinit/talos-nodeinit/pkg/facts"
	"github.com/talos-nodeinit/talos-nodeinit/pkg/harness/machined"
	"github.com/talos-nodeinit/talos-nodeinit/pkg/talos"
)

// TestTalosctlYAMLIsWhatTheAgentReads (issue 14): for the same resources on
// machined's socket, what the agent reads (talos.Reader) and what `explain`
// reads from `talosctl get … -o yaml` are equal field for field. The YAML is
// printed by the machined stand-in's talosctl-get, which is talosctl's own
// get code and YAML writer (Talos v1.13.7 cmd/talosctl), so the spelling
// users paste (`serialnumber`, lowercase) is talosctl's, not a copy of it.
func TestTalosctlYAMLIsWhatTheAgentReads(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	bin, err := machined.Binary()
	if err != nil {
		t.Fatal(err)
	}
	p, err := machined.Start(nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	n, err := p.Node(ctx, "talosctl-1")
	if err != nil {
		t.Fatal(err)
	}
	// This process is the agent's extension service; the talosctl-get child
	// shares its mount namespace, which machined's ext-* rule admits too.
	if err := n.RegisterAgent(ctx, os.Getpid()); err != nil {
		t.Fatal(err)
	}

	md := runtime.PlatformMetadataSpec{
		Platform:     "aws",
		Hostname:     "ip-10-0-1-17.eu-west-1.compute.internal",
		Region:       "eu-west-1",
		Zone:         "eu-west-1b",
		InstanceType: "m7i.large",
		InstanceID:   "i-0123456789abcdef0",
		ProviderID:   "aws:///eu-west-1b/i-0123456789abcdef0",
		Spot:         true,
		InternalDNS:  "ip-10-0-1-17.eu-west-1.compute.internal",
		ExternalDNS:  "ec2-54-1-2-3.eu-west-1.compute.amazonaws.com",
		Tags:         map[string]string{"team": "storage", "env": "prod", "kubernetes.io/cluster/c1": "owned"},
	}
	si := hardware.SystemInformationSpec{
		Manufacturer: "Supermicro",
		ProductName:  "SYS-5019C-MR",
		Version:      "0123456789",
		BIOSVersion:  "2.7a",
		SerialNumber: "S123-SERIAL",
		UUID:         "4c4c4544-0042-3510-8044-b4c04f4d4e31",
		WakeUpType:   "Power Switch",
		SKUNumber:    "SKU-0815",
	}
	assertAllSet(t, md)
	assertAllSet(t, si)
	if err := n.SetPlatformMetadata(ctx, md); err != nil {
		t.Fatal(err)
	}
	if err := n.SetSystemInformation(ctx, si); err != nil {
		t.Fatal(err)
	}

	// The agent's side: the real reader on the node's socket.
	got := readFacts(ctx, t, n.Socket)

	// talosctl's side.
	mdYAML := talosctlGet(ctx, t, bin, n.Socket, "platformmetadata")
	siYAML := talosctlGet(ctx, t, bin, n.Socket, "systeminformation")
	t.Logf("talosctl get platformmetadata -o yaml:\n%s", mdYAML)
	t.Logf("talosctl get systeminformation -o yaml:\n%s", siYAML)
	for _, want := range []string{"node: talosctl-1\n", "metadata:\n", "spec:\n", "type: PlatformMetadatas.talos.dev\n"} {
		if !strings.Contains(string(mdYAML), want) {
			t.Errorf("platformmetadata YAML lacks %q", want)
		}
	}
	if !strings.Contains(string(siYAML), "\n    serialnumber: ") {
		t.Errorf("talosctl's systeminformation YAML has no lowercase `serialnumber:` key")
	}
	if strings.Contains(string(siYAML), "serialNumber") {
		t.Errorf("talosctl's systeminformation YAML spells serialNumber")
	}

	fromYAML, err := explain.PlatformOf(mdYAML)
	if err != nil {
		t.Fatalf("PlatformOf(talosctl's YAML): %v", err)
	}
	sysFromYAML, err := explain.SystemOf(siYAML)
	if err != nil {
		t.Fatalf("SystemOf(talosctl's YAML): %v", err)
	}

	// Field for field, both sides, and both equal to what was set.
	compareFields(t, "platform metadata", *got.Metadata, fromYAML)
	compareFields(t, "platform metadata (as set)", facts.Platform(md), fromYAML)
	compareFields(t, "system information", *got.System, sysFromYAML)
	compareFields(t, "system information (as set)", facts.System(si), sysFromYAML)

	// The camelCase spelling a user might guess is refused, naming the key
	// talosctl prints.
	wrong := bytes.Replace(siYAML, []byte("serialnumber:"), []byte("serialNumber:"), 1)
	if bytes.Equal(wrong, siYAML) {
		t.Fatal("nothing to rename")
	}
	_, err = explain.SystemOf(wrong)
	if err == nil {
		t.Fatal("SystemOf accepted serialNumber")
	}
	if !strings.Contains(err.Error(), `unknown key "serialNumber"`) || !strings.Contains(err.Error(), `the nearest known key is "serialnumber"`) {
		t.Fatalf("SystemOf(serialNumber): %v; want it to name the nearest key serialnumber", err)
	}
}

// readFacts runs the agent's reader until its snapshot has both resources.
func readFacts(ctx context.Context, t *testing.T, socket string) facts.Talos {
	t.Helper()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	updates := make(chan facts.Talos, 16)
	r := &talos.Reader{Socket: socket, MinBackoff: 50 * time.Millisecond, MaxBackoff: 200 * time.Millisecond}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = r.Watch(ctx, func(f facts.Talos) {
			select {
			case updates <- f:
			case <-ctx.Done():
			}
		})
	}()
	defer func() { cancel(); <-done }()
	for {
		select {
		case f := <-updates:
			if f.Degraded != "" {
				t.Fatalf("reader degraded: %s", f.Degraded)
			}
			if f.Metadata != nil && f.System != nil {
				return f
			}
		case <-ctx.Done():
			t.Fatal("the reader published no snapshot with platform metadata and system information")
		}
	}
}

// talosctlGet runs `machined-standin talosctl-get`: `talosctl get TYPE -o yaml`.
func talosctlGet(ctx context.Context, t *testing.T, bin, socket, typ string) []byte {
	t.Helper()
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, bin, "talosctl-get", "--socket", socket, "--nodes", "talosctl-1", "--type", typ, "-o", "yaml")
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("talosctl-get %s: %v\n%s", typ, err, stderr.String())
	}
	return stdout.Bytes()
}

// assertAllSet fails on a zero field: a field left empty would compare
// equal on both sides even if one side never read it.
func assertAllSet(t *testing.T, spec any) {
	t.Helper()
	v := reflect.ValueOf(spec)
	for i := range v.NumField() {
		if v.Field(i).IsZero() {
			t.Fatalf("%T.%s is not set", spec, v.Type().Field(i).Name)
		}
	}
}

// compareFields compares two structs field by field, naming each that differs.
func compareFields[T any](t *testing.T, what string, want, got T) {
	t.Helper()
	wv, gv := reflect.ValueOf(want), reflect.ValueOf(got)
	for i := range wv.NumField() {
		name := wv.Type().Field(i).Name
		if w, g := wv.Field(i).Interface(), gv.Field(i).Interface(); !reflect.DeepEqual(w, g) {
			t.Errorf("%s: %s: agent/as set %#v, talosctl YAML %#v", what, name, w, g)
		}
	}
}
