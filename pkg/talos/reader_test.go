package talos_test

import (
	"context"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/nethelpers"
	"github.com/siderolabs/talos/pkg/machinery/resources/hardware"
	"github.com/siderolabs/talos/pkg/machinery/resources/k8s"
	"github.com/siderolabs/talos/pkg/machinery/resources/network"
	"github.com/siderolabs/talos/pkg/machinery/resources/runtime"

	"github.com/talos-nodeinit/talos-nodeinit/pkg/facts"
	"github.com/talos-nodeinit/talos-nodeinit/pkg/harness/syncbuf"
	"github.com/talos-nodeinit/talos-nodeinit/pkg/talos"
	"github.com/talos-nodeinit/talos-nodeinit/pkg/talos/talostest"
)

// follow runs a Reader and hands its snapshots to the test.
func follow(t *testing.T, socket string) <-chan facts.Talos {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	out := make(chan facts.Talos, 64)
	r := &talos.Reader{Socket: socket, MinBackoff: 20 * time.Millisecond, MaxBackoff: 200 * time.Millisecond,
		Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	done := make(chan struct{})
	go func() { _ = r.Watch(ctx, func(f facts.Talos) { out <- f }); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return out
}

// waitFacts waits for a snapshot satisfying cond and returns it with the wait.
func waitFacts(t *testing.T, ch <-chan facts.Talos, what string, cond func(facts.Talos) bool) (facts.Talos, time.Duration) {
	t.Helper()
	start := time.Now()
	deadline := time.After(5 * time.Second)
	for {
		select {
		case f := <-ch:
			if cond(f) {
				return f, time.Since(start)
			}
		case <-deadline:
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// startSeeded starts a machined stand-in holding one node's facts.
func startSeeded(t *testing.T) *talostest.Machined {
	t.Helper()
	m, err := talostest.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Close)
	seed(t, m)
	return m
}

func seed(t *testing.T, m *talostest.Machined) {
	t.Helper()
	ctx := context.Background()
	for _, err := range []error{
		m.SetPlatformMetadata(ctx, runtime.PlatformMetadataSpec{Platform: "metal", Hostname: "n1", Zone: "z1", Tags: map[string]string{"a": "b"}}),
		m.SetSystemInformation(ctx, hardware.SystemInformationSpec{Manufacturer: "ACME", SerialNumber: "S1"}),
		m.SetNodename(ctx, "n1"),
		m.SetNodeIPs(ctx, netip.MustParseAddr("10.0.0.1")),
		m.SetExternalAddresses(ctx, netip.MustParsePrefix("203.0.113.9/32")),
	} {
		if err != nil {
			t.Fatal(err)
		}
	}
}

func TestWatchReadsUpdatesAndDeletes(t *testing.T) {
	ctx := context.Background()
	m := startSeeded(t)
	// An address on a real link must not be taken for an external one.
	lan := network.NewAddressStatus(network.NamespaceName, network.AddressID("eth0", netip.MustParsePrefix("10.0.0.1/24")))
	lan.TypedSpec().LinkName, lan.TypedSpec().Address, lan.TypedSpec().Family = "eth0", netip.MustParsePrefix("10.0.0.1/24"), nethelpers.FamilyInet4
	if err := m.State.Create(ctx, lan); err != nil {
		t.Fatal(err)
	}

	ch := follow(t, m.Socket)
	f, _ := waitFacts(t, ch, "the first snapshot", func(f facts.Talos) bool { return f.Metadata != nil })
	if f.Metadata.Platform != "metal" || f.Metadata.Tags["a"] != "b" || f.System == nil || f.System.Manufacturer != "ACME" ||
		f.Nodename != "n1" || !slices.Equal(f.NodeIPs, []netip.Addr{netip.MustParseAddr("10.0.0.1")}) ||
		!slices.Equal(f.ExternalIPs, []netip.Addr{netip.MustParseAddr("203.0.113.9")}) || f.Degraded != "" {
		t.Fatalf("first snapshot %+v", f)
	}

	if err := m.SetPlatformMetadata(ctx, runtime.PlatformMetadataSpec{Platform: "metal", Hostname: "n1", Zone: "z2"}); err != nil {
		t.Fatal(err)
	}
	_, took := waitFacts(t, ch, "the zone update", func(f facts.Talos) bool { return f.Metadata != nil && f.Metadata.Zone == "z2" })
	t.Logf("metadata update seen after %s", took)

	if err := m.SetExternalAddresses(ctx, netip.MustParsePrefix("203.0.113.9/32"), netip.MustParsePrefix("2001:db8::9/128")); err != nil {
		t.Fatal(err)
	}
	waitFacts(t, ch, "a second external IP", func(f facts.Talos) bool { return len(f.ExternalIPs) == 2 })

	// The kubelet's NodeIPConfig as Talos writes it: the pod CIDRs (an IPv6
	// one that holds the nodes' own /64s), the service CIDRs, then the VIPs
	// as addresses. Only the VIPs are no node's own. Another NodeIPConfig
	// than the kubelet's is not read.
	if err := m.SetNodeIPConfig(ctx, "10.244.0.0/16", "2001:db8:1::/48", "10.96.0.0/12", "203.0.113.100", "2001:db8::100", "not-an-address"); err != nil {
		t.Fatal(err)
	}
	other := k8s.NewNodeIPConfig(k8s.NamespaceName, "another")
	other.TypedSpec().ExcludeSubnets = []string{"192.0.2.1"}
	if err := m.State.Create(ctx, other); err != nil {
		t.Fatal(err)
	}
	wantVIPs := []netip.Addr{netip.MustParseAddr("203.0.113.100"), netip.MustParseAddr("2001:db8::100")}
	waitFacts(t, ch, "the VIPs among NodeIPConfig's ExcludeSubnets", func(f facts.Talos) bool { return slices.Equal(f.VIPs, wantVIPs) })
	if err := m.Delete(ctx, k8s.NewNodeIPConfig(k8s.NamespaceName, k8s.KubeletID).Metadata()); err != nil {
		t.Fatal(err)
	}
	waitFacts(t, ch, "NodeIPConfig deleted", func(f facts.Talos) bool { return f.VIPs == nil && len(f.ExternalIPs) == 2 })

	if err := m.Delete(ctx, runtime.NewPlatformMetadataSpec(runtime.NamespaceName, runtime.PlatformMetadataID).Metadata()); err != nil {
		t.Fatal(err)
	}
	waitFacts(t, ch, "metadata deleted", func(f facts.Talos) bool { return f.Metadata == nil && f.Nodename == "n1" })
}

func TestReconnectsAfterMachinedRestart(t *testing.T) {
	ctx := context.Background()
	m := startSeeded(t)
	ch := follow(t, m.Socket)
	waitFacts(t, ch, "the first snapshot", func(f facts.Talos) bool { return f.Metadata != nil && f.Metadata.Zone == "z1" })

	m.Stop()
	// Changed while machined is away: must be seen after reconnecting.
	if err := m.SetPlatformMetadata(ctx, runtime.PlatformMetadataSpec{Platform: "metal", Hostname: "n1", Zone: "while-down"}); err != nil {
		t.Fatal(err)
	}
	if err := m.Delete(ctx, hardware.NewSystemInformation(hardware.SystemInformationID).Metadata()); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)
	if err := m.Serve(); err != nil {
		t.Fatal(err)
	}
	f, took := waitFacts(t, ch, "facts after the restart", func(f facts.Talos) bool { return f.Metadata != nil && f.Metadata.Zone == "while-down" })
	if f.System != nil {
		t.Fatalf("system information deleted while down is still reported: %+v", f.System)
	}
	t.Logf("reconnected %s after machined came back", took)
}

func TestWaitsForSocket(t *testing.T) {
	m := startSeeded(t)
	m.Stop() // the socket is gone: the agent started before machined
	ch := follow(t, m.Socket)
	select {
	case f := <-ch:
		t.Fatalf("facts without machined: %+v", f)
	case <-time.After(300 * time.Millisecond):
	}
	if err := m.Serve(); err != nil {
		t.Fatal(err)
	}
	waitFacts(t, ch, "facts once the socket appears", func(f facts.Talos) bool { return f.Nodename == "n1" })
}

func TestCallsCarryReaderRole(t *testing.T) {
	m := startSeeded(t)
	ch := follow(t, m.Socket)
	// The stand-in refuses calls without talos-role: getting facts at all proves the role is sent.
	waitFacts(t, ch, "facts", func(f facts.Talos) bool { return f.Metadata != nil })
}

func TestCmdlineFallback(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cmdline")
	if err := os.WriteFile(path, []byte("console=ttyS0 talos.platform=metal talos.hostname=web-3 init_on_alloc=1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := talos.FromCmdline(path)
	if err != nil {
		t.Fatal(err)
	}
	if f.Metadata.Platform != "metal" || f.Metadata.Hostname != "web-3" || f.Nodename != "web-3" || f.Degraded == "" {
		t.Fatalf("cmdline facts %+v", f)
	}
	if _, err := talos.FromCmdline(filepath.Join(t.TempDir(), "missing")); err == nil {
		t.Fatal("a missing cmdline file gave facts")
	}
}

// TestReadsWithoutNodeIPConfig: NodeIPConfig only adds the VIPs. A machined
// that does not serve it (refused as machined's access filter refuses a type
// it has not registered: PermissionDenied, "not supported") must not read as
// machined refusing this process: the other facts come, not degraded, with
// no VIPs.
func TestReadsWithoutNodeIPConfig(t *testing.T) {
	m, err := talostest.StartWithout(k8s.NodeIPConfigType)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Close)
	seed(t, m)
	if err := m.SetNodeIPConfig(context.Background(), "203.0.113.100"); err != nil {
		t.Fatal(err)
	}
	var logs syncbuf.Buffer
	ctx, cancel := context.WithCancel(context.Background())
	out := make(chan facts.Talos, 64)
	r := &talos.Reader{Socket: m.Socket, MinBackoff: 20 * time.Millisecond, MaxBackoff: 200 * time.Millisecond,
		Log: slog.New(slog.NewTextHandler(&logs, nil))}
	done := make(chan struct{})
	go func() { _ = r.Watch(ctx, func(f facts.Talos) { out <- f }); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	f, _ := waitFacts(t, out, "the facts from a machined without NodeIPConfig", func(f facts.Talos) bool { return f.Metadata != nil })
	if f.Degraded != "" || f.Nodename != "n1" || f.VIPs != nil {
		t.Errorf("facts from a machined without NodeIPConfig: degraded %q, node name %q, VIPs %v; want them whole, with no VIPs", f.Degraded, f.Nodename, f.VIPs)
	}
	// Said once, as a warning an operator can act on.
	if err := m.SetNodename(context.Background(), "n2"); err != nil {
		t.Fatal(err)
	}
	waitFacts(t, out, "a later update", func(f facts.Talos) bool { return f.Nodename == "n2" })
	if said := strings.Count(logs.String(), "VIPs Talos configures are unknown"); said != 1 {
		t.Errorf("the agent said %d times that the VIPs are unknown, want once:\n%s", said, logs.String())
	}
}
