package main

import (
	"bufio"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/talos-nodeinit/talos-nodeinit/pkg/harness/testcluster"
)

// procUsage is a process's CPU time and peak resident set, from /proc.
type procUsage struct {
	CPU     time.Duration
	PeakRSS int64 // bytes (VmHWM)
}

// readProcUsage reads /proc/<pid>/stat (utime+stime, clock ticks of 1/100 s
// on Linux) and /proc/<pid>/status (VmHWM). A vanished process reads zero.
func readProcUsage(pid int) procUsage {
	var u procUsage
	if data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); err == nil {
		// Fields after the ")" that ends the command name; utime and stime
		// are the 14th and 15th fields of the whole line.
		if i := strings.LastIndexByte(string(data), ')'); i >= 0 {
			f := strings.Fields(string(data)[i+1:])
			if len(f) > 13 {
				ut, _ := strconv.ParseInt(f[11], 10, 64)
				st, _ := strconv.ParseInt(f[12], 10, 64)
				u.CPU = time.Duration(ut+st) * 10 * time.Millisecond
			}
		}
	}
	if f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid)); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if v, ok := strings.CutPrefix(sc.Text(), "VmHWM:"); ok {
				kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
				u.PeakRSS = kb << 10
			}
		}
		f.Close()
	}
	return u
}

