package main

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/klog/v2"

	"github.com/talos-nodeinit/talos-nodeinit/pkg/harness/leakcheck"
)

// The fault tests share one control plane; each uses its own node names and
// address range (from), and its own coordinators.
var shared *env

func TestMain(m *testing.M) {
	klog.SetLogger(logr.Discard())
	var err error
	if shared, err = newEnv(context.Background(), os.Stderr, nil, nil); err != nil {
		fmt.Fprintln(os.Stderr, "bench tests:", err)
		os.Exit(1)
	}
	code := m.Run()
	if code != 0 {
		fmt.Fprint(os.Stderr, shared.cluster.LogTails(30))
	}
	shared.close()
	if err := leakcheck.Find(); err != nil {
		// Every test stops and waits for what it started: agents,
		// kubelet stand-ins, coordinators and their watches.
		fmt.Fprintln(os.Stderr, "bench tests:", err)
		code = max(code, 1)
	}
	os.Exit(code)
}

// nodesFor prepares n nodes that are torn down when the test ends.
func nodesFor(t *testing.T, prefix string, from, n int) []*simNode {
	t.Helper()
	nodes, err := shared.prepare(t.Context(), prefix, from, n)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, sn := range nodes {
			sn.close()
		}
	})
	return nodes
}

// coordinatorFor runs a supervised coordinator for the test and waits until
// one coordinator leads and is ready.
func coordinatorFor(t *testing.T, id string, args ...string) *supervised {
	t.Helper()
	s, err := shared.supervise(id, args...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		s.stop()
		if t.Failed() {
			t.Logf("%s log tail:\n%s", id, s.current().logTail())
		}
	})
	return s
}

func waitLeading(t *testing.T, s *supervised) {
	t.Helper()
	if _, _, err := shared.waitLeaderReady(t.Context(), s.current(), time.Minute); err != nil {
		t.Fatalf("%v\n%s", err, s.current().logTail())
	}
}

// eventually polls cond until it holds, failing the test after timeout.
func eventually(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(timeout); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, timeout)
		}
	}
}

// underWay waits until some of nodes are initialized: the storm is on,
// and the leader is writing.
func underWay(t *testing.T, nodes []*simNode) {
	t.Helper()
	eventually(t, time.Minute, "the storm under way", func() bool {
		done := 0
		for _, sn := range nodes {
			if !shared.watch.initializedAt(sn.name).IsZero() {
				done++
			}
		}
		return done >= len(nodes)/20+1
	})
}

// converge waits for every node (initialized, certificate issued) and checks
// the end state: no pod CIDR twice, exact labels and addresses.
func converge(t *testing.T, nodes []*simNode, timeout time.Duration) time.Time {
	t.Helper()
	at, err := shared.waitConverged(t.Context(), nodes, timeout)
	if err != nil {
		t.Fatal(err)
	}
	if err := shared.checkAll(nodes); err != nil {
		t.Fatal(err)
	}
	return at
}

// lastInitialized is when the last of nodes was first seen initialized.
func lastInitialized(nodes []*simNode) time.Time {
	var last time.Time
	for _, sn := range nodes {
		last = later(last, shared.watch.initializedAt(sn.name))
	}
	return last
}

func lastCertified(nodes []*simNode) time.Time {
	var last time.Time
	for _, sn := range nodes {
		_, c, _ := sn.times()
		last = later(last, c)
	}
	return last
}

// kill -9 of the leading coordinator during a 200-node storm: the standby
// takes over, every node is initialized, and no CIDR is given twice.
func TestLeaderKilledDuringStorm(t *testing.T) {
	nodes := nodesFor(t, "kill", 0, 200)
	a := coordinatorFor(t, "kill-a", fastLease...)
	waitLeading(t, a)
	b := coordinatorFor(t, "kill-b", fastLease...)
	storm := make(chan error, 1)
	go func() { storm <- shared.storm(t.Context(), nodes) }()
	underWay(t, nodes)
	killed := time.Now()
	a.current().kill()
	eventually(t, 30*time.Second, "a coordinator taking over after kill -9", func() bool {
		h := shared.holder(t.Context())
		return h == b.id || (h == a.id && a.restarted() > 0 && time.Since(killed) > 4*time.Second)
	})
	takeover := time.Since(killed)
	if err := <-storm; err != nil {
		t.Fatal(err)
	}
	converge(t, nodes, 3*time.Minute)
	t.Logf("kill -9 of the leader: lease taken over after %v (lease 4s); all 200 nodes initialized %v and certified %v after the kill",
		takeover.Round(time.Millisecond), lastInitialized(nodes).Sub(killed).Round(time.Millisecond), lastCertified(nodes).Sub(killed).Round(time.Millisecond))
}

// restartDuringStorm stops a control-plane component right after every node
// registered, keeps it down for outage, and brings it back.
func restartDuringStorm(t *testing.T, prefix string, from int, stop func(), start func() error) {
	nodes := nodesFor(t, prefix, from, 100)
	c := coordinatorFor(t, prefix+"-coordinator")
	waitLeading(t, c)
	if err := shared.storm(t.Context(), nodes); err != nil {
		t.Fatal(err)
	}
	stop()
	stopped := time.Now()
	time.Sleep(3 * time.Second)
	if err := start(); err != nil {
		t.Fatal(err)
	}
	back := time.Now()
	converge(t, nodes, 4*time.Minute)
	init, cert := lastInitialized(nodes), lastCertified(nodes)
	t.Logf("%s: down %v; every node initialized %v and certified %v after it was back (coordinator restarts: %d)",
		prefix, back.Sub(stopped).Round(time.Millisecond), sinceOrZero(init, back), sinceOrZero(cert, back), c.restarted())
}

