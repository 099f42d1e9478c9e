// Command probe asks machined's own API for the node's services
// (MachineService.ServiceList, what `talosctl services` shows) and prints
// them as JSON. hack/talosnode runs it inside the agent's extension
// container (its mount namespace, which machined admits as the ext-*
// service's, as it would admit anything the agent forks): machined's
// socket admits only registered services, and apid, the usual way in,
// needs a trustd certificate the test control plane does not have.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/constants"
	"github.com/siderolabs/talos/pkg/machinery/role"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/emptypb"
)

// Service is one service as machined reports it.
type Service struct {
	ID      string   `json:"id"`
	State   string   `json:"state"`
	Healthy bool     `json:"healthy"`
	Events  []string `json:"events"`
}

func main() {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	conn, err := grpc.NewClient("unix://"+constants.MachineSocketPath, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		fmt.Fprintln(os.Stderr, "probe:", err)
		os.Exit(1)
	}
	defer conn.Close()
	// The role asked for, as the agent asks for it (apid would set it from
	// the client certificate).
	ctx = metadata.AppendToOutgoingContext(ctx, constants.APIAuthzRoleMetadataKey, string(role.Reader))
	resp, err := machine.NewMachineServiceClient(conn).ServiceList(ctx, &emptypb.Empty{})
	if err != nil {
		fmt.Fprintln(os.Stderr, "probe: machined's ServiceList:", err)
		os.Exit(1)
	}
	var out []Service
	for _, m := range resp.GetMessages() {
		for _, s := range m.GetServices() {
			svc := Service{ID: s.GetId(), State: s.GetState(), Healthy: s.GetHealth().GetHealthy()}
			for _, e := range s.GetEvents().GetEvents() {
				svc.Events = append(svc.Events, e.GetState()+": "+e.GetMsg())
			}
			out = append(out, svc)
		}
	}
	if err := json.NewEncoder(os.Stdout).Encode(out); err != nil {
		fmt.Fprintln(os.Stderr, "probe:", err)
		os.Exit(1)
	}
}
