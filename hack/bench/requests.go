package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// requestLabel matches one label of a Prometheus sample.
var requestLabel = regexp.MustCompile(`(\w+)="([^"]*)"`)

// apiRequests reads kube-apiserver's apiserver_request_total: the requests
// it finished so far, all clients together, by verb and resource (a watch
// counts when it ends).
func (e *env) apiRequests(ctx context.Context) (map[string]float64, error) {
	body, err := e.admin.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return nil, err
	}
	return parseRequests(body), nil
}

func parseRequests(body []byte) map[string]float64 {
	out := map[string]float64{}
	for _, m := range samples(body, func(name string) bool { return name == "apiserver_request_total" }) {
		key := m.labels["verb"] + " " + m.labels["resource"]
		if m.labels["subresource"] != "" {
			key += "/" + m.labels["subresource"]
		}
		out[key] += m.value
	}
	return out
}

// sample is one labelled sample of a Prometheus text exposition.
type sample struct {
	name   string
	labels map[string]string
	value  float64
}

// samples are body's labelled samples whose metric name keep accepts.
func samples(body []byte, keep func(name string) bool) []sample {
	var out []sample
	sc := bufio.NewScanner(bytes.NewReader(body))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		name, rest, ok := strings.Cut(sc.Text(), "{")
		if !ok || !keep(name) {
			continue
		}
		labels, value, ok := strings.Cut(rest, "} ")
		if !ok {
			continue
		}
		v, err := strconv.ParseFloat(strings.TrimSpace(value), 64)
		if err != nil {
			continue
		}
		l := map[string]string{}
		for _, m := range requestLabel.FindAllStringSubmatch(labels, -1) {
			l[m[1]] = m[2]
		}
		out = append(out, sample{name: name, labels: l, value: v})
	}
	return out
}

// printRequests writes the requests between before and after per node,
// most first, down to 0.05 per node.
func printRequests(w *strings.Builder, before, after map[string]float64, nodes int) {
	type row struct {
		key string
		n   float64
	}
	var rows []row
	total := 0.0
	for k, v := range after {
		if d := v - before[k]; d > 0 {
			rows = append(rows, row{k, d})
			total += d
		}
	}
	slices.SortFunc(rows, func(a, b row) int {
		if a.n != b.n {
			if a.n > b.n {
				return -1
			}
			return 1
		}
		return strings.Compare(a.key, b.key)
	})
	fmt.Fprintf(w, "kube-apiserver requests to the last node initialized, all clients (apiserver_request_total; a watch counts when it ends): %.1f/node\n", total/float64(nodes))
	for _, r := range rows {
		if r.n/float64(nodes) < 0.05 {
			break
		}
		fmt.Fprintf(w, "      %-44s %5.2f/node\n", r.key, r.n/float64(nodes))
	}
}
