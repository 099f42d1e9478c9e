package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/resources/runtime"
	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/talos-nodeinit/talos-nodeinit/agent/controller"
	"github.com/talos-nodeinit/talos-nodeinit/coordinator/records"
	"github.com/talos-nodeinit/talos-nodeinit/pkg/agentkey"
	"github.com/talos-nodeinit/talos-nodeinit/pkg/apiclient"
	"github.com/talos-nodeinit/talos-nodeinit/pkg/contract"
	"github.com/talos-nodeinit/talos-nodeinit/pkg/desired"
	"github.com/talos-nodeinit/talos-nodeinit/pkg/harness/daemon"
	"github.com/talos-nodeinit/talos-nodeinit/pkg/harness/gobuild"
	"github.com/talos-nodeinit/talos-nodeinit/pkg/harness/kubeapply"
	"github.com/talos-nodeinit/talos-nodeinit/pkg/harness/kubeletsim"
	"github.com/talos-nodeinit/talos-nodeinit/pkg/harness/machined"
	"github.com/talos-nodeinit/talos-nodeinit/pkg/harness/spawn"
	"github.com/talos-nodeinit/talos-nodeinit/pkg/harness/testcluster"
	"github.com/talos-nodeinit/talos-nodeinit/pkg/rules"
	"github.com/talos-nodeinit/talos-nodeinit/pkg/talos"
)

// benchRules label every metal node and request a role the coordinator grants.
const benchRules = `transformations:
  - name: bench
    nodeSelector:
      - matchExpressions:
          - {key: platform, operator: In, values: [metal]}
    labels:
      example.com/bench: "true"
      node-role.kubernetes.io/worker: ""
`

// benchCoordinatorConfig has room for 16,384 IPv4 /24s; IPv6 segments are
// carved from each node's own /64, which the nodes' range opts into first
// claim (no inventory lists 1,000 names).
const benchCoordinatorConfig = `clusterName: bench
nodeNetworks: [10.0.0.0/8, "2001:db8::/32"]
ipam:
  ipv4Pool: 100.64.0.0/10
  ipv6Pool: fd00:10:244::/64
  firstClaimPrefixes: ["2001:db8::/32"]
  serviceCIDRs: [10.96.0.0/16, "fd00:10:96::/112"]
grants:
  labels:
    allow: ["node.cloudprovider.kubernetes.io/*", "node-role.kubernetes.io/worker"]
csr:
  attestationTimeout: 120s
`

// env is a control plane (etcd, kube-apiserver with Node,RBAC and
// NodeRestriction and an audit log, kube-controller-manager's csrsigning),
// the machined stand-in serving every simulated node, the coordinator's RBAC
// and ServiceAccount kubeconfig, and the built binaries.
type env struct {
	cluster *testcluster.Cluster
	admin   kubernetes.Interface
	dir     string
	log     io.Writer
	// machined is one process (hack/machined: Talos v1.13.7's socket
	// authorization) holding every node's machined; its CPU is reported
	// apart from this process's.
	machined *machined.Process

	coordBin, agentBin string
	coordKubeconfig    string
	coordConfig        string
	rulesFile          string
	rules              *rules.Rules

	watch *nodeWatch

	// askWhenSeen: the kubelet stand-ins ask for their serving certificate
	// as kubelet 1.37 does (kubeletsim.Config.AskWhenSeen).
	askWhenSeen bool
}

