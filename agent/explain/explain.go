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
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/siderolabs/talos/pkg/machinery/resources/hardware"
	"github.com/siderolabs/talos/pkg/machinery/resources/runtime"
	"go.yaml.in/yaml/v3"
	sigsyaml "sigs.k8s.io/yaml"

	"github.com/talos-nodeinit/talos-nodeinit/pkg/contract"
	"github.com/talos-nodeinit/talos-nodeinit/pkg/desired"
	"github.com/talos-nodeinit/talos-nodeinit/pkg/netaddr"
	"github.com/talos-nodeinit/talos-nodeinit/pkg/rules"
	"github.com/talos-nodeinit/talos-nodeinit/pkg/talos"
)

// Input is one node's facts.
type Input struct {
	Rules    *rules.Rules
	Metadata runtime.PlatformMetadataSpec
	System   *hardware.SystemInformationSpec
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
		Talos:      talos.Facts{Metadata: &md, System: in.System, Nodename: name, NodeIPs: nodeIPs},
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
	out.PlatformMetadata, err = camelCase(want.Rules.Metadata)
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
// output (a resource with node, metadata and spec) or a bare spec.
func ReadPlatformMetadata(data []byte) (runtime.PlatformMetadataSpec, error) {
	var spec runtime.PlatformMetadataSpec
	if err := readSpec(data, &spec); err != nil {
		return spec, fmt.Errorf("platform metadata: %w", err)
	}
	if spec.Platform == "" {
		return spec, errors.New("platform metadata: no platform (is this `talosctl get platformmetadata -o yaml` output?)")
	}
	return spec, nil
}

// ReadSystemInformation accepts `talosctl get systeminformation -o yaml`
// output or a bare spec.
func ReadSystemInformation(data []byte) (hardware.SystemInformationSpec, error) {
	var spec hardware.SystemInformationSpec
	if err := readSpec(data, &spec); err != nil {
		return spec, fmt.Errorf("system information: %w", err)
	}
	return spec, nil
}

// readSpec takes the first YAML document; a resource's spec is under
// `spec:` next to `metadata:`.
func readSpec(data []byte, into any) error {
	var doc map[string]yaml.Node
	if err := yaml.NewDecoder(bytes.NewReader(data)).Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return errors.New("empty file")
		}
		return err
	}
	if spec, ok := doc["spec"]; ok {
		if _, isResource := doc["metadata"]; isResource {
			return spec.Decode(into)
		}
	}
	return yaml.Unmarshal(data, into)
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
