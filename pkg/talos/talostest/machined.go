// Package talostest stands in for Talos's machined in tests: an in-memory
// COSI state holding machinery's own resource types, served by
// cosi-project/runtime's gRPC state server on a unix socket, which machinery's
// client (client.WithUnixSocket) reads unchanged.
package talostest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/cosi-project/runtime/api/v1alpha1"
	"github.com/cosi-project/runtime/pkg/resource"
	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/cosi-project/runtime/pkg/state"
	"github.com/cosi-project/runtime/pkg/state/impl/inmem"
	"github.com/cosi-project/runtime/pkg/state/impl/namespaced"
	"github.com/cosi-project/runtime/pkg/state/protobuf/server"
	"github.com/siderolabs/talos/pkg/machinery/constants"
	"github.com/siderolabs/talos/pkg/machinery/nethelpers"
	"github.com/siderolabs/talos/pkg/machinery/resources/hardware"
	"github.com/siderolabs/talos/pkg/machinery/resources/k8s"
	"github.com/siderolabs/talos/pkg/machinery/resources/network"
	"github.com/siderolabs/talos/pkg/machinery/resources/runtime"
	"github.com/siderolabs/talos/pkg/machinery/role"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/talos-nodeinit/talos-nodeinit/pkg/talos"
)

// ExternalLink is the pseudo-link Talos puts cloud public IPs on.
const ExternalLink = talos.ExternalLink

// Machined is a running stand-in. Its state survives Stop/Start, so a test
// can simulate machined restarting while the agent keeps its watches.
type Machined struct {
	// Socket is the unix socket path, like /system/run/machined/machine.sock.
	Socket string
	// Resources gives direct access to the in-memory state (its State field)
	// and writes facts into it.
	Resources
	// Unsupported are resource types this machined does not serve, refused
	// as machined's access filter refuses a type it has not registered
	// (a Talos without it). Set before Serve.
	Unsupported []resource.Type

	dir   string
	calls atomic.Int64

	mu  sync.Mutex
	srv *grpc.Server
}

// Start creates the state and serves it. The socket lives in a short
// directory under /tmp: unix socket paths are limited to ~108 bytes.
func Start() (*Machined, error) { return StartWithout() }

// StartWithout is Start for a machined that does not serve the given
// resource types (Unsupported).
func StartWithout(unsupported ...resource.Type) (*Machined, error) {
	dir, err := os.MkdirTemp("/tmp", "md-")
	if err != nil {
		return nil, err
	}
	m := &Machined{
		Socket:      filepath.Join(dir, "machine.sock"),
		Resources:   Resources{State: state.WrapCore(namespaced.NewState(inmem.Build))},
		dir:         dir,
		Unsupported: unsupported,
	}
	if err := m.Serve(); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	return m, nil
}

// Serve starts serving the state on the socket (again, after Stop).
func (m *Machined) Serve() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.srv != nil {
		return errors.New("talostest: already serving")
	}
	_ = os.Remove(m.Socket)
	l, err := net.Listen("unix", m.Socket)
	if err != nil {
		return err
	}
	srv := grpc.NewServer(
		grpc.UnaryInterceptor(func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			if err := m.authorize(ctx); err != nil {
				return nil, err
			}
			return h(ctx, req)
		}),
		grpc.StreamInterceptor(func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
			if err := m.authorize(ss.Context()); err != nil {
				return err
			}
			return h(srv, ss)
		}),
	)
	st := m.State
	if len(m.Unsupported) > 0 {
		unsupported := slices.Clone(m.Unsupported)
		st = state.WrapCore(state.Filter(m.State, func(_ context.Context, access state.Access) error {
			if slices.Contains(unsupported, access.ResourceType) {
				return status.Error(codes.PermissionDenied, fmt.Sprintf("resource type %q is not supported", access.ResourceType))
			}
			return nil
		}))
	}
	v1alpha1.RegisterStateServer(srv, server.NewState(st))
	m.srv = srv
	go func() { _ = srv.Serve(l) }()
	return nil
}

// authorize demands the talos-role metadata, as machined's socket does for
// extension services: a caller without a role that may read is refused.
func (m *Machined) authorize(ctx context.Context) error {
	m.calls.Add(1)
	md, _ := metadata.FromIncomingContext(ctx)
	for _, r := range md.Get(constants.APIAuthzRoleMetadataKey) {
		switch role.Role(r) {
		case role.Reader, role.Operator, role.Admin:
			return nil
		}
	}
	return status.Errorf(codes.PermissionDenied, "talostest: missing %s metadata with a reader role", constants.APIAuthzRoleMetadataKey)
}

// Calls is how many gRPC calls (unary and streams) the stand-in has served.
func (m *Machined) Calls() int64 { return m.calls.Load() }

// Stop stops serving and removes the socket, cutting open watches: machined
// going away. The state is kept.
func (m *Machined) Stop() {
	m.mu.Lock()
	srv := m.srv
	m.srv = nil
	m.mu.Unlock()
	if srv != nil {
		srv.Stop()
	}
	_ = os.Remove(m.Socket)
}

