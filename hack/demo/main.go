// Command demo is `make demo`: a real control plane on 127.0.0.1, the
// coordinator applied from coordinator/deploy and running as its
// ServiceAccount, and N simulated Talos nodes, each in its own network
// namespace with its machined (one real-authorizer stand-in process,
// hack/machined, serves every node), the real nodeinit-agent binary
// registered there as its extension service, and a kubelet stand-in. It
// exits 0 only when everything converged as the scenario expects.
package main

import (
	"context"
	_ "embed"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"net/netip"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/go-logr/logr"
	"github.com/siderolabs/talos/pkg/machinery/resources/runtime"
	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"

	"go.yaml.in/yaml/v4"

	"github.com/talos-nodeinit/talos-nodeinit/pkg/contract"
	"github.com/talos-nodeinit/talos-nodeinit/pkg/harness/kubeapply"
	"github.com/talos-nodeinit/talos-nodeinit/pkg/harness/kubeletsim"
	"github.com/talos-nodeinit/talos-nodeinit/pkg/harness/machined"
	"github.com/talos-nodeinit/talos-nodeinit/pkg/harness/testcluster"
)

//go:embed scenario.yaml
var defaultScenario []byte

// Scenario is the demo's description of the cluster.
type Scenario struct {
	Rules       string `yaml:"rules"`
	Coordinator string `yaml:"coordinator"`
	Nodes       []Node `yaml:"nodes"`
}

// Node is one simulated Talos node.
type Node struct {
	Name       string                       `yaml:"name"`
	NodeIP     string                       `yaml:"nodeIP"`
	Addresses  []string                     `yaml:"addresses"`
	Metadata   runtime.PlatformMetadataSpec `yaml:"metadata"`
	ServingIPs []string                     `yaml:"servingIPs"`
	Hostile    bool                         `yaml:"hostile"`
}

func main() {
	n := flag.Int("nodes", 4, "number of nodes: the scenario's first N, plus generated metal nodes beyond it")
	file := flag.String("scenario", "", "scenario `FILE` (default: the embedded hack/demo/scenario.yaml)")
	keep := flag.Bool("keep", os.Getenv("KEEP") == "1", "keep everything running until interrupted (also KEEP=1)")
	timeout := flag.Duration("timeout", 2*time.Minute, "how long to wait for convergence")
	flag.Parse()
	if err := run(*n, *file, *keep, *timeout); err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
}

func loadScenario(file string, n int) (*Scenario, error) {
	data := defaultScenario
	if file != "" {
		var err error
		if data, err = os.ReadFile(file); err != nil {
			return nil, err
		}
	}
	var s Scenario
	dec := yaml.NewDecoder(strings.NewReader(string(data)))
	dec.KnownFields(true)
	if err := dec.Decode(&s); err != nil {
		return nil, fmt.Errorf("scenario: %w", err)
	}
	for i := len(s.Nodes); i < n; i++ {
		name := fmt.Sprintf("metal-%d", i+1)
		s.Nodes = append(s.Nodes, Node{Name: name, NodeIP: fmt.Sprintf("10.5.%d.%d", 1+i/250, 1+i%250),
			Metadata: runtime.PlatformMetadataSpec{Platform: "metal", Hostname: name}})
	}
	s.Nodes = s.Nodes[:min(n, len(s.Nodes))]
	return &s, nil
}

// children are the processes and namespaces to clean up.
type children struct {
	procs []*exec.Cmd
	netns []string
}

func (c *children) close() {
	for _, p := range c.procs {
		if p.Process != nil {
			_ = p.Process.Signal(syscall.SIGTERM)
		}
	}
	for _, p := range c.procs {
		done := make(chan struct{})
		go func() { _ = p.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			_ = p.Process.Kill()
		}
	}
	for _, ns := range c.netns {
		_ = exec.Command("ip", "netns", "del", ns).Run()
	}
}

