// Package explain answers, offline, "what would the agent write for this
// node, and what would the coordinator add?": it runs the agent's own pure
// computation (pkg/desired, as its run loop does) on facts read from files
// (the YAML `talosctl get platformmetadata -o yaml` prints, or a bare
// spec), then the coordinator's own decision (nodestate.Decide, with its
// allocator's answer) on the Node the agent would write, and prints the
// result as JSON, YAML or a table. It lives in the coordinator, beside the
// code it runs, so that its prediction cannot drift from the coordinator;
// the agent links none of it.
package explain

import (
	"cmp"
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
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/siderolabs/talos/pkg/machinery/resources/hardware"
	"github.com/siderolabs/talos/pkg/machinery/resources/runtime"
	"go.yaml.in/yaml/v4"
	// The output is defined by its JSON tags (corev1.NodeAddress and the
	// rest follow the Kubernetes API's JSON names): sigs.k8s.io/yaml turns
	// that JSON into YAML with the same names, as kubectl -o yaml does.
	sigsyaml "sigs.k8s.io/yaml"

	"github.com/talos-nodeinit/talos-nodeinit/coordinator/config"
	"github.com/talos-nodeinit/talos-nodeinit/coordinator/finalize"
	"github.com/talos-nodeinit/talos-nodeinit/coordinator/nodestate"
	"github.com/talos-nodeinit/talos-nodeinit/pkg/contract"
	"github.com/talos-nodeinit/talos-nodeinit/pkg/desired"
	"github.com/talos-nodeinit/talos-nodeinit/pkg/facts"
	"github.com/talos-nodeinit/talos-nodeinit/pkg/netaddr"
	"github.com/talos-nodeinit/talos-nodeinit/pkg/rules"
	"github.com/talos-nodeinit/talos-nodeinit/pkg/suggest"
	"github.com/talos-nodeinit/talos-nodeinit/pkg/yamlstrict"
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
	// Node names the node in the output (talosctl's node address); optional.
	Node string
	// Coordinator, when set, adds what the coordinator with this
	// configuration would add to the Node.
	Coordinator *config.Config
}

// Output is exactly what the run loop would write, in the shape the
// `explain -o json` contract promises.
type Output struct {
	Node             string            `json:"node,omitempty"`
	NodeName         string            `json:"nodeName"`
	Labels           map[string]string `json:"labels"`
	RequestedLabels  map[string]string `json:"requestedLabels"`
	Annotations      map[string]string `json:"annotations"`
	RequestedTaints  []contract.Taint  `json:"requestedTaints"`
	ProviderID       string            `json:"providerID"`
	PlatformMetadata map[string]any    `json:"platformMetadata"`
	// Addresses are the Node's status.addresses as the agent writes them.
	Addresses []corev1.NodeAddress `json:"addresses"`
	// Prefixes are the global IPv6 prefixes reported for pod CIDRs.
	Prefixes    []string     `json:"prefixes"`
	Coordinator *Coordinator `json:"coordinator,omitempty"`
	Errors      []string     `json:"errors"`
}

// Coordinator is what the coordinator would add to the Node when it joins
// (nodestate.Decide on it).
type Coordinator struct {
	// Labels it sets: its own (platform, lifecycle, cluster name) and the
	// requested ones its grant policy allows.
	Labels map[string]string `json:"labels"`
	Taints []contract.Taint  `json:"taints"`
	// Refused are the requests it would refuse, and the addresses it would
	// not record as the Node's, with the reason.
	Refused []string `json:"refused"`
	// PodCIDRs says, per family, where the Node's pod CIDR would come from.
	PodCIDRs []string `json:"podCIDRs"`
	// Waiting lists what initialization would wait for: while it is not
	// empty the coordinator writes nothing, and RemovesTaint is "".
	Waiting      []string `json:"waiting"`
	RemovesTaint string   `json:"removesTaint"`
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
		Node:            in.Node,
		NodeName:        name,
		Addresses:       want.Addresses,
		Prefixes:        []string{},
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
	if out.Addresses == nil {
		out.Addresses = []corev1.NodeAddress{}
	}
	for _, p := range netaddr.NewClassifier().GlobalPrefixes(addrs) {
		out.Prefixes = append(out.Prefixes, p.String())
	}
	if err != nil {
		out.Errors = append(out.Errors, err.Error())
	}
	if in.Coordinator != nil && err == nil {
		out.Coordinator = coordinatorView(in.Coordinator, name, want)
	}
	out.PlatformMetadata, err = camelCase(runtime.PlatformMetadataSpec(want.Rules.Metadata))
	if err != nil {
		out.Errors = append(out.Errors, err.Error())
	}
	return out
}