// Close stops serving and removes the socket directory.
func (m *Machined) Close() {
	m.Stop()
	_ = os.RemoveAll(m.dir)
}

// Resources writes the facts machined's controllers publish into a COSI
// state: this stand-in's, or the real-authorizer stand-in's (hack/machined)
// through its control socket.
type Resources struct {
	State state.State
}

// SetPlatformMetadata creates or replaces PlatformMetadata (runtime namespace).
func (m Resources) SetPlatformMetadata(ctx context.Context, spec runtime.PlatformMetadataSpec) error {
	return safe.StateModify(ctx, m.State, runtime.NewPlatformMetadataSpec(runtime.NamespaceName, runtime.PlatformMetadataID),
		func(r *runtime.PlatformMetadata) error { *r.TypedSpec() = spec; return nil })
}

// SetSystemInformation creates or replaces SystemInformation (hardware namespace).
func (m Resources) SetSystemInformation(ctx context.Context, spec hardware.SystemInformationSpec) error {
	return safe.StateModify(ctx, m.State, hardware.NewSystemInformation(hardware.SystemInformationID),
		func(r *hardware.SystemInformation) error { *r.TypedSpec() = spec; return nil })
}

// SetNodename creates or replaces the kubelet's Nodename.
func (m Resources) SetNodename(ctx context.Context, name string) error {
	return safe.StateModify(ctx, m.State, k8s.NewNodename(k8s.NamespaceName, k8s.NodenameID),
		func(r *k8s.Nodename) error {
			r.TypedSpec().Nodename = name
			r.TypedSpec().HostnameVersion = "1"
			return nil
		})
}

// SetNodeIPs creates or replaces the kubelet's NodeIP.
func (m Resources) SetNodeIPs(ctx context.Context, ips ...netip.Addr) error {
	return safe.StateModify(ctx, m.State, k8s.NewNodeIP(k8s.NamespaceName, k8s.KubeletID),
		func(r *k8s.NodeIP) error { r.TypedSpec().Addresses = slices.Clone(ips); return nil })
}

// SetNodeIPConfig creates or replaces the kubelet's NodeIPConfig: Talos
// lists the pod and service CIDRs, then its shared VIPs, in ExcludeSubnets.
func (m Resources) SetNodeIPConfig(ctx context.Context, excludeSubnets ...string) error {
	return safe.StateModify(ctx, m.State, k8s.NewNodeIPConfig(k8s.NamespaceName, k8s.KubeletID),
		func(r *k8s.NodeIPConfig) error {
			r.TypedSpec().ExcludeSubnets = slices.Clone(excludeSubnets)
			return nil
		})
}

// SetExternalAddresses makes the AddressStatus resources on the "external"
// link exactly the given prefixes, creating and destroying as needed.
func (m Resources) SetExternalAddresses(ctx context.Context, prefixes ...netip.Prefix) error {
	want := map[resource.ID]netip.Prefix{}
	for _, p := range prefixes {
		want[network.AddressID(ExternalLink, p)] = p
	}
	existing, err := safe.StateListAll[*network.AddressStatus](ctx, m.State)
	if err != nil {
		return err
	}
	for r := range existing.All() {
		if _, keep := want[r.Metadata().ID()]; !keep && r.TypedSpec().LinkName == ExternalLink {
			if err := m.State.Destroy(ctx, r.Metadata()); err != nil {
				return err
			}
		}
	}
	for id, p := range want {
		err := safe.StateModify(ctx, m.State, network.NewAddressStatus(network.NamespaceName, id), func(r *network.AddressStatus) error {
			spec := r.TypedSpec()
			spec.Address, spec.Local, spec.LinkName = p, p.Addr(), ExternalLink
			spec.Family, spec.Scope = nethelpers.FamilyInet4, nethelpers.ScopeGlobal
			if p.Addr().Is6() {
				spec.Family = nethelpers.FamilyInet6
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("external address %s: %w", p, err)
		}
	}
	return nil
}

// Delete removes a resource; tests use it to drive watch deletions.
func (m Resources) Delete(ctx context.Context, ptr resource.Pointer) error {
	return m.State.Destroy(ctx, ptr)
}

// RegisterService records a running service's PID and mount namespace as
// machined's runner does (runtime.ServicePID, internal/app/machined/pkg/system/pid):
// machined's socket authorizes a caller by them. Extension services are
// registered as "ext-<name>".
func (m Resources) RegisterService(ctx context.Context, id string, pid int) error {
	mountNamespace, _ := os.Readlink(fmt.Sprintf("/proc/%d/ns/mnt", pid))
	return safe.StateModify(ctx, m.State, runtime.NewServicePID(id), func(r *runtime.ServicePID) error {
		r.TypedSpec().PID = int32(pid)
		r.TypedSpec().MountNamespace = mountNamespace
		return nil
	})
}

// UnregisterService removes a service's PID, as the runner does when it stops.
func (m Resources) UnregisterService(ctx context.Context, id string) error {
	err := m.State.Destroy(ctx, runtime.NewServicePID(id).Metadata())
	if state.IsNotFoundError(err) {
		return nil
	}
	return err
}
