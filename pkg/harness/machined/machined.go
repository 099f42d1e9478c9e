// Package machined runs the real-authorizer machined stand-in (hack/machined,
// built from Talos v1.13.7's own socket authorization) as a process, and
// gives tests one Node per simulated node: its socket, as an extension
// service sees it, and its facts, written through the stand-in's control
// socket as machined's controllers and service runner would.
package machined

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/cosi-project/runtime/api/v1alpha1"
	"github.com/cosi-project/runtime/pkg/resource"
	"github.com/cosi-project/runtime/pkg/state"
	cosiclient "github.com/cosi-project/runtime/pkg/state/protobuf/client"
	"github.com/siderolabs/talos/pkg/machinery/resources/hardware"
	"github.com/siderolabs/talos/pkg/machinery/resources/k8s"
	"github.com/siderolabs/talos/pkg/machinery/resources/network"
	"github.com/siderolabs/talos/pkg/machinery/resources/runtime"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/talos-nodeinit/talos-nodeinit/pkg/harness/testcluster"
	"github.com/talos-nodeinit/talos-nodeinit/pkg/talos/talostest"
)

// AgentService is the ServicePID id machined's runner gives the agent's
// extension service (ext- and the service name).
const AgentService = "ext-nodeinit-agent"

var binary = sync.OnceValues(findBinary)

// Binary returns the stand-in's path: $MACHINED_STANDIN, else what
// hack/machined/build.sh builds or reuses from its cache.
func Binary() (string, error) { return binary() }

func findBinary() (string, error) {
	if p := os.Getenv("MACHINED_STANDIN"); p != "" {
		if _, err := os.Stat(p); err != nil {
			return "", fmt.Errorf("MACHINED_STANDIN: %w", err)
		}
		return p, nil
	}
	root, err := testcluster.RepoRoot()
	if err != nil {
		return "", err
	}
	script := filepath.Join(root, "hack", "machined", "build.sh")
	var out bytes.Buffer
	cmd := exec.Command("bash", script)
	cmd.Stdout, cmd.Stderr = &out, os.Stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("building the machined stand-in with %s: %w (run it by hand to see why)", script, err)
	}
	return strings.TrimSpace(out.String()), nil
}

// Process is a running stand-in serving many nodes.
type Process struct {
	// Dir holds admin.sock and each node's sockets.
	Dir string
	bin string
	log io.Writer

	mu    sync.Mutex
	cmd   *exec.Cmd
	done  chan struct{}
	http  *http.Client
	nodes map[string]*Node
}

// Start builds (or reuses) and starts the stand-in. Its log goes to logw
// (nil: discarded).
func Start(logw io.Writer) (*Process, error) {
	bin, err := Binary()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("/tmp", "mds-") // short: unix socket paths are limited to 108 bytes
	if err != nil {
		return nil, err
	}
	if logw == nil {
		logw = io.Discard
	}
	admin := filepath.Join(dir, "admin.sock")
	p := &Process{Dir: dir, bin: bin, log: logw, nodes: map[string]*Node{}, http: &http.Client{
		Timeout: 30 * time.Second,
		Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", admin)
		}},
	}}
	if err := p.start(); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	return p, nil
}

func (p *Process) start() error {
	cmd := exec.Command(p.bin, "--dir", p.Dir)
	cmd.Stdout, cmd.Stderr = p.log, p.log
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return err
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	p.cmd, p.done = cmd, done
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := p.http.Get("http://machined/healthz")
		if err == nil {
			resp.Body.Close()
			return nil
		}
		select {
		case <-done:
			return fmt.Errorf("machined stand-in exited: %v", cmd.ProcessState)
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("machined stand-in not serving after 30s: %w", err)
		}
	}
}

// PID is the stand-in's process ID.
func (p *Process) PID() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cmd.Process.Pid
}

// Node creates (or returns) the named node's machined.
func (p *Process) Node(ctx context.Context, name string) (*Node, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if n, ok := p.nodes[name]; ok {
		return n, nil
	}
	socks, err := p.put(ctx, name)
	if err != nil {
		return nil, err
	}
	conn, err := grpc.NewClient("unix://"+socks.Control, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, err
	}
	n := &Node{Name: name, Socket: socks.Socket, conn: conn, p: p,
		Resources: talostest.Resources{State: state.WrapCore(cosiclient.NewAdapter(v1alpha1.NewStateClient(conn)))}}
	p.nodes[name] = n
	return n, nil
}

type sockets struct {
	Socket  string `json:"socket"`
	Control string `json:"control"`
}

func (p *Process) put(ctx context.Context, name string) (sockets, error) {
	var s sockets
	body, err := p.admin(ctx, http.MethodPut, name)
	if err != nil {
		return s, err
	}
	return s, json.Unmarshal(body, &s)
}