// coordinatorView is what the coordinator configured by cc decides for
// the Node the agent would write, at its join: nodestate.Decide, the
// coordinator's own decision, on that Node (uninitialized, without a
// record, in a cluster of no other Node), with the answer of its allocator
// built from cc's pools, as the controller's sync does.
func coordinatorView(cc *config.Config, name string, want desired.State) *Coordinator {
	v := &Coordinator{Labels: map[string]string{}, Taints: []contract.Taint{}, Refused: []string{}, PodCIDRs: []string{}, Waiting: []string{}}
	fail := func(err error) *Coordinator {
		v.Refused = append(v.Refused, err.Error())
		return v
	}
	settings := nodestate.NewSettings(cc)
	node := &corev1.Node{}
	node.Name, node.UID = name, "explain"
	node.Labels, node.Annotations = want.Labels, want.Annotations
	node.Status.Addresses = want.Addresses
	// As a kubelet with --cloud-provider=external registers it.
	node.Spec.Taints = []corev1.Taint{{Key: contract.TaintUninitialized, Value: "true", Effect: corev1.TaintEffectNoSchedule}}
	in := nodestate.Input{Node: node, Reserved: cc.Reserved(), Now: time.Now()}
	alloc, err := cc.Allocator()
	if err != nil {
		return fail(err)
	}
	in.HasV4, in.HasV6 = alloc.Pools()
	d, err := nodestate.Decide(settings, in)
	var allocErr error
	if err == nil && d.Allocate {
		if in.Allocated, allocErr = alloc.Allocate(name, d.Request); allocErr == nil {
			d, err = nodestate.Decide(settings, in)
		} else {
			// The sync fails and is retried: the Node waits.
			d.Waiting = append(d.Waiting, "pod CIDRs: "+allocErr.Error())
		}
	}
	if err != nil {
		return fail(err)
	}
	v.Refused = append(v.Refused, d.Malformed...)
	v.Refused = append(v.Refused, d.Refused...)
	v.Refused = append(v.Refused, d.Plan.Refused...)
	v.Waiting = append(v.Waiting, d.Waiting...)
	if d.Initialize {
		v.RemovesTaint = contract.TaintUninitialized
	}
	maps.Copy(v.Labels, d.Plan.Want)
	for _, t := range want.Rules.Taints {
		if slices.Contains(d.Plan.GrantedTaints, finalize.TaintKey(t.Key, t.Effect)) {
			v.Taints = append(v.Taints, t)
		}
	}
	v.PodCIDRs = podCIDRs(cc, d, in.Allocated, allocErr)
	return v
}

