// Command bench is `make bench`: a join storm against a real control plane.
//
// etcd, kube-apiserver (Node,RBAC authorization, NodeRestriction, an audit
// log of every mutating request) and kube-controller-manager's csrsigning run
// on 127.0.0.1. The coordinator is the real binary, running as its
// ServiceAccount with the shipped RBAC. Each of N nodes has its own network
// namespace, machined (one stand-in process, hack/machined, serves every
// node's socket with Talos v1.13.7's own authorization) and node identity;
// its agent runs in this process, registered with machined as the node's
// extension service, with exactly the configuration `nodeinit-agent run`
// builds, over its own TLS connection and watch, and its kubelet stand-in
// uses client-go's certificate manager. All N register at once.
//
// It prints per-node latencies, writes per node counted from the API
// server's audit log, CPU and memory, writes in a quiet window, and the
// floor: the same API server's time for the 5 unavoidable writes of N joins.
// It exits 1 when the end state is wrong or a write budget is exceeded.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"runtime"
	"runtime/pprof"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
)

// Budgets of mutating requests per node, Events apart (issue 7).
const (
	agentBudget       = 2 // the report with its addresses (a status patch), the attestation
	coordinatorBudget = 4 // its NodeRecord, initializing patch, review request, approval
)

// coordinatorKinds bounds each kind of coordinator write per node. Together
// they allow 5: when the Node's sync initializes it before the coordinator
// has seen its kubelet's CSR, the review request is a patch of its own and
// the approval first names the certificate in the record (an update); the
// total budget above is then 5, never more.
var coordinatorKinds = map[string]int{
	"create noderecords": 1, "patch nodes": 2, "update noderecords": 1, "update certificatesigningrequests/approval": 1,
}

type options struct {
	nodes      int
	existing   int
	quiet      time.Duration
	timeout    time.Duration
	floor      bool
	coordArg   []string
	cpuProfile string
	// apiProfile, when set, is where kube-apiserver's CPU profile of the
	// storm's first apiProfileFor goes.
	apiProfile    string
	apiProfileFor time.Duration
	// kcmQPS, when set, is kube-controller-manager's client rate: its
	// signer writes one certificate per request, 20 per second by default.
	kcmQPS int
	// askWhenSeen: see env.askWhenSeen.
	askWhenSeen bool
	// joinedFirst nodes join, certificates and all, before the storm.
	joinedFirst int
	// approveAtOnce: the bench approves every serving CSR the moment it
	// sees it (approveAtOnce), and the run reports only latencies.
	approveAtOnce bool
	// initializeAtOnce: no coordinator; the bench initializes and approves
	// at once (runAtOnce).
	initializeAtOnce bool
}

