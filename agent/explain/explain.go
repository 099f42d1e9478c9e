// Package explain answers, offline, "what would the agent write for this
// node?": it runs the same pure computation as the run loop on facts read
// from files (the YAML `talosctl get platformmetadata -o yaml` prints, or a
// bare spec) and prints the result as JSON, YAML or a table.
package explain

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/siderolabs/talos/pkg/machinery/resources/hardware"
	"github.com/siderolabs/talos/pkg/machinery/resources/runtime"
	"go.yaml.in/yaml/v3"
	sigsyaml "sigs.k8s.io/yaml"

	"github.com/talos-nodeinit/talos-nodeinit/pkg/contract"
	"github.com/talos-nodeinit/talos-nodeinit/pkg/desired"
	"github.com/talos-nodeinit/talos-nodeinit/pkg/facts"
	"github.com/talos-nodeinit/talos-nodeinit/pkg/netaddr"
	"github.com/talos-nodeinit/talos-nodeinit/pkg/rules"
)

// Input is one node's facts.
type Input struct {
	Rules    *rules.Rules
	Metadata facts.Platform
	System   *facts.System
	// NodeName defaults to the metadata hostname.
	NodeName string
	// Addresses are the node's interface addresses (CIDRs). The first is
	// taken as the node IP unless NodeIPs is set.
	Addresses []netip.Prefix
	NodeIPs   []netip.Addr
	Policy    desired.ProviderIDPolicy
}

// Output is exactly what the run loop would write, in the shape the
// `explain -o json` contract promises.
type Output struct {
	Labels           map[string]string `json:"labels"`
	RequestedLabels  map[string]string `json:"requestedLabels"`
	Annotations      map[string]string `json:"annotations"`
	RequestedTaints  []contract.Taint  `json:"requestedTaints"`
	ProviderID       string            `json:"providerID"`
	PlatformMetadata map[string]any    `json:"platformMetadata"`
	Errors           []string          `json:"errors"`
}

// Explain computes the output for one node.
func Explain(in Input) Output {
	name := in.NodeName
	if name == "" {
		name = in.Metadata.Hostname
	}
	nodeIPs := in.NodeIPs
	var addrs []netaddr.Address
	for _, p := range in.Addresses {
		addrs = append(addrs, netaddr.Address{Prefix: p, Link: "eth0", LinkUp: true, Permanent: true})
		if len(in.NodeIPs) == 0 && len(nodeIPs) == 0 {
			nodeIPs = []netip.Addr{p.Addr()}
		}
	}
	md := in.Metadata
	want, _, err := desired.Compute(desired.Inputs{
		NodeName:   name,
		Talos:      facts.Talos{Metadata: &md, System: in.System, Nodename: name, NodeIPs: nodeIPs},
		Addresses:  addrs,
		Classifier: netaddr.NewClassifier(),
		Rules:      in.Rules,
		Policy:     in.Policy,
	})
	out := Output{
		Labels:          orEmpty(want.Labels),
		RequestedLabels: orEmpty(want.Rules.RequestedLabels),
		Annotations:     orEmpty(want.Rules.Annotations),
		RequestedTaints: want.Rules.Taints,
		ProviderID:      want.ProviderID,
		Errors:          append([]string{}, want.Rules.Errors...),
	}
	if out.RequestedTaints == nil {
		out.RequestedTaints = []contract.Taint{}
	}
	if err != nil {
		out.Errors = append(out.Errors, err.Error())
	}
	out.PlatformMetadata, err = camelCase(runtime.PlatformMetadataSpec(want.Rules.Metadata))
	if err != nil {
		out.Errors = append(out.Errors, err.Error())
	}
	return out
}

func orEmpty(m map[string]string) map[string]string {
	if m == nil {
		return map[string]string{}
	}
	return m
}

// camelCase renders a Talos spec with Talos's own (YAML) field names.
func camelCase(spec any) (map[string]any, error) {
	b, err := yaml.Marshal(spec)
	if err != nil {
		return nil, err
	}
	m := map[string]any{}
	return m, yaml.Unmarshal(b, &m)
}

// ReadPlatformMetadata accepts `talosctl get platformmetadata -o yaml`
// output (a resource with node, metadata and spec) or a bare spec. It is
// decoded as Talos's own type, whose YAML keys are the ones talosctl prints.
func ReadPlatformMetadata(data []byte) (facts.Platform, error) {
	var spec runtime.PlatformMetadataSpec
	if err := readSpec(data, &spec); err != nil {
		return facts.Platform(spec), fmt.Errorf("platform metadata: %w", err)
	}
	if spec.Platform == "" {
		return facts.Platform(spec), errors.New("platform metadata: no platform (is this `talosctl get platformmetadata -o yaml` output?)")
	}
	return facts.Platform(spec), nil
}

// ReadSystemInformation accepts `talosctl get systeminformation -o yaml`
// output or a bare spec.
func ReadSystemInformation(data []byte) (facts.System, error) {
	var spec hardware.SystemInformationSpec
	if err := readSpec(data, &spec); err != nil {
		return facts.System(spec), fmt.Errorf("system information: %w", err)
	}
	return facts.System(spec), nil
}