// admin creates (PUT) or removes (DELETE) a node in the stand-in.
func (p *Process) admin(ctx context.Context, method, name string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, method, "http://machined/nodes/"+name, nil)
	if err != nil {
		return nil, err
	}
	resp, err := p.http.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode/100 != 2 {
		return nil, fmt.Errorf("machined stand-in: %s node %s: %s", method, name, strings.TrimSpace(string(body)))
	}
	return body, nil
}

// kinds are what a restart carries over: what machined's controllers and
// runner would publish again.
var kinds = []resource.Kind{
	runtime.NewPlatformMetadataSpec(runtime.NamespaceName, runtime.PlatformMetadataID).Metadata(),
	hardware.NewSystemInformation(hardware.SystemInformationID).Metadata(),
	k8s.NewNodename(k8s.NamespaceName, k8s.NodenameID).Metadata(),
	k8s.NewNodeIP(k8s.NamespaceName, k8s.KubeletID).Metadata(),
	k8s.NewNodeIPConfig(k8s.NamespaceName, k8s.KubeletID).Metadata(),
	network.NewAddressStatus(network.NamespaceName, "").Metadata(),
	runtime.NewServicePID("").Metadata(),
}

// Restart kills the stand-in (cutting every socket and watch, as machined
// going away does), starts it again and republishes every node's resources,
// as machined's controllers and runner rebuild them.
func (p *Process) Restart(ctx context.Context) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	saved := map[string][]resource.Resource{}
	for name, n := range p.nodes {
		var err error
		if saved[name], err = n.save(ctx); err != nil {
			return err
		}
	}
	_ = p.cmd.Process.Kill()
	<-p.done
	if err := p.start(); err != nil {
		return err
	}
	for name, n := range p.nodes {
		if err := n.republish(ctx, saved[name]); err != nil {
			return err
		}
	}
	return nil
}

// Close stops the stand-in and removes its directory.
func (p *Process) Close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, n := range p.nodes {
		n.conn.Close()
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
	_ = os.RemoveAll(p.Dir)
}

// Node is one simulated node's machined.
type Node struct {
	Name string
	// Socket is machined's socket as the node's extension services see it
	// (/system/run/machined/machine.sock on Talos).
	Socket string
	// Resources writes the node's facts and service PIDs.
	talostest.Resources
	conn *grpc.ClientConn
	p    *Process

	mu      sync.Mutex
	saved   []resource.Resource
	stopErr error
}

// save reads what a restart carries over.
func (n *Node) save(ctx context.Context) ([]resource.Resource, error) {
	var saved []resource.Resource
	for _, k := range kinds {
		list, err := n.State.List(ctx, resource.NewMetadata(k.Namespace(), k.Type(), "", resource.VersionUndefined))
		if err != nil {
			return nil, fmt.Errorf("saving %s of %s: %w", k.Type(), n.Name, err)
		}
		saved = append(saved, list.Items...)
	}
	return saved, nil
}

// republish creates the node in the stand-in again and writes saved back.
func (n *Node) republish(ctx context.Context, saved []resource.Resource) error {
	if _, err := n.p.put(ctx, n.Name); err != nil {
		return err
	}
	for _, r := range saved {
		r = r.DeepCopy()
		r.Metadata().SetVersion(resource.VersionUndefined)
		if err := n.create(ctx, r); err != nil {
			return fmt.Errorf("republishing %s of %s: %w", r.Metadata().Type(), n.Name, err)
		}
	}
	return nil
}

// create writes r, again while the call fails Unavailable: the stand-in cut the control
// connection under the client, which may notice only as a call on it fails. That call reached,
// if anything, the old node's state, which went with it, so a retry writes nothing twice.
func (n *Node) create(ctx context.Context, r resource.Resource) error {
	for {
		err := n.State.Create(ctx, r)
		if status.Code(err) != codes.Unavailable {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// Stop is this node's machined going away: its sockets close, cutting its
// clients' calls and watches, while the stand-in's other nodes keep serving.
// Its resources are kept for Serve; until then the setters fail.
func (n *Node) Stop() {
	n.mu.Lock()
	defer n.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	n.saved, n.stopErr = n.save(ctx)
	if n.stopErr == nil {
		_, n.stopErr = n.p.admin(ctx, http.MethodDelete, n.Name)
	}
}

// Serve is this node's machined coming back after Stop, as machined's
// controllers and runner rebuild it: the same socket, its facts and service
// PIDs republished. It returns Stop's error, if any.
func (n *Node) Serve() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if err := n.stopErr; err != nil {
		n.stopErr = nil
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := n.republish(ctx, n.saved)
	n.saved = nil
	return err
}

// Restart is Stop, then Serve.
func (n *Node) Restart() error {
	n.Stop()
	return n.Serve()
}

// RegisterAgent records pid as the agent's extension service, as machined's
// runner does when it starts the service (again after every restart).
func (n *Node) RegisterAgent(ctx context.Context, pid int) error {
	return n.RegisterService(ctx, AgentService, pid)
}
