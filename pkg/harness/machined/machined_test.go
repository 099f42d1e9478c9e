package machined_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	cosiv1alpha1 "github.com/cosi-project/runtime/api/v1alpha1"
	"github.com/cosi-project/runtime/pkg/resource"
	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/cosi-project/runtime/pkg/state"
	cosiclient "github.com/cosi-project/runtime/pkg/state/protobuf/client"
	"github.com/siderolabs/talos/pkg/machinery/constants"
	"github.com/siderolabs/talos/pkg/machinery/resources/config"
	"github.com/siderolabs/talos/pkg/machinery/resources/k8s"
	"github.com/siderolabs/talos/pkg/machinery/resources/runtime"
	"github.com/siderolabs/talos/pkg/machinery/role"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/talos-nodeinit/talos-nodeinit/pkg/harness/machined"
)

func start(t *testing.T) *machined.Process {
	t.Helper()
	p, err := machined.Start(testWriter{t})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(b []byte) (int, error) { w.t.Logf("%s", b); return len(b), nil }

// client is what an extension service holds: machined's socket, no TLS.
func client(t *testing.T, socket string) state.State {
	t.Helper()
	conn, err := grpc.NewClient("unix://"+socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return state.WrapCore(cosiclient.NewAdapter(cosiv1alpha1.NewStateClient(conn)))
}

func withRole(ctx context.Context, r role.Role) context.Context {
	return metadata.AppendToOutgoingContext(ctx, constants.APIAuthzRoleMetadataKey, string(r))
}

// code is the gRPC code of err; COSI's client wraps some errors in text only.
func code(err error) codes.Code {
	if c := status.Code(err); c != codes.Unknown || err == nil {
		return c
	}
	if strings.Contains(err.Error(), "code = PermissionDenied") {
		return codes.PermissionDenied
	}
	return codes.Unknown
}

var platformMetadata = runtime.NewPlatformMetadataSpec(runtime.NamespaceName, runtime.PlatformMetadataID).Metadata()

// TestSocketAuthorization drives Talos's own authorizers as machined
// composes them: only a registered extension service, asking with a role
// that may read, reads; nothing writes; sensitive resources need os:admin.
func TestSocketAuthorization(t *testing.T) {
	ctx := t.Context()
	p := start(t)
	n, err := p.Node(ctx, "auth-1")
	if err != nil {
		t.Fatal(err)
	}
	if err := n.SetPlatformMetadata(ctx, runtime.PlatformMetadataSpec{Platform: "metal", Hostname: "auth-1"}); err != nil {
		t.Fatal(err)
	}
	c := client(t, n.Socket)

	// Not registered: machined waits 5 s for the PID to appear, then refuses.
	began := time.Now()
	_, err = c.Get(withRole(ctx, role.Reader), platformMetadata)
	if code(err) != codes.PermissionDenied {
		t.Fatalf("unregistered caller: got %v, want PermissionDenied", err)
	}
	if waited := time.Since(began); waited < 4*time.Second {
		t.Errorf("refused after %s: machined waits 5 s for a starting service's PID", waited)
	}

	// Registered as ext-nodeinit-agent by PID (this process).
	if err := n.RegisterAgent(ctx, os.Getpid()); err != nil {
		t.Fatal(err)
	}
	r, err := safe.StateGet[*runtime.PlatformMetadata](withRole(ctx, role.Reader), c, platformMetadata)
	if err != nil {
		t.Fatalf("registered reader: %v", err)
	}
	if r.TypedSpec().Hostname != "auth-1" {
		t.Fatalf("read %+v", r.TypedSpec())
	}

	forged := k8s.NewNodename(k8s.NamespaceName, k8s.NodenameID)
	forged.TypedSpec().Nodename = "someone-else"
	refusals := []struct {
		name string
		do   func() error
	}{
		{"no talos-role metadata", func() error { _, err := c.Get(ctx, platformMetadata); return err }},
		{"watch without a role", func() error {
			ch := make(chan state.Event)
			wctx, cancel := context.WithCancel(ctx)
			defer cancel()
			if err := c.Watch(wctx, platformMetadata, ch); err != nil {
				return err
			}
			e := <-ch
			return e.Error
		}},
		{"write as os:reader", func() error {
			return c.Create(withRole(ctx, role.Reader), forged)
		}},
		{"write as os:admin (the access filter refuses every write)", func() error {
			return c.Create(withRole(ctx, role.Admin), forged)
		}},
		{"destroy as os:admin", func() error { return c.Destroy(withRole(ctx, role.Admin), platformMetadata) }},
		{"sensitive resource (machine config) as os:reader", func() error {
			_, err := c.List(withRole(ctx, role.Reader), config.NewMachineConfig(nil).Metadata())
			return err
		}},
		{"unregistered resource type", func() error {
			_, err := c.List(withRole(ctx, role.Reader), resource.NewMetadata(runtime.NamespaceName, "Forged.talos.dev", "", resource.VersionUndefined))
			return err
		}},
	}
	for _, tc := range refusals {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.do(); code(err) != codes.PermissionDenied {
				t.Fatalf("got %v, want PermissionDenied", err)
			}
		})
	}
	// The control for the sensitivity row: os:admin, which machined grants
	// extension services, may list machine configs.
	if _, err := c.List(withRole(ctx, role.Admin), config.NewMachineConfig(nil).Metadata()); err != nil {
		t.Errorf("os:admin listing machine configs: %v", err)
	}
	if _, err := n.State.Get(ctx, forged.Metadata()); !state.IsNotFoundError(err) {
		t.Fatalf("a refused create landed: %v", err)
	}
	if _, err := n.State.Get(ctx, platformMetadata); err != nil {
		t.Fatalf("a refused destroy landed: %v", err)
	}
}