func main() {
	var o options
	flag.IntVar(&o.nodes, "nodes", 100, "nodes that join at once")
	flag.IntVar(&o.existing, "existing", 0, "initialized Nodes created (as admin) before the coordinator starts: the scale run uses 5000")
	flag.DurationVar(&o.quiet, "quiet", time.Minute, "quiet window after convergence in which agents must not write")
	flag.DurationVar(&o.timeout, "timeout", 10*time.Minute, "how long the storm may take to converge")
	flag.BoolVar(&o.floor, "floor", true, "measure the floor (unavoidable writes of N joins) after the storm")
	cpuProfile := flag.String("cpuprofile", "", "write this process's CPU profile during the storm to `FILE`")
	flag.StringVar(&o.apiProfile, "apiserver-profile", "", "write kube-apiserver's CPU profile of the storm's first -apiserver-profile-for to `FILE` (go tool pprof -top FILE)")
	flag.DurationVar(&o.apiProfileFor, "apiserver-profile-for", 15*time.Second, "how long -apiserver-profile samples, from the storm's start")
	flag.IntVar(&o.kcmQPS, "kcm-qps", 0, "kube-controller-manager's --kube-api-qps (burst twice that): its signer issues one certificate per request, so this bounds registration → certificate issued (0: its default, 20)")
	flag.BoolVar(&o.askWhenSeen, "kubelet-ask-when-seen", true, "the kubelet stand-ins ask for their serving certificate as kubelet 1.37 does: once their Node watch has the Node (with the addresses the agent may have published by then), and up to a second later; =false: as soon as they have registered, earlier than a kubelet")
	flag.IntVar(&o.joinedFirst, "joined-first", 1, "nodes that join, with their serving certificates, before the storm (not counted in it), as a cluster's control plane does before its workers: the coordinator has seen kubelets ask for serving certificates (csr.initWait); 0: the storm joins an empty cluster")
	flag.BoolVar(&o.approveAtOnce, "approve-at-once", false, "a bound, not a run of ours: the bench approves every kubelet serving CSR the moment its watch sees it, unchecked, racing the coordinator's approvals; registration → certificate is then the kubelet's ask and kube-controller-manager's signer alone. Prints the latencies only (writes, budgets and the floor do not apply). With -initialize-at-once: the bench approves at sight during its own storm instead of after it")
	flag.BoolVar(&o.initializeAtOnce, "initialize-at-once", false, "not a run of ours: no coordinator; the bench initializes each Node the moment its agent's report arrives (an IPv4 pod CIDR, the taint gone; no record, check, label or providerID), 64 at a time, and once the last is initialized approves the serving CSRs, unchecked; prints the latencies and the storm/floor of an initializer that does nothing else (-joined-first does not apply)")
	coordArgs := flag.String("coordinator-args", "", "extra space-separated flags for nodeinit-coordinator run")
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "Usage: go run ./hack/bench [flags]   (make bench N=500)\n\nA join storm of N Talos nodes against a real control plane; prints latencies, writes per node, CPU, memory and the floor.\n\n")
		flag.PrintDefaults()
	}
	flag.Parse()
	o.coordArg = strings.Fields(*coordArgs)
	o.cpuProfile = *cpuProfile
	klog.SetLogger(logr.Discard())
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, o); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, o options) error {
	var apiArgs []string
	if o.apiProfile != "" {
		apiArgs = append(apiArgs, "--profiling=true") // the harness turns it off; the last flag wins
	}
	var kcmArgs []string
	if o.kcmQPS > 0 {
		kcmArgs = append(kcmArgs, fmt.Sprintf("--kube-api-qps=%d", o.kcmQPS), fmt.Sprintf("--kube-api-burst=%d", 2*o.kcmQPS))
	}
	e, err := newEnv(ctx, os.Stderr, apiArgs, kcmArgs)
	if err != nil {
		return err
	}
	defer e.close()
	e.askWhenSeen = o.askWhenSeen
	var r strings.Builder
	existing := ""
	if o.existing > 0 {
		existing = fmt.Sprintf(" (+%d existing)", o.existing)
	}
	fmt.Fprintf(&r, "== join storm: %d nodes%s, %s, %d cores, %s memory, %s\n", o.nodes, existing,
		time.Now().UTC().Format("2006-01-02"), runtime.NumCPU(), memTotal(), runtime.Version())

	if o.existing > 0 {
		step("creating %d initialized Nodes as admin", o.existing)
		took, err := createExisting(ctx, e, o.existing)
		if err != nil {
			return err
		}
		fmt.Fprintf(&r, "existing Nodes: %d created in %s\n", o.existing, took.Round(time.Millisecond))
	}
	step("preparing %d nodes (netns, machined stand-in, identity)", o.nodes)
	began := time.Now()
	nodes, err := e.prepare(ctx, "node", 0, o.nodes)
	if err != nil {
		return err
	}
	defer func() {
		for _, sn := range nodes {
			sn.close()
		}
	}()
	if o.initializeAtOnce {
		step("prepared in %s", time.Since(began).Round(time.Millisecond))
		return runAtOnce(ctx, o, e, nodes, nodePrefix, &r)
	}
	step("prepared in %s; starting the coordinator", time.Since(began).Round(time.Millisecond))

	coord, err := e.startCoordinator("bench-coordinator", o.coordArg...)
	if err != nil {
		return err
	}
	defer coord.stop()
	leader, ready, err := e.waitLeaderReady(ctx, coord, time.Minute)
	if err != nil {
		return fmt.Errorf("%w\n%s", err, coord.logTail())
	}
	fmt.Fprintf(&r, "coordinator: leader %s after start, ready (allocator rebuilt) %s after leading\n",
		leader.Round(time.Millisecond), ready.Round(time.Millisecond))
	var first []*simNode
	if o.joinedFirst > 0 {
		step("%d nodes join first, with their serving certificates, as a control plane does before its workers", o.joinedFirst)
		first, err = e.prepare(ctx, "cp", o.nodes, o.joinedFirst) // addresses after the storm's
		if err != nil {
			return err
		}
		defer func() {
			for _, sn := range first {
				sn.close()
			}
		}()
		if err := e.storm(ctx, first); err != nil {
			return err
		}
		if _, err := e.waitConverged(ctx, first, time.Minute); err != nil {
			return fmt.Errorf("the nodes that join first: %w\ncoordinator log tail:\n%s", err, coord.logTail())
		}
		fmt.Fprintf(&r, "joined first (not counted below): %d nodes, initialized and certified\n", o.joinedFirst)
	}

	auditBefore, err := e.cluster.Audit()
	if err != nil {
		return err
	}
	atStart := e.snapshot(ctx, coord)
	cpuBefore := atStart.cpu
	queuesBefore, queuesErr := coord.queues()

	step("storm: %d agents start; once all wait for their Node, the kubelets register at once", o.nodes)
	if o.cpuProfile != "" {
		f, err := os.Create(o.cpuProfile)
		if err != nil {
			return err
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	apiProfiled := make(chan error, 1)
	if o.apiProfile != "" {
		go func() { apiProfiled <- e.apiServerProfile(ctx, o.apiProfile, o.apiProfileFor) }()
	} else {
		apiProfiled <- nil
	}
	// The API server's CPU up to the last node initialized: the work the
	// floor also does, without the certificates' tail (kube-controller-
	// manager's signer at its own client rate).
	initialized := make(chan snapshot, 1)
	stormCtx, stormDone := context.WithCancel(ctx)
	defer stormDone()
	go func() { initialized <- e.onceInitialized(stormCtx, coord, nodes) }()
	if o.approveAtOnce {
		step("approving every serving CSR at once, unchecked (-approve-at-once)")
		stopApprover, err := approveAtOnce(ctx, e, boundCSRWorkers, nodePrefix)
		if err != nil {
			return err
		}
		defer stopApprover()
	}
	if err := e.storm(ctx, nodes); err != nil {
		return err
	}
	if _, err := e.waitConverged(ctx, nodes, o.timeout); err != nil {
		return fmt.Errorf("%w\ncoordinator log tail:\n%s", err, coord.logTail())
	}
	pprof.StopCPUProfile()
	queuesAfter, err := coord.queues()
	if queuesErr == nil {
		queuesErr = err
	}
	if err := <-apiProfiled; err != nil {
		return fmt.Errorf("kube-apiserver's profile: %w", err)
	}
	if o.apiProfile != "" {
		step("kube-apiserver's CPU profile of the storm's first %s: %s", o.apiProfileFor, o.apiProfile)
	}
	cpuAfter := e.cpu(coord)
	stormDone()
	atInit := <-initialized
	cpuInit := atInit.cpu
	var failures []string
	lat := e.latencies(nodes)
	lat.print(&r)
	fmt.Fprintf(&r, "CPU seconds during the storm:")
	for _, k := range []string{"kube-apiserver", "etcd", "kube-controller-manager", "coordinator", machinedProcess, benchProcess} {
		fmt.Fprintf(&r, " %s %.1f;", k, (cpuAfter[k] - cpuBefore[k]).Seconds())
	}
	apiInit := cpuInit["kube-apiserver"] - cpuBefore["kube-apiserver"]
	fmt.Fprintf(&r, "\nkube-apiserver CPU to the last node initialized: %.1f s\n", apiInit.Seconds())
	if atStart.requests != nil && atInit.requests != nil {
		printRequests(&r, atStart.requests, atInit.requests, len(nodes))
	}
	fmt.Fprintf(&r, "coordinator peak RSS: %.1f MiB\n", float64(coord.usage().PeakRSS)/(1<<20))
	if queuesErr != nil {
		fmt.Fprintf(&r, "coordinator work queues: not read: %v\n", queuesErr)
	} else {
		printQueues(&r, queuesBefore, queuesAfter)
	}

	if o.approveAtOnce {
		fmt.Print("\n" + r.String())
		fmt.Println("-approve-at-once: the certificates above were approved by the bench, unchecked, the moment it saw each CSR; writes, budgets and the floor were not measured")
		return nil
	}
	if err := e.checkAll(nodes); err != nil {
		failures = append(failures, "end state: "+err.Error())
	}

	// Writes, from the audit log: settle, then the quiet window.
	time.Sleep(2 * time.Second)
	auditStorm, err := e.cluster.Audit()
	if err != nil {
		return err
	}
	step("quiet window: %s", o.quiet)
	time.Sleep(o.quiet)
	auditQuiet, err := e.cluster.Audit()
	if err != nil {
		return err
	}
	names := map[string]bool{}
	for _, sn := range nodes {
		names[sn.name] = true
	}
	owners, err := e.csrOwners(ctx)
	if err != nil {
		return err
	}
	writes := attribute(auditStorm[len(auditBefore):], names, owners)
	span, err := serverSpan(writes, nodes)
	if err != nil {
		failures = append(failures, "server-side span: "+err.Error())
	} else {
		fmt.Fprintf(&r, "at the API server (audit log): first Node created → last initializing patch: %s\n", span.Round(time.Millisecond))
	}
	stats := summarize(writes, len(nodes))
	fmt.Fprintf(&r, "first write of each kind, after the node's registration :\n%s", phases(writes, nodes))
	fmt.Fprintf(&r, "writes per node (audit log, mutating requests that concern the node; the coordinator's Lease apart):\n")
	stats.print(&r)
	for c, budget := range map[string]int{compAgent: agentBudget, compCoordinator: coordinatorBudget} {
		if over := stats.over(c, budget, lateCSR(stats, c)); len(over) > 0 {
			failures = append(failures, fmt.Sprintf("%d nodes got more than %d %s writes: %s\n%s", len(over), budget, c,
				strings.Join(over[:min(5, len(over))], ", "), e.listWrites(auditStorm[len(auditBefore):], names, owners, c, over)))
		}
	}
	if over := stats.overKind(compCoordinator, coordinatorKinds); len(over) > 0 {
		failures = append(failures, fmt.Sprintf("%d coordinator writes over their kind's budget: %s\n%s", len(over), strings.Join(over[:min(5, len(over))], ", "),
			e.listWrites(auditStorm[len(auditBefore):], names, owners, compCoordinator, over)))
	}
	if late := lateCSR(stats, compCoordinator); len(late) > 0 {
		fmt.Fprintf(&r, "nodes initialized before the coordinator saw their CSR (review request and record update of their own): %d\n", len(late))
	}
	// A clean join shows in the Node itself (the taint gone, its pod CIDRs
	// and labels) and in the metrics; the coordinator's Events are for what
	// needs a person, and a clean storm has none.
	if n := summarize(attribute(auditQuiet[len(auditBefore):], names, owners), len(nodes)).events[compCoordinator]; n > 0 {
		failures = append(failures, fmt.Sprintf("the coordinator recorded %d Events in a storm where nothing needs a person", n))
	}
	quiet := quietWrites(auditQuiet[len(auditStorm):])
	fmt.Fprintf(&r, "quiet window %s: %s\n", o.quiet, quiet)
	if quiet.agent != 0 {
		failures = append(failures, fmt.Sprintf("agents wrote %d times in the quiet window", quiet.agent))
	}
	if o.existing > 0 {
		n := existingWrites(auditQuiet[len(auditBefore):])
		fmt.Fprintf(&r, "coordinator writes to the %d existing Nodes: %d\n", o.existing, n)
		if n != 0 {
			failures = append(failures, fmt.Sprintf("the coordinator wrote %d times to Nodes that were already initialized", n))
		}
	}

	if o.floor {
		coord.stop()
		for _, sn := range slices.Concat(nodes, first) {
			sn.stopAgent()
		}
		apiCPU := func() time.Duration { return e.cpu(coord)["kube-apiserver"] }
		for _, f := range []struct {
			step, prefix, head string
			own                bool
		}{
			{fmt.Sprintf("floor: the 5 unavoidable writes of %d joins, as fast as possible", o.nodes), "floor", "floor: %s for " + fmt.Sprint(o.nodes) + " joins", false},
			{"floor over the nodes' own connections: the same writes, each node's three as that node", "floorn", "floor, each node's writes over its own connection: %s", true},
		} {
			step("%s", f.step)
			before := apiCPU()
			auditBefore, err := e.cluster.Audit()
			if err != nil {
				return err
			}
			took, err := floor(ctx, e, f.prefix, o.nodes, f.own)
			if err != nil {
				return err
			}
			cpu := apiCPU() - before
			auditAfter, err := e.cluster.Audit()
			if err != nil {
				return err
			}
			fmt.Fprintf(&r, f.head+"; storm/floor = %.2f; kube-apiserver CPU %.1f s, storm/floor = %.2f", took.Round(time.Millisecond),
				lat.span.Seconds()/took.Seconds(), cpu.Seconds(), apiInit.Seconds()/cpu.Seconds())
			if fs := floorServerSpan(auditAfter[len(auditBefore):], f.prefix); fs > 0 && span > 0 {
				fmt.Fprintf(&r, "; at the API server %s, storm/floor = %.2f", fs.Round(time.Millisecond), span.Seconds()/fs.Seconds())
			}
			r.WriteString("\n")
		}
	}
	fmt.Print("\n" + r.String())
	if len(failures) > 0 {
		return errors.New("FAILED:\n  " + strings.Join(failures, "\n  "))
	}
	fmt.Printf("PASS: every node initialized with a serving certificate, no pod CIDR twice, exact labels and addresses, agent ≤ %d and coordinator ≤ %d writes per node (%d when initialized before its CSR was seen), none over its kind's budget, no agent write when quiet\n", agentBudget, coordinatorBudget, coordinatorBudget+1)
	return nil
}

func step(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "bench: "+format+"\n", args...)
}

func memTotal() string {
	data, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return "?"
	}
	for line := range strings.SplitSeq(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "MemTotal:"); ok {
			var kb int64
			fmt.Sscan(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), &kb)
			return fmt.Sprintf("%.0f GiB", float64(kb)/(1<<20))
		}
	}
	return "?"
}