func (c *children) start(name, logFile string, args ...string) (*exec.Cmd, error) {
	f, err := os.Create(logFile)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(name, args...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	c.procs = append(c.procs, cmd)
	return cmd, nil
}

func ip(args ...string) error {
	if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
		return fmt.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, out)
	}
	return nil
}

func (c *children) namespace(n Node) (string, error) {
	ns := "nid-" + n.Name
	_ = exec.Command("ip", "netns", "del", ns).Run() // left over from a killed run
	if err := ip("netns", "add", ns); err != nil {
		return "", err
	}
	c.netns = append(c.netns, ns)
	steps := [][]string{
		{"-n", ns, "link", "set", "lo", "up"},
		{"-n", ns, "link", "add", "eth0", "type", "ifb"},
		{"-n", ns, "link", "set", "eth0", "up"},
		{"-n", ns, "addr", "add", n.NodeIP + "/24", "dev", "eth0"},
	}
	for _, a := range n.Addresses {
		step := []string{"-n", ns, "addr", "add", a, "dev", "eth0"}
		if strings.Contains(a, ":") {
			step = append(step, "nodad")
		}
		steps = append(steps, step)
	}
	for _, s := range steps {
		if err := ip(s...); err != nil {
			return "", err
		}
	}
	return "/var/run/netns/" + ns, nil
}

func build(dir string) error {
	for _, cmd := range []string{"agent", "coordinator"} {
		done := ticker("    nodeinit-"+cmd+" still compiling", 15*time.Second)
		c := exec.Command("go", "build", "-trimpath", "-o", filepath.Join(dir, "nodeinit-"+cmd), "./"+cmd)
		c.Env = append(os.Environ(), "CGO_ENABLED=0")
		out, err := c.CombinedOutput()
		done()
		if err != nil {
			return fmt.Errorf("building %s: %v\n%s", cmd, err, out)
		}
	}
	return nil
}

// ticker prints what, with the time so far, every period until done is
// called, so that a long first compile never looks stuck.
func ticker(what string, period time.Duration) (done func()) {
	start, stop := time.Now(), make(chan struct{})
	go func() {
		t := time.NewTicker(period)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
				fmt.Printf("%s, %.0fs so far\n", what, time.Since(start).Seconds())
			}
		}
	}()
	return func() { close(stop) }
}