// percentiles returns p50, p95, p99 and max of ds (nearest rank).
func percentiles(ds []time.Duration) (p50, p95, p99, maxd time.Duration) {
	if len(ds) == 0 {
		return
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	rank := func(p float64) time.Duration {
		i := int(p*float64(len(s))+0.999999) - 1
		return s[max(0, min(i, len(s)-1))]
	}
	return rank(0.50), rank(0.95), rank(0.99), s[len(s)-1]
}

// Components that write to the API server, told apart by user and user agent.
const (
	compAgent       = "agent"
	compKubelet     = "kubelet"
	compCoordinator = "coordinator"
	compOther       = "other"
)

// coordinatorUser is the coordinator's ServiceAccount.
const coordinatorUser = "system:serviceaccount:kube-system:nodeinit-coordinator"

// component classifies an audited request. The agent and the kubelet share
// the node's identity; the agent's user agent is nodeinit-agent/<version>.
func component(e testcluster.AuditEvent) string {
	switch {
	case e.User.Username == coordinatorUser:
		return compCoordinator
	case strings.HasPrefix(e.User.Username, "system:node:") && strings.HasPrefix(e.UserAgent, "nodeinit-agent/"):
		return compAgent
	case strings.HasPrefix(e.User.Username, "system:node:"):
		return compKubelet
	}
	return compOther
}

// write is one audited mutating request, attributed to a node.
type write struct {
	Node, Component, What string // What: "verb resource[/subresource]"
	Code                  int
	Event                 bool
	At                    time.Time
}

// attribute maps audited requests to the node they concern: a Node by its
// name, a CSR by its requestor (csrOwner: CSR name → node), an Event by the
// object its name starts with. Requests that concern no node in names, and
// leader-election Leases, are dropped.
func attribute(events []testcluster.AuditEvent, names map[string]bool, csrOwner map[string]string) []write {
	var out []write
	for _, e := range events {
		ref := e.ObjectRef
		what := e.Verb + " " + ref.Resource
		if ref.Subresource != "" {
			what += "/" + ref.Subresource
		}
		var node string
		switch ref.Resource {
		case "nodes", "noderecords":
			node = ref.Name
		case "certificatesigningrequests":
			node = csrOwner[ref.Name]
		case "events":
			obj, _, _ := strings.Cut(ref.Name, ".")
			node = obj
			if owner, ok := csrOwner[obj]; ok {
				node = owner
			}
		}
		if node == "" && ref.Resource == "certificatesigningrequests" && e.Verb == "create" && strings.HasPrefix(e.User.Username, "system:node:") {
			node = strings.TrimPrefix(e.User.Username, "system:node:") // generateName: the name is not in the request
		}
		if !names[node] {
			continue
		}
		out = append(out, write{Node: node, Component: component(e), What: what, Code: e.ResponseStatus.Code, Event: ref.Resource == "events", At: e.StageTimestamp})
	}
	return out
}

// writeStats sums writes by component: per-node averages by kind, the
// largest per-node count (Events apart) and the nodes over a budget.
type writeStats struct {
	nodes       int
	byKind      map[string]map[string]int            // component → what → count
	perNode     map[string]map[string]int            // component → node → non-Event writes
	perNodeKind map[string]map[string]map[string]int // component → node → what → count
	events      map[string]int                       // component → Events
}

func summarize(ws []write, nodes int) writeStats {
	s := writeStats{nodes: nodes, byKind: map[string]map[string]int{}, perNode: map[string]map[string]int{},
		perNodeKind: map[string]map[string]map[string]int{}, events: map[string]int{}}
	for _, w := range ws {
		if s.byKind[w.Component] == nil {
			s.byKind[w.Component] = map[string]int{}
			s.perNode[w.Component] = map[string]int{}
			s.perNodeKind[w.Component] = map[string]map[string]int{}
		}
		s.byKind[w.Component][w.What]++
		if w.Event {
			s.events[w.Component]++
			continue
		}
		s.perNode[w.Component][w.Node]++
		if s.perNodeKind[w.Component][w.Node] == nil {
			s.perNodeKind[w.Component][w.Node] = map[string]int{}
		}
		s.perNodeKind[w.Component][w.Node][w.What]++
	}
	return s
}

// overKind lists the nodes that got more writes of one kind from c than
// budget allows for it (a kind without a budget is not allowed at all): a
// retry, a conflict or a duplicate shows here even when the total fits.
func (s writeStats) overKind(c string, budget map[string]int) []string {
	var out []string
	for n, kinds := range s.perNodeKind[c] {
		for what, v := range kinds {
			if v > budget[what] {
				out = append(out, fmt.Sprintf("%s (%d× %s, budget %d)", n, v, what, budget[what]))
			}
		}
	}
	slices.Sort(out)
	return out
}

// maxPerNode is the largest count of non-Event writes one node received from c.
func (s writeStats) maxPerNode(c string) int {
	m := 0
	for _, v := range s.perNode[c] {
		m = max(m, v)
	}
	return m
}

// over lists the nodes with more than budget non-Event writes from c; the
// nodes in plusOne may have one more.
func (s writeStats) over(c string, budget int, plusOne map[string]bool) []string {
	var out []string
	for n, v := range s.perNode[c] {
		b := budget
		if plusOne[n] {
			b++
		}
		if v > b {
			out = append(out, fmt.Sprintf("%s (%d)", n, v))
		}
	}
	slices.Sort(out)
	return out
}

// lateCSR are the nodes c initialized before it saw their kubelet's CSR:
// the review request was a second Node patch, and the approval first named
// the certificate in the record (its one update). Only the coordinator
// has them.
func lateCSR(s writeStats, c string) map[string]bool {
	out := map[string]bool{}
	if c != compCoordinator {
		return out
	}
	for n, kinds := range s.perNodeKind[c] {
		if kinds["patch nodes"] == 2 && kinds["update noderecords"] == 1 {
			out[n] = true
		}
	}
	return out
}

func (s writeStats) print(w *strings.Builder) {
	for _, c := range []string{compKubelet, compAgent, compCoordinator, compOther} {
		kinds := s.byKind[c]
		if len(kinds) == 0 {
			continue
		}
		total := 0
		var keys []string
		for k, v := range kinds {
			total += v
			keys = append(keys, k)
		}
		slices.Sort(keys)
		fmt.Fprintf(w, "  %-12s %5.2f writes/node (%d Events, %.2f/node; max %d non-Event writes on one node)\n",
			c, float64(total)/float64(s.nodes), s.events[c], float64(s.events[c])/float64(s.nodes), s.maxPerNode(c))
		for _, k := range keys {
			fmt.Fprintf(w, "      %-44s %5.2f/node\n", k, float64(kinds[k])/float64(s.nodes))
		}
	}
}