// waitLeaderReady measures start → holding the Lease, and Lease → /readyz.
func (e *env) waitLeaderReady(ctx context.Context, c *coordinator, timeout time.Duration) (leader, ready time.Duration, err error) {
	start := time.Now()
	deadline := start.Add(timeout)
	var led time.Time
	for {
		if led.IsZero() && e.holder(ctx) == c.id {
			led = time.Now()
		}
		if !led.IsZero() && c.ready() {
			return led.Sub(start), time.Since(led), nil
		}
		if c.proc.Exited() {
			return 0, 0, fmt.Errorf("coordinator %s exited", c.id)
		}
		if time.Now().After(deadline) {
			return 0, 0, fmt.Errorf("coordinator %s not leading and ready within %v", c.id, timeout)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func (e *env) holder(ctx context.Context) string {
	l, err := e.admin.CoordinationV1().Leases("kube-system").Get(ctx, "nodeinit-coordinator", metav1.GetOptions{})
	if err != nil || l.Spec.HolderIdentity == nil {
		return ""
	}
	return *l.Spec.HolderIdentity
}

// benchProcess names this process's CPU: the simulated nodes' agents and
// kubelets; machinedProcess, the stand-in serving every node's machined.
const (
	benchProcess    = "bench process (agents, kubelets)"
	machinedProcess = "machined stand-in"
)

// cpu is every component's CPU time so far.
func (e *env) cpu(c *coordinator) map[string]time.Duration {
	out := map[string]time.Duration{"coordinator": c.usage().CPU, machinedProcess: readProcUsage(e.machined.PID()).CPU}
	for name, pid := range e.cluster.PIDs() {
		out[name] = readProcUsage(pid).CPU
	}
	out[benchProcess] = readProcUsage(os.Getpid()).CPU
	return out
}

func (e *env) csrOwners(ctx context.Context) (map[string]string, error) {
	list, err := e.admin.CertificatesV1().CertificateSigningRequests().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, c := range list.Items {
		if n, ok := strings.CutPrefix(c.Spec.Username, "system:node:"); ok {
			out[c.Name] = n
		}
	}
	return out, nil
}