// newEnv starts the control plane; apiServerArgs and kcmArgs are added to
// kube-apiserver's and kube-controller-manager's flags.
func newEnv(ctx context.Context, logw io.Writer, apiServerArgs, kcmArgs []string) (*env, error) {
	if os.Geteuid() != 0 {
		return nil, errors.New("the benchmark makes network namespaces: run it as root")
	}
	root, err := testcluster.RepoRoot()
	if err != nil {
		return nil, err
	}
	c, err := testcluster.Start(ctx, testcluster.Options{ControllerManager: true, AuditLog: true, Log: logw, ExtraAPIServerArgs: apiServerArgs, ExtraControllerManagerArgs: kcmArgs})
	if err != nil {
		return nil, err
	}
	e := &env{cluster: c, admin: kubernetes.NewForConfigOrDie(apiclient.Builtin(c.Admin())), dir: c.Dir(), log: logw}
	// Forked on the immortal thread, as every harness process is, so that
	// Pdeathsig stays tied to this process.
	spawn.Do(func() { e.machined, err = machined.Start(logw) })
	if err != nil {
		c.Close()
		return nil, err
	}
	if err := e.setup(ctx, root); err != nil {
		e.close()
		return nil, err
	}
	return e, nil
}

func (e *env) setup(ctx context.Context, root string) error {
	e.coordBin, e.agentBin = filepath.Join(e.dir, "nodeinit-coordinator"), filepath.Join(e.dir, "nodeinit-agent")
	for bin, pkg := range map[string]string{e.coordBin: "coordinator", e.agentBin: "agent"} {
		if err := gobuild.Build(filepath.Join(root, pkg), bin); err != nil {
			return err
		}
	}
	if err := kubeapply.Files(ctx, e.cluster.Admin(), filepath.Join(root, "coordinator/deploy/noderecords.yaml"), filepath.Join(root, "coordinator/deploy/rbac.yaml")); err != nil {
		return err
	}
	// The first write to a just-installed CustomResourceDefinition waits ~2 s
	// in kube-apiserver (seen in the audit log). In a cluster the NodeRecord
	// resource is installed long before nodes join; a dry-run create pays
	// that cost here, outside the timed storm.
	warm, _ := (&records.Record{Name: "bench-warmup"}).ToUnstructured()
	if _, err := dynamic.NewForConfigOrDie(e.cluster.Admin()).Resource(records.GVR).Create(ctx, warm, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}); err != nil {
		return fmt.Errorf("warming the NodeRecord resource: %w", err)
	}
	sa, err := e.cluster.ServiceAccountIdentity(ctx, "kube-system", "nodeinit-coordinator")
	if err != nil {
		return err
	}
	if e.coordKubeconfig, err = e.cluster.WriteKubeconfig("nodeinit-coordinator", sa); err != nil {
		return err
	}
	e.coordConfig, e.rulesFile = filepath.Join(e.dir, "coordinator.yaml"), filepath.Join(e.dir, "rules.yaml")
	if err := os.WriteFile(e.coordConfig, []byte(benchCoordinatorConfig), 0o600); err != nil {
		return err
	}
	if err := os.WriteFile(e.rulesFile, []byte(benchRules), 0o600); err != nil {
		return err
	}
	if e.rules, err = rules.LoadFile(e.rulesFile); err != nil {
		return err
	}
	e.watch, err = watchNodes(ctx, e.admin)
	return err
}

func (e *env) close() {
	if e.watch != nil {
		e.watch.stop()
	}
	e.machined.Close()
	e.cluster.Close()
}

// coordinator is a running nodeinit-coordinator binary, as its ServiceAccount.
type coordinator struct {
	id      string
	metrics string
	proc    *daemon.Process
}

// fastLease makes failover quick enough to measure within a test.
var fastLease = []string{"--lease-duration", "4s", "--renew-deadline", "3s", "--retry-period", "250ms"}

func (e *env) startCoordinator(id string, extra ...string) (*coordinator, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	metrics := ln.Addr().String()
	ln.Close()
	argv := append([]string{e.coordBin, "run", "--kubeconfig", e.coordKubeconfig, "--config", e.coordConfig, "--id", id, "--metrics-addr", metrics}, extra...)
	c := &coordinator{id: id, metrics: metrics, proc: &daemon.Process{Name: id, Argv: argv, LogPath: filepath.Join(e.dir, id+".log")}}
	if err := c.proc.Start(); err != nil {
		return nil, err
	}
	return c, nil
}