func run(n int, scenarioFile string, keep bool, timeout time.Duration) error {
	klog.SetLogger(logr.Discard())
	if os.Geteuid() != 0 {
		return errors.New("the demo creates network namespaces: run it as root")
	}
	if _, err := os.Stat("coordinator/deploy/rbac.yaml"); err != nil {
		return errors.New("run the demo from the repository root (make demo)")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		return errors.New("the demo needs the ip command for its network namespaces: install iproute2 (apt-get install iproute2)")
	}
	sc, err := loadScenario(scenarioFile, n)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	began := time.Now()

	fmt.Println("==> starting etcd, kube-apiserver (Node,RBAC + NodeRestriction) and kube-controller-manager (csrsigning) on 127.0.0.1")
	cluster, err := testcluster.Start(ctx, testcluster.Options{ControllerManager: true})
	if err != nil {
		return err
	}
	defer cluster.Close()
	dir := cluster.Dir()
	// Every node's machined; stopped after the agents (deferred first), as
	// machined outlives the extension services on a node going down.
	fmt.Println("==> starting the machined stand-in (Talos v1.13.7's socket authorization; one process serves every node)")
	mdLog, err := os.Create(filepath.Join(dir, "machined.log"))
	if err != nil {
		return err
	}
	defer mdLog.Close()
	mds, err := machined.Start(mdLog)
	if err != nil {
		return err
	}
	defer mds.Close()
	kids := &children{}
	defer kids.close()
	fmt.Println("==> building nodeinit-agent and nodeinit-coordinator (the first time about 1-2 min, then seconds)")
	if err := build(dir); err != nil {
		return err
	}

	fmt.Println("==> applying coordinator/deploy (RBAC, admission policy) and starting the coordinator as its ServiceAccount")
	if err := kubeapply.Files(ctx, cluster.Admin(), "coordinator/deploy/noderecords.yaml", "coordinator/deploy/rbac.yaml", "coordinator/deploy/admission-policy.yaml"); err != nil {
		return err
	}
	sa, err := cluster.ServiceAccountIdentity(ctx, "kube-system", "nodeinit-coordinator")
	if err != nil {
		return err
	}
	saKubeconfig, err := cluster.WriteKubeconfig("nodeinit-coordinator", sa)
	if err != nil {
		return err
	}
	coordCfg := filepath.Join(dir, "coordinator.yaml")
	rulesFile := filepath.Join(dir, "rules.yaml")
	if err := os.WriteFile(coordCfg, []byte(sc.Coordinator), 0o600); err != nil {
		return err
	}
	if err := os.WriteFile(rulesFile, []byte(sc.Rules), 0o600); err != nil {
		return err
	}
	if _, err := kids.start(filepath.Join(dir, "nodeinit-coordinator"), filepath.Join(dir, "coordinator.log"),
		"run", "--kubeconfig", saKubeconfig, "--config", coordCfg, "--id", "demo-coordinator", "--metrics-addr", "127.0.0.1:0",
		"--initialized-events"); err != nil {
		return err
	}

	nodesStarted := time.Now()
	fmt.Printf("==> starting %d nodes: network namespace, machined, nodeinit-agent (registered as its extension service), kubelet stand-in\n", len(sc.Nodes))
	kubelets := map[string]*kubeletsim.Kubelet{}
	for _, node := range sc.Nodes {
		path, err := kids.namespace(node)
		if err != nil {
			return err
		}
		md, err := mds.Node(ctx, node.Name)
		if err != nil {
			return err
		}
		nodeIP, err := netip.ParseAddr(node.NodeIP)
		if err != nil {
			return fmt.Errorf("node %s: %w", node.Name, err)
		}
		for _, err := range []error{md.SetPlatformMetadata(ctx, node.Metadata), md.SetNodename(ctx, node.Name), md.SetNodeIPs(ctx, nodeIP)} {
			if err != nil {
				return err
			}
		}
		id, err := cluster.NodeIdentity(node.Name)
		if err != nil {
			return err
		}
		agent, err := kids.start(filepath.Join(dir, "nodeinit-agent"), filepath.Join(dir, "agent-"+node.Name+".log"),
			"run", "--kubeconfig", id.Kubeconfig, "--machined-socket", md.Socket, "--netns", path,
			"--rules-file", rulesFile, "--provider-id-policy", "talos-fallback",
			"--key-file", filepath.Join(dir, "nodes", node.Name, "agent.key"))
		if err != nil {
			return err
		}
		// As machined's runner records the extension service it started:
		// machined's socket admits the agent by this PID.
		if err := md.RegisterAgent(ctx, agent.Process.Pid); err != nil {
			return err
		}
		cfg := kubeletsim.Config{NodeName: node.Name, NodeIPs: []netip.Addr{nodeIP}, Identity: id.Config(), CertDir: filepath.Join(dir, "nodes", node.Name, "pki")}
		for _, s := range node.ServingIPs {
			a, err := netip.ParseAddr(s)
			if err != nil {
				return fmt.Errorf("node %s servingIPs: %w", node.Name, err)
			}
			cfg.ServingIPs = append(cfg.ServingIPs, a)
		}
		if len(cfg.ServingIPs) > 0 {
			cfg.ServingDNSNames = []string{node.Name}
		}
		k, err := kubeletsim.Register(ctx, cfg)
		if err != nil {
			return err
		}
		defer k.Stop()
		if err := k.StartServing(ctx); err != nil {
			return err
		}
		kubelets[node.Name] = k
	}

	admin := kubernetes.NewForConfigOrDie(cluster.Admin())
	deadline := time.Now().Add(timeout)
	var last string
	var converged bool
	for {
		status, ok, err := progress(ctx, admin, sc, kubelets)
		if err != nil {
			return err
		}
		if status != last {
			fmt.Printf("    %6.1fs  %s\n", time.Since(nodesStarted).Seconds(), status)
			last = status
		}
		if ok {
			converged = true
			break
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			break
		}
		time.Sleep(250 * time.Millisecond)
	}
	if err := printTables(ctx, admin); err != nil {
		return err
	}
	if err := whatHappened(ctx, os.Stdout, admin, sc); err != nil {
		return err
	}
	fmt.Printf("\nLogs: %s (coordinator.log, agent-<node>.log, machined.log)\n", dir)
	if converged {
		fmt.Printf("\n==> converged %.1fs after the nodes started (%.1fs in all, with the builds): every node initialized, every honest serving certificate issued, the hostile CSR denied\n",
			time.Since(nodesStarted).Seconds(), time.Since(began).Seconds())
	}
	if keep {
		fmt.Print(keepCommands(cluster.AdminKubeconfig(), sc))
		<-ctx.Done()
	} else {
		fmt.Println("\nThe cluster stops now. `make demo KEEP=1` keeps it running and prints kubectl commands to explore it.")
	}
	if !converged {
		return fmt.Errorf("did not converge within %v: %s; the logs above say what each component waited for", timeout, last)
	}
	return nil
}

