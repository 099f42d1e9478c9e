package main

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/talos-nodeinit/talos-nodeinit/pkg/contract"
	"github.com/talos-nodeinit/talos-nodeinit/pkg/harness/testcluster"
)

// latencies of one storm.
type latencies struct {
	nodes       int
	span        time.Duration   // first registration → last node initialized
	certSpan    time.Duration   // first registration → last certificate issued
	init, certs []time.Duration // per node, from its registration
}

func (e *env) latencies(nodes []*simNode) latencies {
	var l latencies
	var first, lastInit, lastCert time.Time
	for _, sn := range nodes {
		reg, cert, _ := sn.times()
		init := e.watch.initializedAt(sn.name)
		if first.IsZero() || reg.Before(first) {
			first = reg
		}
		lastInit = later(lastInit, init)
		lastCert = later(lastCert, cert)
		l.init = append(l.init, init.Sub(reg))
		l.certs = append(l.certs, cert.Sub(reg))
	}
	l.nodes, l.span, l.certSpan = len(nodes), lastInit.Sub(first), lastCert.Sub(first)
	return l
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

func (l latencies) print(w *strings.Builder) {
	fmt.Fprintf(w, "first registration → last node initialized: %s (last certificate issued: %s)\n", l.span.Round(time.Millisecond), l.certSpan.Round(time.Millisecond))
	for _, row := range []struct {
		name string
		ds   []time.Duration
	}{{"registration → initialized", l.init}, {"registration → certificate issued", l.certs}} {
		p50, p95, p99, mx := percentiles(row.ds)
		fmt.Fprintf(w, "  %-34s p50 %8s  p95 %8s  p99 %8s  max %8s\n", row.name,
			p50.Round(time.Millisecond), p95.Round(time.Millisecond), p99.Round(time.Millisecond), mx.Round(time.Millisecond))
	}
	if i, _, _, _ := percentiles(l.init); i > 0 {
		c, _, _, _ := percentiles(l.certs)
		fmt.Fprintf(w, "  certificate p50 / initialized p50 = %.2f (kube-controller-manager signs at its client rate: -kcm-qps)\n", c.Seconds()/i.Seconds())
	}
}

// quietCount is what was written in the quiet window, by component.
type quietCount struct{ agent, coordinator, kubelet, leases, other int }

func (q quietCount) String() string {
	return fmt.Sprintf("agents %d, coordinator %d (plus %d Lease renewals), kubelets %d, other %d", q.agent, q.coordinator, q.leases, q.kubelet, q.other)
}

func quietWrites(events []testcluster.AuditEvent) quietCount {
	var q quietCount
	for _, e := range events {
		switch c := component(e); {
		case e.ObjectRef.Resource == "leases":
			q.leases++
		case c == compAgent:
			q.agent++
		case c == compCoordinator:
			q.coordinator++
		case c == compKubelet:
			q.kubelet++
		default:
			q.other++
		}
	}
	return q
}

// existingWrites counts the coordinator's writes to the pre-created Nodes.
func existingWrites(events []testcluster.AuditEvent) int {
	n := 0
	for _, e := range events {
		if component(e) == compCoordinator && e.ObjectRef.Resource == "nodes" && strings.HasPrefix(e.ObjectRef.Name, "existing-") {
			n++
		}
	}
	return n
}

// listWrites shows every write component c made for the first few nodes
// over budget, with response codes.
func (e *env) listWrites(events []testcluster.AuditEvent, names map[string]bool, owners map[string]string, c string, over []string) string {
	var b strings.Builder
	for _, o := range over[:min(3, len(over))] {
		node, _, _ := strings.Cut(o, " ")
		fmt.Fprintf(&b, "    %s:", node)
		for _, w := range attribute(events, names, owners) {
			if w.Node == node && w.Component == c {
				fmt.Fprintf(&b, " [%s → %d]", w.What, w.Code)
			}
		}
		b.WriteString("\n")
	}
	return b.String()
}

// createExisting creates n Nodes as admin, already initialized: pod CIDRs
// from the bench pool's start, no uninitialized taint.
func createExisting(ctx context.Context, e *env, n int) (time.Duration, error) {
	start := time.Now()
	granted, err := contract.EncodeKeys([]string{contract.LabelClusterName})
	if err != nil {
		return 0, err
	}
	err = parallel(n, 64, func(i int) error {
		name := fmt.Sprintf("existing-%04d", i)
		// The i-th /24 of 100.64.0.0/10.
		cidr := netip.PrefixFrom(netip.AddrFrom4([4]byte{100, byte(64 + i/256), byte(i % 256), 0}), 24)
		// As the coordinator left them: its cluster-name label, recorded as granted.
		node := &corev1.Node{
			ObjectMeta: metav1.ObjectMeta{Name: name,
				Labels:      map[string]string{"kubernetes.io/hostname": name, contract.LabelClusterName: "bench"},
				Annotations: map[string]string{contract.AnnotationGrantedLabels: granted}},
			Spec: corev1.NodeSpec{PodCIDR: cidr.String(), PodCIDRs: []string{cidr.String()}, ProviderID: "talos://metal/" + name},
		}
		created, err := e.admin.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{})
		if err != nil {
			return err
		}
		ip := netip.AddrFrom4([4]byte{10, 200, byte(i / 250), byte(i%250 + 1)})
		created.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: ip.String()}, {Type: corev1.NodeHostName, Address: name}}
		_, err = e.admin.CoreV1().Nodes().UpdateStatus(ctx, created, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		return 0, err
	}
	// Wait until the watch has them all, so the storm starts from a synced cache.
	for e.watch.get(fmt.Sprintf("existing-%04d", n-1)) == nil {
		time.Sleep(10 * time.Millisecond)
	}
	return time.Since(start), nil
}