// ready is the coordinator's /readyz.
func (c *coordinator) ready() bool {
	resp, err := (&http.Client{Timeout: time.Second}).Get("http://" + c.metrics + "/readyz")
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// kill is kill -9.
func (c *coordinator) kill() { c.proc.Stop(syscall.SIGKILL, 10*time.Second) }

func (c *coordinator) stop() { c.proc.Stop(syscall.SIGTERM, 10*time.Second) }

func (c *coordinator) usage() procUsage {
	if c == nil { // -initialize-at-once runs none
		return procUsage{}
	}
	return readProcUsage(c.proc.Pid())
}

// logTail is the end of the coordinator's log, every run under its id.
func (c *coordinator) logTail() string { return c.proc.Report(40) }

// simNode is one simulated Talos node: a network namespace, its machined
// (in the shared stand-in), a node identity, then (once the storm starts) an
// agent, registered with machined as its extension service, and a kubelet
// stand-in.
type simNode struct {
	name  string
	ip    netip.Addr   // kubelet --node-ip, on eth0 as a /24
	ip6   netip.Prefix // a global address in the node's own /64
	meta  runtime.PlatformMetadataSpec
	ns    *namespace
	md    *machined.Node
	id    *testcluster.NodeIdentity
	certs string
	key   string // the agent's key file, kept across agent restarts

	kubelet   *kubeletsim.Kubelet
	agent     *controller.Agent // when the agent runs in this process
	agentStop context.CancelFunc
	agentDone chan struct{}
	agentProc *daemon.Process // when the agent runs as the real binary

	mu                    sync.Mutex
	registered, certified time.Time
	err                   error
}

// nodeSpec derives node i's facts. Names are <prefix>-<i>.
func nodeSpec(prefix string, i int) (name string, ip netip.Addr, ip6 netip.Prefix, meta runtime.PlatformMetadataSpec) {
	name = fmt.Sprintf("%s-%04d", prefix, i)
	ip = netip.AddrFrom4([4]byte{10, byte(8 + i/62500), byte(i / 250 % 250), byte(i%250 + 1)})
	ip6 = netip.MustParsePrefix(fmt.Sprintf("2001:db8:%x:%x::1/64", 0x100+i/65536, i%65536))
	meta = runtime.PlatformMetadataSpec{Platform: "metal", Hostname: name, Region: "bench", Zone: fmt.Sprintf("zone-%d", i%3), InstanceType: "bm.small"}
	return
}

// prepare builds nodes [from, from+n) ahead of the storm, so their setup is
// not timed.
func (e *env) prepare(ctx context.Context, prefix string, from, n int) ([]*simNode, error) {
	nodes := make([]*simNode, n)
	err := parallel(n, 8, func(k int) (err error) {
		nodes[k], err = e.prepareNode(ctx, prefix, from+k)
		return err
	})
	if err != nil {
		for _, sn := range nodes {
			if sn != nil {
				sn.close()
			}
		}
		return nil, err
	}
	return nodes, nil
}

func (e *env) prepareNode(ctx context.Context, prefix string, i int) (*simNode, error) {
	sn := &simNode{}
	sn.name, sn.ip, sn.ip6, sn.meta = nodeSpec(prefix, i)
	var err error
	if sn.ns, err = newNamespace(fmt.Sprintf("nb-%s-%d", prefix, i), []netip.Prefix{netip.PrefixFrom(sn.ip, 24), sn.ip6}); err != nil {
		return nil, err
	}
	if sn.md, err = e.machined.Node(ctx, sn.name); err != nil {
		sn.close()
		return nil, err
	}
	for _, err := range []error{sn.md.SetPlatformMetadata(ctx, sn.meta), sn.md.SetNodename(ctx, sn.name), sn.md.SetNodeIPs(ctx, sn.ip)} {
		if err != nil {
			sn.close()
			return nil, err
		}
	}
	if sn.id, err = e.cluster.NodeIdentity(sn.name); err != nil {
		sn.close()
		return nil, err
	}
	sn.certs = filepath.Join(e.dir, "nodes", sn.name)
	sn.key = filepath.Join(e.dir, "agent-keys", sn.name+".key")
	return sn, nil
}

// startAgent runs nodeinit-agent in this process with exactly the
// configuration `nodeinit-agent run` builds from its flags; this process is
// registered as the node's agent service, so machined admits it.
func (e *env) startAgent(sn *simNode) error {
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	key, _, err := agentkey.LoadOrCreate(sn.key)
	if err != nil {
		return err
	}
	if err := registerAgent(sn, os.Getpid()); err != nil {
		return err
	}
	a, err := controller.New(controller.Config{
		Kubeconfig: sn.id.Kubeconfig, Facts: (&talos.Reader{Socket: sn.md.Socket, Log: quiet}).Watch,
		NetNS: sn.ns.path, Rules: e.rules, Policy: desired.ProviderIDTalosFallback, Version: "bench", Log: quiet, Key: key,
	})
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	sn.agent, sn.agentStop, sn.agentDone = a, cancel, make(chan struct{})
	go func() { defer close(sn.agentDone); _ = a.Run(ctx) }()
	return nil
}

// waitAgentsUp waits until every in-process agent has its facts, addresses
// and API connection and waits only for its Node, as an agent does on a
// booted Talos node before the kubelet registers.
func waitAgentsUp(ctx context.Context, nodes []*simNode, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for _, sn := range nodes {
		for {
			err := sn.agent.Ready()
			if err != nil && strings.Contains(err.Error(), "to be registered") {
				break
			}
			if time.Now().After(deadline) || ctx.Err() != nil {
				return fmt.Errorf("agent of %s not waiting for its Node within %v: %v", sn.name, timeout, err)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	return nil
}

// waitKubeletsWatching waits until every kubelet stand-in's Node watch has
// synced.
func waitKubeletsWatching(ctx context.Context, nodes []*simNode, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for _, sn := range nodes {
		for !sn.kubelet.Watching() {
			if time.Now().After(deadline) || ctx.Err() != nil {
				return fmt.Errorf("the kubelet of %s not watching its Node within %v", sn.name, timeout)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	return nil
}

// agentArgs are the flags that point the real agent binary at this node.
func (e *env) agentArgs(sn *simNode) []string {
	return []string{"run", "--kubeconfig", sn.id.Kubeconfig, "--machined-socket", sn.md.Socket, "--netns", sn.ns.path,
		"--rules-file", e.rulesFile, "--provider-id-policy", string(desired.ProviderIDTalosFallback), "--key-file", sn.key}
}

// registerAgent records pid as the node's ext-nodeinit-agent service, as
// machined's runner does each time it starts the extension.
func registerAgent(sn *simNode, pid int) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := sn.md.RegisterAgent(ctx, pid); err != nil {
		return fmt.Errorf("registering the agent of %s with machined: %w", sn.name, err)
	}
	return nil
}

// startAgentProcess runs the real nodeinit-agent binary for this node and
// registers its PID with the node's machined (again on every restart).
func (e *env) startAgentProcess(sn *simNode) error {
	if sn.agentProc == nil {
		sn.agentProc = &daemon.Process{Name: "nodeinit-agent of " + sn.name, LogPath: filepath.Join(e.dir, "agent-"+sn.name+".log"),
			Argv: append([]string{e.agentBin}, e.agentArgs(sn)...)}
	}
	if err := sn.agentProc.Start(); err != nil {
		return err
	}
	if err := registerAgent(sn, sn.agentProc.Pid()); err != nil {
		sn.agentProc.Stop(syscall.SIGKILL, 5*time.Second)
		return err
	}
	return nil
}

// startKubelet starts the node's kubelet stand-in, unless started: its
// client and its Node watch, before it registers, and with askWhenSeen
// its serving-certificate manager too.
func (sn *simNode) startKubelet(ctx context.Context, askWhenSeen bool) error {
	if sn.kubelet != nil {
		return nil
	}
	// --node-ip names both families, as on a dual-stack Talos node; with the
	// IPv4 address alone the kubelet asks for a second certificate once the
	// agent publishes the IPv6 one.
	k, err := kubeletsim.Start(ctx, kubeletsim.Config{NodeName: sn.name, NodeIPs: []netip.Addr{sn.ip, sn.ip6.Addr()}, Identity: sn.id.Config(), CertDir: sn.certs, AskWhenSeen: askWhenSeen})
	if err != nil {
		return err
	}
	if askWhenSeen {
		// The serving-certificate manager starts with the kubelet
		// (initializeModules), before the registration; it asks for
		// nothing until the kubelet sees its Node.
		if err := k.StartServing(ctx); err != nil {
			k.Stop()
			return err
		}
	}
	sn.kubelet = k
	return nil
}

// register starts the kubelet stand-in: it creates the Node, then asks for
// its serving certificate with client-go's certificate manager.
func (sn *simNode) register(ctx context.Context) {
	err := sn.startKubelet(ctx, false)
	k := sn.kubelet
	if err == nil {
		err = k.Register(ctx)
	}
	now := time.Now() // registered: before the certificate manager starts, as before
	if err == nil && !k.Serving() {
		err = k.StartServing(ctx)
	}
	sn.mu.Lock()
	sn.registered, sn.err = now, err
	sn.mu.Unlock()
	if err != nil {
		return
	}
	go func() {
		if _, err := k.WaitForCertificate(ctx, 1); err == nil {
			sn.mu.Lock()
			sn.certified = time.Now()
			sn.mu.Unlock()
		}
	}()
}

func (sn *simNode) times() (registered, certified time.Time, err error) {
	sn.mu.Lock()
	defer sn.mu.Unlock()
	return sn.registered, sn.certified, sn.err
}

func (sn *simNode) stopAgent() {
	if sn.agentStop != nil {
		sn.agentStop()
		select {
		case <-sn.agentDone:
		case <-time.After(5 * time.Second):
		}
	}
	sn.agentProc.Stop(syscall.SIGTERM, 5*time.Second)
}

func (sn *simNode) close() {
	sn.stopAgent()
	if sn.kubelet != nil {
		sn.kubelet.Stop()
	}
	if sn.ns != nil {
		sn.ns.close()
	}
}

// storm starts every node's kubelet and agent and waits until each agent
// is up and waiting for its Node, and each kubelet watches its Node as a
// started kubelet does before it registers (so it registers over an open
// connection); then every kubelet registers at once. It returns when every
// kubelet has registered (or failed to).
func (e *env) storm(ctx context.Context, nodes []*simNode) error {
	for _, sn := range nodes {
		if err := sn.startKubelet(ctx, e.askWhenSeen); err != nil {
			return err
		}
		if err := e.startAgent(sn); err != nil {
			return err
		}
	}
	if err := waitAgentsUp(ctx, nodes, 2*time.Minute); err != nil {
		return err
	}
	if err := waitKubeletsWatching(ctx, nodes, 2*time.Minute); err != nil {
		return err
	}
	var wg sync.WaitGroup
	for _, sn := range nodes {
		wg.Go(func() { sn.register(ctx) })
	}
	wg.Wait()
	var errs []error
	for _, sn := range nodes {
		if _, _, err := sn.times(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// converged reports whether every node is initialized and holds a serving
// certificate, with a one-line status.
func (e *env) converged(nodes []*simNode) (bool, string) {
	var inited, certs int
	for _, sn := range nodes {
		if !e.watch.initializedAt(sn.name).IsZero() {
			inited++
		}
		if _, c, _ := sn.times(); !c.IsZero() {
			certs++
		}
	}
	return inited == len(nodes) && certs == len(nodes),
		fmt.Sprintf("%d/%d initialized, %d/%d serving certificates", inited, len(nodes), certs, len(nodes))
}

// snapshot is every component's CPU time and kube-apiserver's requests
// at one moment.
type snapshot struct {
	cpu      map[string]time.Duration
	requests map[string]float64
}

func (e *env) snapshot(ctx context.Context, c *coordinator) snapshot {
	s := snapshot{cpu: e.cpu(c)}
	s.requests, _ = e.apiRequests(ctx) // none: the report says so
	return s
}

// onceInitialized is the snapshot when the last of nodes is first seen
// initialized (or when ctx ends first).
func (e *env) onceInitialized(ctx context.Context, c *coordinator, nodes []*simNode) snapshot {
	waiting := func(sn *simNode) bool { return e.watch.initializedAt(sn.name).IsZero() }
	for ctx.Err() == nil && slices.ContainsFunc(nodes, waiting) {
		time.Sleep(20 * time.Millisecond)
	}
	return e.snapshot(context.WithoutCancel(ctx), c)
}

// waitConverged polls converged until it holds or the timeout passes.
// Every progressEvery it says how far the run got and which nodes it
// waits for, and it gives up at once on a node whose kubelet was refused
// for good (refusedForGood): a run that cannot converge says why now, not
// after its timeout.
func (e *env) waitConverged(ctx context.Context, nodes []*simNode, timeout time.Duration) (time.Time, error) {
	start := time.Now()
	deadline, next := start.Add(timeout), start.Add(progressEvery)
	for {
		ok, status := e.converged(nodes)
		if ok {
			return time.Now(), nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return time.Time{}, fmt.Errorf("not converged within %v: %s; waiting for %s", timeout, status, e.notConverged(nodes))
		}
		if time.Now().After(next) {
			next = time.Now().Add(progressEvery)
			fmt.Fprintf(e.log, "bench: converging for %v: %s; waiting for %s\n", time.Since(start).Round(time.Second), status, e.notConverged(nodes))
			if err := e.refusedForGood(ctx, nodes); err != nil {
				return time.Time{}, err
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// progressEvery is how often waitConverged reports and checks for nodes
// refused for good.
const progressEvery = 10 * time.Second

// notConverged names up to five of nodes not yet initialized and certified.
func (e *env) notConverged(nodes []*simNode) string {
	var names []string
	for _, sn := range nodes {
		if _, c, _ := sn.times(); c.IsZero() || e.watch.initializedAt(sn.name).IsZero() {
			names = append(names, sn.name)
		}
	}
	if len(names) > 5 {
		return fmt.Sprintf("%s and %d more", strings.Join(names[:5], ", "), len(names)-5)
	}
	return strings.Join(names, ", ")
}

// refusedForGood is an error naming a node of nodes, not yet certified,
// whose kubelet's serving CSRs were denied refusedTimes times.
func (e *env) refusedForGood(ctx context.Context, nodes []*simNode) error {
	var waiting []string
	for _, sn := range nodes {
		if _, c, _ := sn.times(); c.IsZero() {
			waiting = append(waiting, sn.name)
		}
	}
	if len(waiting) == 0 {
		return nil
	}
	list, err := e.admin.CertificatesV1().CertificateSigningRequests().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil // the next round asks again; the timeout still bounds the wait
	}
	if node, reason, ok := refusedForGood(list.Items, waiting); ok {
		return fmt.Errorf("node %s will never converge: its kubelet was refused: %s", node, reason)
	}
	return nil
}

// nodeWatch follows every Node as admin: when each was first seen
// initialized (pod CIDRs set, uninitialized taint gone), and every pod CIDR
// ever seen on two Nodes at once.
type nodeWatch struct {
	cancel context.CancelFunc
	store  cache.Store

	mu          sync.Mutex
	initialized map[string]time.Time
	owner       map[string]string // pod CIDR → node
	duplicates  []string
}

func watchNodes(ctx context.Context, cs kubernetes.Interface) (*nodeWatch, error) {
	ctx, cancel := context.WithCancel(ctx)
	w := &nodeWatch{cancel: cancel, initialized: map[string]time.Time{}, owner: map[string]string{}}
	f := informers.NewSharedInformerFactory(cs, 0)
	inf := f.Core().V1().Nodes().Informer()
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    w.observe,
		UpdateFunc: func(_, n any) { w.observe(n) },
		DeleteFunc: w.forget,
	}); err != nil {
		cancel()
		return nil, err
	}
	w.store = inf.GetStore()
	f.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		cancel()
		return nil, errors.New("node watch did not sync")
	}
	return w, nil
}

func (w *nodeWatch) observe(obj any) {
	n, ok := obj.(*corev1.Node)
	if !ok {
		return
	}
	now := time.Now()
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, c := range n.Spec.PodCIDRs {
		if other, ok := w.owner[c]; ok && other != n.Name {
			w.duplicates = append(w.duplicates, fmt.Sprintf("%s on %s and %s", c, other, n.Name))
		}
		w.owner[c] = n.Name
	}
	if _, seen := w.initialized[n.Name]; !seen && initialized(n) {
		w.initialized[n.Name] = now
	}
}

func (w *nodeWatch) forget(obj any) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	n, ok := obj.(*corev1.Node)
	if !ok {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, c := range n.Spec.PodCIDRs {
		if w.owner[c] == n.Name {
			delete(w.owner, c)
		}
	}
}

func initialized(n *corev1.Node) bool {
	return len(n.Spec.PodCIDRs) > 0 && !contract.Uninitialized(n)
}

func (w *nodeWatch) initializedAt(name string) time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.initialized[name]
}

func (w *nodeWatch) dupes() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.duplicates)
}

func (w *nodeWatch) get(name string) *corev1.Node {
	obj, ok, _ := w.store.GetByKey(name)
	if !ok {
		return nil
	}
	return obj.(*corev1.Node)
}

func (w *nodeWatch) stop() { w.cancel() }

// supervised restarts a coordinator that exits, as the Deployment's kubelet
// would (after restartDelay rather than CrashLoopBackOff's 10 s, to keep
// tests short). A coordinator exits 1 when it loses its Lease.
type supervised struct {
	e    *env
	id   string
	args []string

	mu       sync.Mutex
	cur      *coordinator
	restarts int
	stopping bool
	done     chan struct{}
}

const restartDelay = time.Second

func (e *env) supervise(id string, args ...string) (*supervised, error) {
	c, err := e.startCoordinator(id, args...)
	if err != nil {
		return nil, err
	}
	s := &supervised{e: e, id: id, args: args, cur: c, done: make(chan struct{})}
	go s.loop()
	return s, nil
}

func (s *supervised) loop() {
	defer close(s.done)
	for {
		s.mu.Lock()
		c := s.cur
		s.mu.Unlock()
		<-c.proc.Done()
		time.Sleep(restartDelay)
		s.mu.Lock()
		if s.stopping {
			s.mu.Unlock()
			return
		}
		next, err := s.e.startCoordinator(s.id, s.args...)
		if err != nil {
			s.mu.Unlock()
			return
		}
		s.cur, s.restarts = next, s.restarts+1
		s.mu.Unlock()
	}
}

func (s *supervised) current() *coordinator {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cur
}

func (s *supervised) restarted() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.restarts
}

func (s *supervised) stop() {
	s.mu.Lock()
	s.stopping = true
	c := s.cur
	s.mu.Unlock()
	c.stop()
	<-s.done
}

// parallel runs fn(0..n-1) with at most limit running at once, and
// returns the first error.
func parallel(n, limit int, fn func(i int) error) error {
	var g errgroup.Group
	g.SetLimit(limit)
	for i := range n {
		g.Go(func() error { return fn(i) })
	}
	return g.Wait()
}

// apiServerProfile writes kube-apiserver's CPU profile over the next d to
// path (its /debug/pprof, which the bench turns on for this).
func (e *env) apiServerProfile(ctx context.Context, path string, d time.Duration) error {
	body, err := e.admin.CoreV1().RESTClient().Get().AbsPath("/debug/pprof/profile").
		Param("seconds", strconv.Itoa(int(d.Seconds()))).Timeout(d + 30*time.Second).DoRaw(ctx)
	if err != nil {
		return err
	}
	return os.WriteFile(path, body, 0o644)
}