// whatHappened tells which component did what, from the cluster's own
// Events and CSRs.
func whatHappened(ctx context.Context, w io.Writer, cs kubernetes.Interface, sc *Scenario) error {
	events, err := cs.CoreV1().Events("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	count := map[string]int{}
	for _, e := range events.Items {
		who := e.Source.Component
		if who == "" {
			who = e.ReportingController
		}
		if strings.HasPrefix(who, "nodeinit") {
			count[who+" "+e.Reason] += max(int(e.Count), 1)
		}
	}
	csrs, err := cs.CertificatesV1().CertificateSigningRequests().List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	approved, denied := 0, 0
	for _, c := range csrs.Items {
		switch condition(c) {
		case certificatesv1.CertificateApproved:
			approved++
		case certificatesv1.CertificateDenied:
			denied++
		}
	}
	var hostile []string
	for _, n := range sc.Nodes {
		if n.Hostile {
			hostile = append(hostile, n.Name)
		}
	}
	var reasons []string
	for _, k := range slices.Sorted(maps.Keys(count)) {
		reasons = append(reasons, fmt.Sprintf("%s ×%d", k, count[k]))
	}
	fmt.Fprintf(w, `
What just happened
  nodeinit-agent, one per node, as the Talos extension service ext-nodeinit-agent, with that
    node's own kubelet credentials: read platform metadata from machined's socket and addresses
    from the kernel; wrote the node's addresses, rule labels, facts and agent key to its Node
    in one patch, asking for a providerID; signed an attestation for its kubelet's serving CSR.
  nodeinit-coordinator, leader-elected in kube-system, as its ServiceAccount: allocated pod
    CIDRs (IPv4 from the pool, IPv6 from each node's own prefix); granted the labels a node may
    not set itself (node-role.kubernetes.io/web, node.cloudprovider.kubernetes.io/*); in the
    same patch set the providerID each node asked for and removed the uninitialized taint;
    approved %d serving CSRs and denied %d (%s asked for another
    node's address).
  Events, by component and reason (the demo turns on --initialized-events; by default a clean
    join records no Event, only what needs a person does): %s
`, approved, denied, strings.Join(hostile, ", "), strings.Join(reasons, ", "))
	return nil
}

// keepCommands are ready to paste while the demo keeps running.
func keepCommands(kubeconfig string, sc *Scenario) string {
	node := sc.Nodes[0].Name
	return fmt.Sprintf(`
Everything keeps running. In another shell:

  export KUBECONFIG=%s
  kubectl get nodes -o wide
  kubectl get nodes -o custom-columns=NAME:.metadata.name,PROVIDER-ID:.spec.providerID,POD-CIDRS:.spec.podCIDRs,TAINTS:.spec.taints[*].key
  kubectl get nodes -L topology.kubernetes.io/zone,node.cloudprovider.kubernetes.io/platform,node-role.kubernetes.io/web
  kubectl describe node %s                 # its Events: Initialized (--initialized-events), with pod CIDRs and granted labels
  kubectl get csr                              # Approved and Denied serving CSRs
  kubectl get events -A --sort-by=.lastTimestamp
  kubectl get noderecords                      # what the coordinator recorded per node
  kubectl -n kube-system get lease nodeinit-coordinator -o yaml

Press Ctrl-C to stop.
`, kubeconfig, node)
}

// progress checks the scenario's expectations: every node initialized with
// pod CIDRs, every honest kubelet's certificate issued, every hostile CSR denied.
func progress(ctx context.Context, cs kubernetes.Interface, sc *Scenario, kubelets map[string]*kubeletsim.Kubelet) (string, bool, error) {
	nodes, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return "", false, err
	}
	csrs, err := cs.CertificatesV1().CertificateSigningRequests().List(ctx, metav1.ListOptions{})
	if err != nil {
		return "", false, err
	}
	initialized, issued, denied, honest, hostile := 0, 0, 0, 0, 0
	for _, n := range nodes.Items {
		if len(n.Spec.PodCIDRs) > 0 && !contract.Uninitialized(&n) {
			initialized++
		}
	}
	for _, node := range sc.Nodes {
		if node.Hostile {
			hostile++
			for _, c := range csrs.Items {
				if c.Spec.Username == "system:node:"+node.Name && condition(c) == certificatesv1.CertificateDenied {
					denied++
					break
				}
			}
			continue
		}
		honest++
		if len(kubelets[node.Name].Issued()) > 0 {
			issued++
		}
	}
	status := fmt.Sprintf("%d/%d nodes initialized, %d/%d serving certificates issued, %d/%d hostile CSRs denied",
		initialized, len(sc.Nodes), issued, honest, denied, hostile)
	return status, initialized == len(sc.Nodes) && issued == honest && denied == hostile, nil
}

