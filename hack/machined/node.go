package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"

	"github.com/cosi-project/runtime/api/v1alpha1"
	"github.com/cosi-project/runtime/pkg/resource/meta"
	"github.com/cosi-project/runtime/pkg/state"
	"github.com/cosi-project/runtime/pkg/state/impl/inmem"
	"github.com/cosi-project/runtime/pkg/state/impl/namespaced"
	"github.com/cosi-project/runtime/pkg/state/protobuf/server"
	"github.com/cosi-project/runtime/pkg/state/registry"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/siderolabs/talos/pkg/grpc/factory"
	"github.com/siderolabs/talos/pkg/grpc/middleware/auth/unix"
	"github.com/siderolabs/talos/pkg/grpc/middleware/authz"
	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/constants"
	"github.com/siderolabs/talos/pkg/machinery/resources/config"
	"github.com/siderolabs/talos/pkg/machinery/resources/hardware"
	"github.com/siderolabs/talos/pkg/machinery/resources/k8s"
	"github.com/siderolabs/talos/pkg/machinery/resources/network"
	"github.com/siderolabs/talos/pkg/machinery/resources/runtime"
	"github.com/siderolabs/talos/pkg/machinery/resources/secrets"
	"github.com/siderolabs/talos/pkg/machinery/role"
	"github.com/siderolabs/talos/pkg/machinery/version"
)

// node is one simulated node's machined.
type node struct {
	socket, control string
	api, ctl        *grpc.Server
	dir             string
}

// namespaces are the Talos namespaces the served resources live in
// (machined registers these among others, v1alpha2_state.go).
var namespaces = []struct{ name, description string }{
	{config.NamespaceName, "Talos node configuration."},
	{hardware.NamespaceName, "Hardware resources."},
	{k8s.NamespaceName, "Kubernetes all node types resources."},
	{network.NamespaceName, "Networking resources."},
	{runtime.NamespaceName, "Talos runtime resources."},
	{secrets.NamespaceName, "Resources with secret material."},
}

// resources are the registered types: what the agent reads, the ServicePIDs
// the authorizer matches, and two sensitive types (machine config, kubelet
// secrets) that os:reader must not read.
var resources = []meta.ResourceWithRD{
	&runtime.PlatformMetadata{},
	&hardware.SystemInformation{},
	&k8s.Nodename{},
	&k8s.NodeIP{},
	&k8s.NodeIPConfig{},
	&network.AddressStatus{},
	&runtime.ServicePID{},
	&config.MachineConfig{},
	&secrets.Kubelet{},
}

func newState(ctx context.Context) (state.State, error) {
	st := state.WrapCore(namespaced.NewState(inmem.Build))
	nsr := registry.NewNamespaceRegistry(st)
	rr := registry.NewResourceRegistry(st)
	if err := nsr.RegisterDefault(ctx); err != nil {
		return nil, err
	}
	if err := rr.RegisterDefault(ctx); err != nil {
		return nil, err
	}
	for _, ns := range namespaces {
		if err := nsr.Register(ctx, ns.name, ns.description); err != nil {
			return nil, err
		}
	}
	for _, r := range resources {
		if err := rr.Register(ctx, r); err != nil {
			return nil, err
		}
	}
	return st, nil
}

// versionServer answers MachineService.Version as machined does
// (v1alpha1_server.go: version.NewVersion()); talosctl asks it before
// `get` since Talos 1.14. Every other machine RPC is unimplemented here.
type versionServer struct {
	machine.UnimplementedMachineServiceServer
}

func (versionServer) Version(context.Context, *emptypb.Empty) (*machine.VersionResponse, error) {
	return &machine.VersionResponse{Messages: []*machine.Version{{Version: version.NewVersion()}}}, nil
}

type registrator func(*grpc.Server)

func (r registrator) Register(s *grpc.Server) { r(s) }

func startNode(ctx context.Context, dir, name string, verbose bool) (*node, error) {
	st, err := newState(context.WithoutCancel(ctx))
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o771); err != nil {
		return nil, err
	}
	n := &node{dir: dir, socket: filepath.Join(dir, "machine.sock"), control: filepath.Join(dir, "control.sock")}

	var logw io.Writer = io.Discard
	if verbose {
		logw = os.Stderr
	}
	// As machined.go (v1.14.1) builds it: injector → PID authorizer → role
	// rules. Talos 1.14 logs authorization through grpclog annotations on
	// the request line (factory.WithLog), not through loggers of their own.
	injector := &authz.Injector{Mode: authz.MetadataOnly, Verbose: verbose}
	authorizer := &authz.Authorizer{Rules: rules, FallbackRoles: role.MakeSet(role.Admin)}
	pidAuthorizer := &unix.Authorizer{Resources: st, AllowedServices: allowedServices}
	filtered := state.WrapCore(state.Filter(st, accessPolicy(st)))
	n.api = factory.NewServer(registrator(func(s *grpc.Server) {
		v1alpha1.RegisterStateServer(s, server.NewState(filtered))
		machine.RegisterMachineServiceServer(s, versionServer{})
	}),
		factory.ServerOptions(grpc.MaxRecvMsgSize(constants.GRPCMaxMessageSize), grpc.Creds(unix.NewServerCredentials())),
		factory.WithUnaryInterceptor(injector.UnaryInterceptor()),
		factory.WithStreamInterceptor(injector.StreamInterceptor()),
		factory.WithUnaryInterceptor(pidAuthorizer.UnaryInterceptor()),
		factory.WithStreamInterceptor(pidAuthorizer.StreamInterceptor()),
		factory.WithUnaryInterceptor(authorizer.UnaryInterceptor()),
		factory.WithStreamInterceptor(authorizer.StreamInterceptor()),
		factory.WithLog(name+" machined ", logw),
	)
	n.ctl = grpc.NewServer()
	v1alpha1.RegisterStateServer(n.ctl, server.NewState(st))

	for _, s := range []struct {
		path string
		srv  *grpc.Server
	}{{n.socket, n.api}, {n.control, n.ctl}} {
		_ = os.Remove(s.path)
		l, err := net.Listen("unix", s.path)
		if err != nil {
			n.close()
			return nil, fmt.Errorf("listen %s: %w", s.path, err)
		}
		go func() { _ = s.srv.Serve(l) }()
	}
	return n, nil
}

func (n *node) close() {
	for _, s := range []*grpc.Server{n.api, n.ctl} {
		if s != nil {
			s.Stop()
		}
	}
	_ = os.RemoveAll(n.dir)
}