// sinceOrZero is t-from, or 0 when t came first (done before the fault ended).
func sinceOrZero(t, from time.Time) time.Duration {
	if t.Before(from) {
		return 0
	}
	return t.Sub(from).Round(time.Millisecond)
}

func TestAPIServerRestartDuringStorm(t *testing.T) {
	restartDuringStorm(t, "apirestart", 1000, shared.cluster.StopAPIServer,
		func() error { return shared.cluster.StartAPIServer(t.Context()) })
}

func TestEtcdRestartDuringStorm(t *testing.T) {
	restartDuringStorm(t, "etcdrestart", 2000, shared.cluster.StopEtcd, shared.cluster.StartEtcd)
}

// The real agent binary is killed with SIGKILL right after its first write
// and started again: the node finishes, and the restarted agent repeats none
// of the writes already made.
func TestAgentKilledMidJoin(t *testing.T) {
	nodes := nodesFor(t, "agentkill", 3000, 1)
	sn := nodes[0]
	c := coordinatorFor(t, "agentkill-coordinator")
	waitLeading(t, c)
	if err := shared.startAgentProcess(sn); err != nil {
		t.Fatal(err)
	}
	sn.register(t.Context())
	if _, _, err := sn.times(); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "the agent's report", func() bool {
		n := shared.watch.get(sn.name)
		return n != nil && len(n.Annotations) > 1 && len(n.Labels) > 5
	})
	sn.agentProc.Stop(syscall.SIGKILL, 5*time.Second)
	killed := time.Now()
	if err := shared.startAgentProcess(sn); err != nil {
		t.Fatal(err)
	}
	converge(t, nodes, time.Minute)
	events, err := shared.cluster.Audit()
	if err != nil {
		t.Fatal(err)
	}
	owners, err := shared.csrOwners(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	stats := summarize(attribute(events, map[string]bool{sn.name: true}, owners), 1)
	if n := stats.perNode[compAgent][sn.name]; n > agentBudget {
		t.Errorf("the agent wrote %d times across the kill (budget %d): %v", n, agentBudget, stats.byKind[compAgent])
	}
	t.Logf("agent killed after its report: node initialized and certified %v after the kill; agent writes %v",
		sinceOrZero(later(lastInitialized(nodes), lastCertified(nodes)), killed), stats.byKind[compAgent])
}

// eth0 flaps 20 times on a joined node. The kernel drops the IPv6 address
// on every down; it is added back after every up, as Talos's network
// controllers do. The Node's addresses end exact and its pod CIDRs never change.
func TestLinkFlap(t *testing.T) {
	nodes := nodesFor(t, "flap", 3100, 3)
	c := coordinatorFor(t, "flap-coordinator")
	waitLeading(t, c)
	if err := shared.storm(t.Context(), nodes); err != nil {
		t.Fatal(err)
	}
	converge(t, nodes, time.Minute)
	sn := nodes[0]
	cidrs := shared.watch.get(sn.name).Spec.PodCIDRs
	for range 20 {
		if err := sn.ns.setLink(false); err != nil {
			t.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond)
		if err := sn.ns.setLink(true); err != nil {
			t.Fatal(err)
		}
		// The kernel drops IPv6 addresses when a link goes down.
		if err := sn.ns.ensureAddr(sn.ip6); err != nil {
			t.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	last := time.Now()
	eventually(t, 30*time.Second, "the Node's status exact after the last flap", func() bool { return checkNode(sn, shared.watch.get(sn.name)) == nil })
	settled := time.Since(last)
	if got := shared.watch.get(sn.name).Spec.PodCIDRs; fmt.Sprint(got) != fmt.Sprint(cidrs) {
		t.Errorf("pod CIDRs changed across the flaps: %v → %v", cidrs, got)
	}
	converge(t, nodes, time.Minute)
	t.Logf("20 flaps of eth0: Node status exact %v after the last one; pod CIDRs unchanged %v", settled.Round(time.Millisecond), cidrs)
}

// The pure parts of the report.
func TestPercentiles(t *testing.T) {
	var ds []time.Duration
	for i := 1; i <= 100; i++ {
		ds = append(ds, time.Duration(i)*time.Millisecond)
	}
	p50, p95, p99, mx := percentiles(ds)
	if p50 != 50*time.Millisecond || p95 != 95*time.Millisecond || p99 != 99*time.Millisecond || mx != 100*time.Millisecond {
		t.Errorf("percentiles %v %v %v %v", p50, p95, p99, mx)
	}
	if a, b, c, d := percentiles(nil); a+b+c+d != 0 {
		t.Error("empty input")
	}
}

func TestNodeSpecsAreDistinct(t *testing.T) {
	ips, nets := map[netip.Addr]int{}, map[netip.Prefix]int{}
	for i := range 6000 {
		_, ip, ip6, _ := nodeSpec("x", i)
		if j, dup := ips[ip]; dup {
			t.Fatalf("nodes %d and %d share %s", i, j, ip)
		}
		if j, dup := nets[ip6.Masked()]; dup {
			t.Fatalf("nodes %d and %d share %s", i, j, ip6.Masked())
		}
		ips[ip], nets[ip6.Masked()] = i, i
	}
}
