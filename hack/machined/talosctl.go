package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"

	"github.com/cosi-project/runtime/pkg/resource"
	"github.com/cosi-project/runtime/pkg/state"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	"github.com/siderolabs/talos/cmd/talosctl/cmd/talos/output"
	"github.com/siderolabs/talos/cmd/talosctl/pkg/talos/helpers"
	"github.com/siderolabs/talos/pkg/grpc/middleware/authz"
	"github.com/siderolabs/talos/pkg/machinery/client"
	"github.com/siderolabs/talos/pkg/machinery/role"
)

// talosctlGet is `machined-standin talosctl-get`: `talosctl get TYPE [ID]`
// against one node's machine.sock, printed by talosctl's own code. It is
// the non-watch branch of getResources and listResources in Talos
// v1.14.1's cmd/talosctl/cmd/talos/get.go, step for step:
// helpers.ClientVersionCheck, output.NewWriter(format) (cmd/talosctl/cmd/talos/output;
// "yaml" is output.YAML, which writes "node: NODE", then
// resource.MarshalYAML of the resource, through go.yaml.in/yaml/v4),
// ResolveResourceKind, and COSI List or Get per node with the Protobuf
// unmarshalling skipped, exactly as talosctl does.
//
// Only the connection differs from talosctl's WithClient: machined's socket
// is a unix socket without TLS, dialed as Talos's own on-node clients dial it
// (internal/app/dashboard/main.go: client.WithUnixSocket, insecure transport
// credentials, the roles set with authz.SetMetadata). The caller must be
// registered with the node, as the agent's extension service is (ext-*
// also admits processes in its mount namespace, so a child of the
// registered process may call). --nodes fills what talosctl's --nodes
// (or the talosconfig context) would: the "nodes" metadata, which is what
// the writer prints after "node:"; machined itself ignores it, as apid
// would have consumed it.
func talosctlGet(args []string) int {
	fs := flag.NewFlagSet("talosctl-get", flag.ContinueOnError)
	socket := fs.String("socket", "", "the node's machine.sock")
	typ := fs.String("type", "", "resource type, ID or alias, as `talosctl get TYPE` takes it (e.g. platformmetadata)")
	id := fs.String("id", "", "resource ID (talosctl get TYPE ID); empty lists all of the type")
	namespace := fs.String("namespace", "", "resource namespace (default is to use default namespace per resource)")
	format := fs.String("output", "yaml", "output mode (json, table, yaml, jsonpath=...), as talosctl get -o")
	fs.StringVar(format, "o", "yaml", "shorthand for --output")
	nodes := fs.String("nodes", "", "comma-separated node names for the \"node:\" field, as talosctl --nodes (empty: talosctl with no nodes, \"node: \")")
	roles := fs.String("roles", string(role.Reader), "comma-separated roles sent in the talos-role metadata")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: machined-standin talosctl-get --socket PATH --type TYPE [--id ID] [-o yaml] [--nodes N]\n\n"+
			"Print a node's resources exactly as `talosctl get TYPE [ID] -o FORMAT` does, with talosctl's own code\n"+
			"(Talos v1.14.1 cmd/talosctl), over machined's socket with the os:reader role.\n\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *socket == "" || *typ == "" || fs.NArg() > 0 {
		fs.Usage()
		return 2
	}
	getArgs := []string{*typ}
	if *id != "" {
		getArgs = append(getArgs, *id)
	}
	set, unknown := role.Parse(split(*roles))
	if len(unknown) > 0 {
		fmt.Fprintf(os.Stderr, "error: unknown roles %s\n", strings.Join(unknown, ", "))
		return 2
	}
	if err := runTalosctlGet(context.Background(), *socket, split(*nodes), set, *namespace, *format, getArgs); err != nil {
		fmt.Fprintf(os.Stderr, "error: %s\n", err)
		return 1
	}
	return 0
}

func split(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(s, ",")
}

func runTalosctlGet(ctx context.Context, socket string, nodes []string, roles role.Set, namespace, format string, args []string) error {
	md := metadata.Pairs()
	authz.SetMetadata(md, roles)
	ctx = metadata.NewOutgoingContext(ctx, md)
	c, err := client.New(ctx,
		client.WithUnixSocket(socket),
		client.WithGRPCDialOptions(grpc.WithTransportCredentials(insecure.NewCredentials())),
	)
	if err != nil {
		return fmt.Errorf("error connecting to the machine service: %w", err)
	}
	defer c.Close() //nolint:errcheck
	if len(nodes) == 0 {
		nodes = []string{""} // talosctl without --nodes: one client, "node: "
	}
	factory := &clientFactory{c: c, nodes: nodes}

	// From here on, getResources and listResources (get.go) for
	// `get TYPE [ID]` without -w.
	if err := helpers.ClientVersionCheck(ctx, factory); err != nil {
		return err
	}
	out, err := output.NewWriter(format, os.Stdout)
	if err != nil {
		return err
	}
	defer out.Flush() //nolint:errcheck
	firstCtx, firstC, err := factory.BuildClient(ctx, nodes[0])
	if err != nil {
		return err
	}
	rd, err := firstC.ResolveResourceKind(firstCtx, &namespace, args[0])
	if err != nil {
		return err
	}
	if err := out.WriteHeader(rd, false); err != nil {
		return err
	}
	var errs error
	for _, node := range nodes {
		nodeCtx, nodeClient, err := factory.BuildClient(ctx, node)
		if err != nil {
			errs = errors.Join(errs, err)
			continue
		}
		if len(args) == 1 {
			items, err := nodeClient.COSI.List(nodeCtx, resource.NewMetadata(namespace, rd.TypedSpec().Type, "", resource.VersionUndefined),
				state.WithListUnmarshalOptions(state.WithSkipProtobufUnmarshal()))
			if err != nil {
				errs = errors.Join(errs, fmt.Errorf("error listing resources on node %s: %w", node, err))
				continue
			}
			for _, item := range items.Items {
				errs = errors.Join(errs, out.WriteResource(node, item, 0))
			}
			continue
		}
		r, err := nodeClient.COSI.Get(nodeCtx, resource.NewMetadata(namespace, rd.TypedSpec().Type, args[1], resource.VersionUndefined),
			state.WithGetUnmarshalOptions(state.WithSkipProtobufUnmarshal()))
		if err != nil {
			errs = errors.Join(errs, fmt.Errorf("error getting resource on node %s: %w", node, err))
			continue
		}
		errs = errors.Join(errs, out.WriteResource(node, r, 0))
	}
	return errs
}

// clientFactory is talosctl's global.ClientFactory for one connection: a
// node's client is the connection with the node in its metadata
// (client.WithNode, as talosctl's BuildClient sets it).
type clientFactory struct {
	c     *client.Client
	nodes []string
}

func (f *clientFactory) BuildClient(ctx context.Context, node string) (context.Context, *client.Client, error) {
	if node != "" {
		ctx = client.WithNode(ctx, node)
	}
	return ctx, f.c, nil
}

func (f *clientFactory) Nodes() []string { return f.nodes }
