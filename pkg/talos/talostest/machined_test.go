package talostest_test

import (
	"context"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/cosi-project/runtime/pkg/resource"
	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/cosi-project/runtime/pkg/state"
	"github.com/siderolabs/talos/pkg/machinery/client"
	"github.com/siderolabs/talos/pkg/machinery/constants"
	"github.com/siderolabs/talos/pkg/machinery/resources/k8s"
	"github.com/siderolabs/talos/pkg/machinery/resources/network"
	"github.com/siderolabs/talos/pkg/machinery/resources/runtime"
	"github.com/siderolabs/talos/pkg/machinery/role"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	"github.com/talos-nodeinit/talos-nodeinit/pkg/talos/talostest"
)

func dial(t *testing.T, m *talostest.Machined) *client.Client {
	t.Helper()
	c, err := client.New(context.Background(), client.WithUnixSocket(m.Socket),
		client.WithGRPCDialOptions(grpc.WithTransportCredentials(insecure.NewCredentials())))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func readerCtx(ctx context.Context) context.Context {
	return metadata.AppendToOutgoingContext(ctx, constants.APIAuthzRoleMetadataKey, string(role.Reader))
}

// TestReadAndWatchThroughMachineryClient creates a resource, reads it back,
// and watches an update and a deletion arrive through machinery's own client.
func TestReadAndWatchThroughMachineryClient(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	m, err := talostest.Start()
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if len(m.Socket) > 100 {
		t.Fatalf("socket path %q is too long for a unix socket", m.Socket)
	}
	if err := m.SetPlatformMetadata(ctx, runtime.PlatformMetadataSpec{Platform: "metal", Hostname: "n1", Zone: "z1"}); err != nil {
		t.Fatal(err)
	}
	c := dial(t, m)
	rctx := readerCtx(ctx)
	ptr := runtime.NewPlatformMetadataSpec(runtime.NamespaceName, runtime.PlatformMetadataID).Metadata()

	got, err := safe.StateGet[*runtime.PlatformMetadata](rctx, c.COSI, ptr)
	if err != nil {
		t.Fatal(err)
	}
	if got.TypedSpec().Platform != "metal" || got.TypedSpec().Zone != "z1" {
		t.Fatalf("read back %+v", got.TypedSpec())
	}

	events := make(chan safe.WrappedStateEvent[*runtime.PlatformMetadata], 8)
	if err := safe.StateWatch(rctx, c.COSI, ptr, events); err != nil {
		t.Fatal(err)
	}
	next := func() safe.WrappedStateEvent[*runtime.PlatformMetadata] {
		select {
		case e := <-events:
			return e
		case <-ctx.Done():
			t.Fatal("no watch event")
			panic("unreachable")
		}
	}
	if e := next(); e.Type() != state.Created {
		t.Fatalf("first event %v, want Created (the current state)", e.Type())
	}
	if err := m.SetPlatformMetadata(ctx, runtime.PlatformMetadataSpec{Platform: "metal", Hostname: "n1", Zone: "z2"}); err != nil {
		t.Fatal(err)
	}
	e := next()
	r, err := e.Resource()
	if e.Type() != state.Updated || err != nil || r.TypedSpec().Zone != "z2" {
		t.Fatalf("update event %v %v", e.Type(), err)
	}
	if err := m.Delete(ctx, ptr); err != nil {
		t.Fatal(err)
	}
	if e := next(); e.Type() != state.Destroyed {
		t.Fatalf("event %v, want Destroyed", e.Type())
	}
}

// TestAllResourceTypes checks every resource the agent reads round-trips
// through the gRPC state server.
func TestAllResourceTypes(t *testing.T) {
	ctx := context.Background()
	m, err := talostest.Start()
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	ext := netip.MustParsePrefix("203.0.113.7/32")
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(m.SetNodename(ctx, "node-a"))
	must(m.SetNodeIPs(ctx, netip.MustParseAddr("10.0.0.5"), netip.MustParseAddr("2001:db8::5")))
	must(m.SetExternalAddresses(ctx, ext))
	c := dial(t, m)
	rctx := readerCtx(ctx)

	nn, err := safe.StateGet[*k8s.Nodename](rctx, c.COSI, k8s.NewNodename(k8s.NamespaceName, k8s.NodenameID).Metadata())
	must(err)
	if nn.TypedSpec().Nodename != "node-a" {
		t.Errorf("nodename %q", nn.TypedSpec().Nodename)
	}
	ips, err := safe.StateGet[*k8s.NodeIP](rctx, c.COSI, k8s.NewNodeIP(k8s.NamespaceName, k8s.KubeletID).Metadata())
	must(err)
	if len(ips.TypedSpec().Addresses) != 2 {
		t.Errorf("node IPs %v", ips.TypedSpec().Addresses)
	}
	addrs, err := safe.StateListAll[*network.AddressStatus](rctx, c.COSI)
	must(err)
	if addrs.Len() != 1 || addrs.Get(0).TypedSpec().LinkName != talostest.ExternalLink || addrs.Get(0).TypedSpec().Address != ext {
		t.Errorf("external addresses: %d", addrs.Len())
	}
	must(m.SetExternalAddresses(ctx))
	addrs, err = safe.StateListAll[*network.AddressStatus](rctx, c.COSI)
	must(err)
	if addrs.Len() != 0 {
		t.Errorf("external addresses not removed: %d left", addrs.Len())
	}
}

// TestRoleRequired checks the stand-in refuses a call without the talos-role
// metadata, so the agent's role handling is really exercised.
func TestRoleRequired(t *testing.T) {
	m, err := talostest.Start()
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	c := dial(t, m)
	_, err = c.COSI.Get(context.Background(), resource.NewMetadata(runtime.NamespaceName, runtime.PlatformMetadataType, runtime.PlatformMetadataID, resource.VersionUndefined))
	if err == nil || !strings.Contains(err.Error(), "PermissionDenied") {
		t.Fatalf("a call without a role got %v, want PermissionDenied", err)
	}
}

// TestRestartKeepsState stops and restarts serving: the socket disappears and
// comes back with the same resources.
func TestRestartKeepsState(t *testing.T) {
	ctx := context.Background()
	m, err := talostest.Start()
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if err := m.SetNodename(ctx, "n"); err != nil {
		t.Fatal(err)
	}
	m.Stop()
	c := dial(t, m)
	ptr := k8s.NewNodename(k8s.NamespaceName, k8s.NodenameID).Metadata()
	short, cancel := context.WithTimeout(readerCtx(ctx), 300*time.Millisecond)
	defer cancel()
	if _, err := c.COSI.Get(short, ptr); err == nil {
		t.Fatal("a read succeeded while machined was stopped")
	}
	if err := m.Serve(); err != nil {
		t.Fatal(err)
	}
	c2 := dial(t, m)
	r, err := safe.StateGet[*k8s.Nodename](readerCtx(ctx), c2.COSI, ptr)
	if err != nil || r.TypedSpec().Nodename != "n" {
		t.Fatalf("after restart: %v", err)
	}
}