// podCIDRs says, per family the coordinator allocates, where the Node's
// pod CIDR comes from (the pool, or its own prefix), or why it gets none.
func podCIDRs(cc *config.Config, d nodestate.Desired, got []netip.Prefix, allocErr error) []string {
	if !cc.IPAMEnabled() {
		return []string{"none: ipam.enabled is false"}
	}
	var out []string
	v4, v6 := cc.Families()
	for _, f := range []struct {
		on   bool
		name string
		is4  bool
	}{{v4, "ipv4", true}, {v6, "ipv6", false}} {
		if !f.on {
			continue
		}
		i := slices.IndexFunc(got, func(p netip.Prefix) bool { return p.Addr().Is4() == f.is4 })
		switch {
		case i >= 0 && f.is4:
			out = append(out, fmt.Sprintf("ipv4: a /%d from the pool %s", got[i].Bits(), cc.IPAM.IPv4Pool))
		case i >= 0 && d.Request.IPv6Prefix.IsValid():
			out = append(out, fmt.Sprintf("ipv6: a /%d from the node's prefix %s", got[i].Bits(), d.Request.IPv6Prefix))
		case i >= 0:
			out = append(out, fmt.Sprintf("ipv6: a /%d from the pool %s", got[i].Bits(), cc.IPAM.IPv6Pool))
		case allocErr != nil:
			out = append(out, f.name+": none: "+allocErr.Error())
		case len(d.Waiting) > 0:
			out = append(out, f.name+": none yet: initialization waits")
		case f.is4:
			out = append(out, "ipv4: none")
		case d.PrefixRefused != "":
			out = append(out, "ipv6: none: "+d.PrefixRefused)
		case d.PrefixHolder != "":
			out = append(out, fmt.Sprintf("ipv6: none: node prefix %s is Node %s's", d.PrefixSet, d.PrefixHolder))
		default:
			out = append(out, "ipv6: none: no global IPv6 prefix inside nodeNetworks holding one of the node's addresses, and no ipv6Pool")
		}
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

// Node is one node's platform metadata as read from a file.
type Node struct {
	// Node is talosctl's node address ("node:" in its output), if any.
	Node     string
	Metadata facts.Platform
}

// ReadNodes reads every document: `talosctl -n a,b get platformmetadata -o
// yaml` prints one per node. Each must have a platform. They are decoded as
// Talos's own type, whose YAML keys are the ones talosctl prints.
func ReadNodes(data []byte) ([]Node, error) {
	docs, err := readDocs[runtime.PlatformMetadataSpec](data, "platform metadata")
	if err != nil {
		return nil, err
	}
	var nodes []Node
	for _, d := range docs {
		if d.spec.Platform == "" {
			return nil, fmt.Errorf("platform metadata, %s: no platform (is this `talosctl get platformmetadata -o yaml` output?)", d.where)
		}
		nodes = append(nodes, Node{Node: d.node, Metadata: facts.Platform(d.spec)})
	}
	if len(nodes) == 0 {
		return nil, errors.New("platform metadata: empty file")
	}
	return nodes, nil
}

// ReadSystemInformationNodes reads every document of `talosctl get
// systeminformation -o yaml`, by talosctl's node address ("" for a bare spec).
func ReadSystemInformationNodes(data []byte) (map[string]facts.System, error) {
	docs, err := readDocs[hardware.SystemInformationSpec](data, "system information")
	if err != nil {
		return nil, err
	}
	out := map[string]facts.System{}
	for _, d := range docs {
		out[d.node] = facts.System(d.spec)
	}
	return out, nil
}

// doc is one document of talosctl's output: the node it names, where it
// is in the file (for errors), its spec.
type doc[T any] struct {
	node, where string
	spec        T
}

// readDocs decodes every non-empty YAML document of data as a T, strictly:
// a key the spec does not have would otherwise be dropped, and a selector
// on it match nothing.
func readDocs[T any](data []byte, what string) ([]doc[T], error) {
	var out []doc[T]
	i := 0
	for d, err := range yamlstrict.Documents(data) {
		if err != nil {
			return nil, fmt.Errorf("%s: %w", what, err)
		}
		i++
		if len(d.Content) == 0 {
			continue
		}
		root := d.Content[0]
		one := doc[T]{where: fmt.Sprintf("document %d", i)}
		if v := yamlstrict.Value(root, "node"); v != nil {
			one.node = v.Value
			one.where += " (node " + one.node + ")"
		}
		if err := decodeSpec(root, &one.spec); err != nil {
			return nil, fmt.Errorf("%s, %s: %w", what, one.where, err)
		}
		out = append(out, one)
	}
	return out, nil
}

// decodeSpec decodes a resource's spec (or a bare spec) strictly.
func decodeSpec(spec *yaml.Node, into any) error {
	if yamlstrict.Value(spec, "metadata") != nil {
		if s := yamlstrict.Value(spec, "spec"); s != nil {
			spec = s
		}
	}
	if err := unknownKeys(spec, reflect.TypeOf(into).Elem()); err != nil {
		return err
	}
	return yamlstrict.Decode(spec, into)
}

// unknownKeys refuses keys of a mapping that are not YAML field names of
// the struct type t, naming each with its line and the nearest known key
// (talosctl prints `serialnumber`, not `serialNumber`).
func unknownKeys(m *yaml.Node, t reflect.Type) error {
	var unknown []string
	for _, u := range yamlstrict.UnknownKeys(m, t) {
		near, dist := suggest.Nearest(u.Key.Value, u.Known)
		msg := fmt.Sprintf("line %d: unknown key %q; the nearest known key is %q", u.Key.Line, u.Key.Value, near)
		if dist > 2 {
			msg += "; known keys: " + strings.Join(u.Known, ", ")
		}
		unknown = append(unknown, msg)
	}
	if len(unknown) > 0 {
		return errors.New(strings.Join(unknown, "; "))
	}
	return nil
}

// Outputs are several nodes' outputs.
type Outputs []Output

// HasErrors reports whether any node's output shows an error.
func (os Outputs) HasErrors() bool {
	return slices.ContainsFunc(os, func(o Output) bool { return len(o.Errors) > 0 })
}

// Write prints one node as Output.Write does; several as a JSON or YAML
// list, or a table section per node.
func (os Outputs) Write(w io.Writer, format string) error {
	if len(os) == 1 {
		return os[0].Write(w, format)
	}
	return write(w, format, os, func() error {
		for i, o := range os {
			if i > 0 {
				fmt.Fprintln(w)
			}
			fmt.Fprintf(w, "== node %s (%s)\n", cmp.Or(o.Node, o.NodeName), o.NodeName)
			if err := o.table(w); err != nil {
				return err
			}
		}
		return nil
	})
}

// Write prints the output as json, yaml or table.
func (o Output) Write(w io.Writer, format string) error {
	return write(w, format, o, func() error { return o.table(w) })
}

// write prints v as indented JSON or as YAML, or has table print it.
func write(w io.Writer, format string, v any, table func() error) error {
	switch format {
	case "json":
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(v)
	case "yaml":
		b, err := sigsyaml.Marshal(v)
		if err == nil {
			_, err = w.Write(b)
		}
		return err
	case "table":
		return table()
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
	row("providerID", "", providerID, "coordinator, as the agent asks (the agent itself on a Node not waiting for initialization)")
	for _, k := range slices.Sorted(maps.Keys(o.PlatformMetadata)) {
		row("metadata", k, fmt.Sprint(o.PlatformMetadata[k]), "agent ("+contract.AnnotationMetadata+")")
	}
	for _, a := range o.Addresses {
		row("address", string(a.Type), a.Address, "agent (status)")
	}
	for _, p := range o.Prefixes {
		row("prefix", "", p, "agent ("+contract.AnnotationPrefixes+")")
	}
	if c := o.Coordinator; c != nil {
		for _, k := range slices.Sorted(maps.Keys(c.Labels)) {
			row("label", k, c.Labels[k], "coordinator")
		}
		for _, t := range c.Taints {
			row("taint", t.Key, t.Value+":"+string(t.Effect), "coordinator")
		}
		for _, p := range c.PodCIDRs {
			row("podCIDR", "", p, "coordinator")
		}
		for _, w := range c.Waiting {
			row("waiting for", "", w, "coordinator: it initializes the Node once nothing is left")
		}
		if c.RemovesTaint != "" {
			row("taint removed", c.RemovesTaint, "", "coordinator, once initialized")
		}
		for _, r := range c.Refused {
			row("refused", "", r, "coordinator")
		}
	}
	for _, e := range o.Errors {
		row("error", "", strings.ReplaceAll(e, "\n", " "), "")
	}
	return tw.Flush()
}