func condition(c certificatesv1.CertificateSigningRequest) certificatesv1.RequestConditionType {
	for _, cd := range c.Status.Conditions {
		if cd.Status == corev1.ConditionTrue {
			return cd.Type
		}
	}
	return ""
}

func printTables(ctx context.Context, cs kubernetes.Interface) error {
	nodes, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "\nNODE\tPROVIDER-ID\tLABELS\tADDRESSES\tPOD-CIDRS\tTAINTS")
	for _, n := range nodes.Items {
		var addrs, taints, labels []string
		for _, a := range n.Status.Addresses {
			if a.Type != corev1.NodeHostName {
				addrs = append(addrs, a.Address)
			}
		}
		for _, t := range n.Spec.Taints {
			taints = append(taints, t.Key+":"+string(t.Effect))
		}
		for _, k := range []string{"topology.kubernetes.io/zone", "node-role.kubernetes.io/web", contract.LabelPlatform, "pvc-storage-class/name"} {
			if v, ok := n.Labels[k]; ok {
				short := k[strings.LastIndex(k, "/")+1:]
				labels = append(labels, short+"="+v)
			}
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\n", n.Name, dash(n.Spec.ProviderID), dash(strings.Join(labels, ",")),
			strings.Join(addrs, ","), dash(strings.Join(n.Spec.PodCIDRs, ",")), dash(strings.Join(taints, ",")))
	}
	csrs, err := cs.CertificatesV1().CertificateSigningRequests().List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	fmt.Fprintln(w, "\nCSR\tREQUESTOR\tCONDITION\tREASON")
	for _, c := range csrs.Items {
		cond, msg := "Pending", ""
		for _, cd := range c.Status.Conditions {
			if cd.Status == corev1.ConditionTrue {
				cond, msg = string(cd.Type), cd.Message
			}
		}
		if len(msg) > 90 {
			msg = msg[:87] + "..."
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\n", c.Name, c.Spec.Username, cond, dash(msg))
	}
	return w.Flush()
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