// TestOnlyTheRegisteredProcess: a service registered by PID and mount
// namespace admits itself (and processes forked in its mount namespace),
// not another process in another mount namespace.
func TestOnlyTheRegisteredProcess(t *testing.T) {
	ctx := t.Context()
	p := start(t)
	n, err := p.Node(ctx, "auth-2")
	if err != nil {
		t.Fatal(err)
	}
	// The service runs in its own mount namespace, as an extension's
	// container does; this test process is another one.
	svc := exec.Command("unshare", "--mount", "--propagation", "unchanged", "sleep", "300")
	if err := svc.Start(); err != nil {
		t.Fatalf("unshare (util-linux) is needed: %v", err)
	}
	t.Cleanup(func() { _ = svc.Process.Kill(); _ = svc.Wait() })
	self, _ := os.Readlink("/proc/self/ns/mnt")
	if err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 5*time.Second, true, func(context.Context) (bool, error) {
		ns, _ := os.Readlink(fmt.Sprintf("/proc/%d/ns/mnt", svc.Process.Pid))
		return ns != "" && ns != self, nil
	}); err != nil {
		t.Fatalf("the service process did not enter its own mount namespace: %v", err)
	}
	if err := n.RegisterAgent(ctx, svc.Process.Pid); err != nil {
		t.Fatal(err)
	}
	_, err = client(t, n.Socket).List(withRole(ctx, role.Reader), platformMetadata)
	if code(err) != codes.PermissionDenied {
		t.Fatalf("a process that is not the registered service read machined: %v", err)
	}
}

// TestProcessRestart: the stand-in killed and started again republishes each
// node's facts and service PIDs, so a registered reader gets its facts back
// over the same socket, and a new process PID means new peer credentials.
func TestProcessRestart(t *testing.T) {
	ctx := t.Context()
	p := start(t)
	n, err := p.Node(ctx, "restart-1")
	if err != nil {
		t.Fatal(err)
	}
	if err := n.SetPlatformMetadata(ctx, runtime.PlatformMetadataSpec{Platform: "metal", Hostname: "restart-1"}); err != nil {
		t.Fatal(err)
	}
	if err := n.RegisterAgent(ctx, os.Getpid()); err != nil {
		t.Fatal(err)
	}
	before := p.PID()
	if err := p.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	if p.PID() == before {
		t.Fatal("Restart kept the old process")
	}
	r, err := safe.StateGet[*runtime.PlatformMetadata](withRole(ctx, role.Reader), client(t, n.Socket), platformMetadata)
	if err != nil {
		t.Fatalf("reading after the restart: %v", err)
	}
	if r.TypedSpec().Hostname != "restart-1" {
		t.Fatalf("after the restart: %+v", r.TypedSpec())
	}
}

// TestNodeRestartKeepsItsWriters: a node's machined stopped and served
// again, over and over, republishes its facts and takes new writes at once,
// though its control connection was cut under the writer's gRPC client.
func TestNodeRestartKeepsItsWriters(t *testing.T) {
	ctx := t.Context()
	p := start(t)
	n, err := p.Node(ctx, "again-1")
	if err != nil {
		t.Fatal(err)
	}
	for i := range 500 {
		md := runtime.PlatformMetadataSpec{Platform: "metal", Hostname: "again-1", Zone: fmt.Sprint("zone-", i)}
		if err := n.SetPlatformMetadata(ctx, md); err != nil {
			t.Fatalf("write %d, after %d restarts: %v", i, i, err)
		}
		if err := n.Restart(); err != nil {
			t.Fatalf("restart %d: %v", i+1, err)
		}
	}
	r, err := safe.StateGet[*runtime.PlatformMetadata](ctx, n.State, platformMetadata)
	if err != nil {
		t.Fatalf("after the last restart: %v", err)
	}
	if got := r.TypedSpec().Zone; got != "zone-499" {
		t.Fatalf("after the last restart: zone %q, want the last write republished (zone-499)", got)
	}
}