// readSpec takes the first YAML document; a resource's spec is under
// `spec:` next to `metadata:`. Decoding is strict: a key the spec does not
// have would otherwise be dropped, and a selector on it match nothing.
func readSpec(data []byte, into any) error {
	var doc yaml.Node
	if err := yaml.NewDecoder(bytes.NewReader(data)).Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return errors.New("empty file")
		}
		return err
	}
	if len(doc.Content) == 0 {
		return errors.New("empty file")
	}
	spec := doc.Content[0]
	if value(spec, "metadata") != nil {
		if s := value(spec, "spec"); s != nil {
			spec = s
		}
	}
	if err := checkKeys(spec, reflect.TypeOf(into).Elem()); err != nil {
		return err
	}
	return spec.Decode(into)
}

// value returns the value under key in a YAML mapping, or nil.
func value(m *yaml.Node, key string) *yaml.Node {
	if m.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			return m.Content[i+1]
		}
	}
	return nil
}

// checkKeys refuses keys of a mapping that are not YAML field names of the
// struct type t, naming each with its line and the nearest known key
// (talosctl prints `serialnumber`, not `serialNumber`).
func checkKeys(m *yaml.Node, t reflect.Type) error {
	if m.Kind != yaml.MappingNode {
		return nil // not a mapping: Decode says what is wrong
	}
	known := yamlNames(t)
	var unknown []string
	for i := 0; i < len(m.Content); i += 2 {
		k := m.Content[i]
		if slices.Contains(known, k.Value) {
			continue
		}
		near, dist := nearest(k.Value, known)
		msg := fmt.Sprintf("line %d: unknown key %q; the nearest known key is %q", k.Line, k.Value, near)
		if dist > 2 {
			msg += "; known keys: " + strings.Join(known, ", ")
		}
		unknown = append(unknown, msg)
	}
	if len(unknown) > 0 {
		return errors.New(strings.Join(unknown, "; "))
	}
	return nil
}

// yamlNames lists the YAML keys of a struct type, in field order, as
// go.yaml.in/yaml names them: the tag's name, else the lower-cased field name.
func yamlNames(t reflect.Type) []string {
	var names []string
	for f := range t.Fields() {
		if !f.IsExported() {
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		switch name {
		case "-":
			continue
		case "":
			name = strings.ToLower(f.Name)
		}
		names = append(names, name)
	}
	return names
}

// nearest returns the candidate closest to key by case-insensitive edit
// distance, and that distance; the first wins a tie.
func nearest(key string, candidates []string) (string, int) {
	best, bestDist := "", -1
	for _, c := range candidates {
		if d := editDistance(strings.ToLower(key), strings.ToLower(c)); bestDist < 0 || d < bestDist {
			best, bestDist = c, d
		}
	}
	return best, bestDist
}

// editDistance is the Levenshtein distance between a and b, by rune.
func editDistance(a, b string) int {
	ra, rb := []rune(a), []rune(b)
	prev := make([]int, len(rb)+1)
	cur := make([]int, len(rb)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(ra); i++ {
		cur[0] = i
		for j := 1; j <= len(rb); j++ {
			cost := 1
			if ra[i-1] == rb[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(rb)]
}

// Write prints the output as json, yaml or table.
func (o Output) Write(w io.Writer, format string) error {
	switch format {
	case "json":
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(o)
	case "yaml":
		b, err := json.Marshal(o)
		if err != nil {
			return err
		}
		if b, err = sigsyaml.JSONToYAML(b); err != nil {
			return err
		}
		_, err = w.Write(b)
		return err
	case "table":
		return o.table(w)
	}
	return fmt.Errorf("output format %q: want json, yaml or table", format)
}

func (o Output) table(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "WHAT\tKEY\tVALUE\tWRITTEN BY")
	row := func(what, key, value, by string) { fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", what, key, value, by) }
	for _, k := range slices.Sorted(maps.Keys(o.Labels)) {
		row("label", k, o.Labels[k], "agent")
	}
	for _, k := range slices.Sorted(maps.Keys(o.RequestedLabels)) {
		row("label", k, o.RequestedLabels[k], "coordinator, if granted")
	}
	for _, k := range slices.Sorted(maps.Keys(o.Annotations)) {
		row("annotation", k, o.Annotations[k], "agent")
	}
	for _, t := range o.RequestedTaints {
		row("taint", t.Key, t.Value+":"+string(t.Effect), "coordinator, if granted")
	}
	providerID := o.ProviderID
	if providerID == "" {
		providerID = "(none)"
	}
	row("providerID", "", providerID, "agent")
	for _, k := range slices.Sorted(maps.Keys(o.PlatformMetadata)) {
		row("metadata", k, fmt.Sprint(o.PlatformMetadata[k]), "agent ("+contract.AnnotationMetadata+")")
	}
	for _, e := range o.Errors {
		row("error", "", strings.ReplaceAll(e, "\n", " "), "")
	}
	return tw.Flush()
}