// phases breaks registration → initialized down by the audited writes:
// for each node, when each component's first successful write of a kind
// completed, as a duration from the node's registration (p50 and max).
func phases(ws []write, nodes []*simNode) string {
	reg := map[string]time.Time{}
	for _, sn := range nodes {
		reg[sn.name], _, _ = sn.times()
	}
	first := map[string]map[string]time.Duration{} // step → node → after registration
	var order []string
	for _, w := range ws {
		// The coordinator's Events are for people.
		if w.Code >= 300 || w.Event {
			continue
		}
		step := w.Component + " " + w.What
		if first[step] == nil {
			first[step] = map[string]time.Duration{}
			order = append(order, step)
		}
		if _, seen := first[step][w.Node]; !seen {
			first[step][w.Node] = w.At.Sub(reg[w.Node])
		}
	}
	var b strings.Builder
	for _, step := range order {
		var ds []time.Duration
		for _, d := range first[step] {
			ds = append(ds, d)
		}
		p50, _, _, mx := percentiles(ds)
		fmt.Fprintf(&b, "  %-56s p50 %8s  max %8s  (%d nodes)\n", step, p50.Round(time.Millisecond), mx.Round(time.Millisecond), len(ds))
	}
	b.WriteString(certificateSteps(first))
	return b.String()
}

// certificateSteps is where a node's serving certificate waits after its
// initializing patch: each step's first write, from the previous one's,
// per node (p50 and p95 over the nodes that have both).
func certificateSteps(first map[string]map[string]time.Duration) string {
	steps := []string{
		compCoordinator + " patch nodes",
		compAgent + " patch nodes", // the attestation (its report is nodes/status)
		compCoordinator + " update certificatesigningrequests/approval",
		compOther + " update certificatesigningrequests/status",
	}
	var b strings.Builder
	for i := 1; i < len(steps); i++ {
		var ds []time.Duration
		for node, at := range first[steps[i]] {
			if before, ok := first[steps[i-1]][node]; ok {
				ds = append(ds, at-before)
			}
		}
		if len(ds) == 0 {
			continue
		}
		if b.Len() == 0 {
			b.WriteString("the certificate's steps, each from the one before, per node:\n")
		}
		p50, p95, _, _ := percentiles(ds)
		fmt.Fprintf(&b, "  %-56s p50 %8s  p95 %8s  (%d nodes)\n", "→ "+steps[i], p50.Round(time.Millisecond), p95.Round(time.Millisecond), len(ds))
	}
	return b.String()
}

// serverSpan is the storm as the API server saw it, from its audit log:
// the first Node created to the last node's initializing patch (the
// coordinator's first successful patch of each Node). The bench's own
// watch sees both later, by as much as the busy bench process lags (seconds
// at 1,000 nodes on 2 cores), so this is the figure comparable with
// floorServerSpan. It fails if a node has no such patch.
func serverSpan(ws []write, nodes []*simNode) (time.Duration, error) {
	var first time.Time
	init := map[string]time.Time{}
	for _, w := range ws {
		if w.Code >= 300 || w.Event {
			continue
		}
		switch {
		case w.Component == compKubelet && w.What == "create nodes":
			if first.IsZero() || w.At.Before(first) {
				first = w.At
			}
		case w.Component == compCoordinator && w.What == "patch nodes":
			if _, ok := init[w.Node]; !ok {
				init[w.Node] = w.At
			}
		}
	}
	var last time.Time
	for _, sn := range nodes {
		at, ok := init[sn.name]
		if !ok {
			return 0, fmt.Errorf("no initializing patch of %s in the audit log", sn.name)
		}
		last = later(last, at)
	}
	return last.Sub(first), nil
}

// floorServerSpan is a floor as the API server saw it: from its first
// write to its last (an approval), among the audited requests for objects
// named prefix-….
func floorServerSpan(events []testcluster.AuditEvent, prefix string) time.Duration {
	var first, last time.Time
	for _, e := range events {
		if !strings.HasPrefix(e.ObjectRef.Name, prefix+"-") {
			continue
		}
		if first.IsZero() || e.StageTimestamp.Before(first) {
			first = e.StageTimestamp
		}
		last = later(last, e.StageTimestamp)
	}
	return last.Sub(first)
}
