// Command machined-standin serves machined's API socket the way Talos
// v1.14.1's machined does, from Talos's own public packages, for many
// simulated nodes at once. Each node gets its own COSI state and two sockets:
//
//   - machine.sock, machined's socket as an extension service sees it:
//     SO_PEERCRED credentials (pkg/grpc/middleware/auth/unix), then the role
//     injector, the PID/mount-namespace authorizer against runtime.ServicePID
//     resources and the per-method role rules (pkg/grpc/middleware/authz), in
//     machined's order (internal/app/machined/pkg/system/services/machined.go),
//     and the COSI state behind machined's access filter (read-only, no
//     sensitive resource without os:admin, registered types and namespaces
//     only; internal/app/resources/access.go, rebuilt in access.go here).
//   - control.sock, the same state with no authorization: what machined's own
//     controllers write. Tests set facts and register service PIDs there, as
//     machined's runner does (ServicePID: PID and mount namespace).
//
// Nodes are created and removed over an HTTP API on DIR/admin.sock:
// PUT /nodes/NAME, DELETE /nodes/NAME, GET /healthz. State lives in memory:
// a restarted stand-in starts empty, as machined's controllers rebuild theirs.
//
// `machined-standin talosctl-get --socket PATH --type TYPE` is a client
// instead: it prints a node's resources as `talosctl get TYPE -o yaml` does,
// with talosctl's own code (talosctl.go).
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"

	"k8s.io/apimachinery/pkg/util/validation"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "talosctl-get" {
		os.Exit(talosctlGet(os.Args[2:]))
	}
	dir := flag.String("dir", "", "directory for admin.sock and each node's sockets (keep it short: unix socket paths are limited to 108 bytes)")
	verbose := flag.Bool("v", false, "log every authorization decision, as machined's authorizers do")
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "Usage: machined-standin --dir DIR [-v]\n       machined-standin talosctl-get --socket PATH --type TYPE [--id ID] [-o FORMAT] [--nodes N]\n\nServe machined's API socket (Talos v1.14.1's authorization) for simulated nodes,\nor print a node's resources as `talosctl get` does (talosctl-get -h).\n\n")
		flag.PrintDefaults()
	}
	flag.Parse()
	if *dir == "" {
		flag.Usage()
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	if err := run(ctx, *dir, *verbose); err != nil {
		log.Fatal(err)
	}
}

func run(ctx context.Context, dir string, verbose bool) error {
	if err := os.MkdirAll(filepath.Join(dir, "n"), 0o755); err != nil {
		return err
	}
	admin := filepath.Join(dir, "admin.sock")
	_ = os.Remove(admin)
	l, err := net.Listen("unix", admin)
	if err != nil {
		return err
	}
	f := &fleet{dir: dir, verbose: verbose, nodes: map[string]*node{}}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	mux.HandleFunc("PUT /nodes/{name}", f.put)
	mux.HandleFunc("DELETE /nodes/{name}", f.delete)
	srv := &http.Server{Handler: mux}
	go func() {
		<-ctx.Done()
		_ = srv.Close()
	}()
	log.Printf("machined-standin: serving %s", admin)
	err = srv.Serve(l)
	f.closeAll()
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

type fleet struct {
	dir     string
	verbose bool
	mu      sync.Mutex
	nodes   map[string]*node
}

// Sockets is the answer to PUT /nodes/NAME.
type Sockets struct {
	Socket  string `json:"socket"`
	Control string `json:"control"`
}

func (f *fleet) put(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	if errs := validation.IsDNS1123Subdomain(name); len(errs) > 0 || strings.Contains(name, "/") {
		http.Error(w, fmt.Sprintf("node name %q: %s", name, strings.Join(errs, "; ")), http.StatusBadRequest)
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	n, ok := f.nodes[name]
	if !ok {
		var err error
		n, err = startNode(r.Context(), filepath.Join(f.dir, "n", name), name, f.verbose)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		f.nodes[name] = n
	}
	_ = json.NewEncoder(w).Encode(Sockets{Socket: n.socket, Control: n.control})
}

func (f *fleet) delete(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	n, ok := f.nodes[r.PathValue("name")]
	delete(f.nodes, r.PathValue("name"))
	f.mu.Unlock()
	if !ok {
		http.Error(w, "no such node", http.StatusNotFound)
		return
	}
	n.close()
	w.WriteHeader(http.StatusNoContent)
}

func (f *fleet) closeAll() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for name, n := range f.nodes {
		n.close()
		delete(f.nodes, name)
	}
}
