package main

import (
	"flag"
	"fmt"
	"io"
	"net/netip"
	"os"
	"strings"

	"github.com/talos-nodeinit/talos-nodeinit/coordinator/config"
	"github.com/talos-nodeinit/talos-nodeinit/coordinator/explain"
	"github.com/talos-nodeinit/talos-nodeinit/pkg/desired"
	"github.com/talos-nodeinit/talos-nodeinit/pkg/envflag"
	"github.com/talos-nodeinit/talos-nodeinit/pkg/facts"
	"github.com/talos-nodeinit/talos-nodeinit/pkg/rules"
	"github.com/talos-nodeinit/talos-nodeinit/pkg/rulesource"
)

// agentEnvPrefix is the agent's: explain reads its settings from the
// environment of the rules' ExtensionServiceConfig, as the agent does.
const agentEnvPrefix = "NODEINIT_"

func explainCmd(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("explain", "Usage: nodeinit-coordinator explain --platform-metadata FILE [flags]\n\n"+
		"Print exactly what the agent's `run` would write for each node in FILE (one section per node of a multi-node\n"+
		"`talosctl get platformmetadata -o yaml`), and with --config what this coordinator would add when the node\n"+
		"joins (its own decision code, on a cluster of no other node), without a cluster. Exit 1 when the output\n"+
		"shows an error.", stderr)
	rulesFile := fs.String("rules-file", "", "the agent's rules `FILE`: a rules file, its ExtensionServiceConfig, a machine config or Talos CCM's config (none when empty)")
	mdFile := fs.String("platform-metadata", "", "`FILE` with `talosctl get platformmetadata -o yaml` output (one or more nodes) or a bare spec")
	siFile := fs.String("system-information", "", "`FILE` with `talosctl get systeminformation -o yaml` output (matched to nodes by talosctl's node address) or a bare spec")
	coordFile := fs.String("config", "", "the coordinator's configuration `FILE` (coordinator.yaml, its ConfigMap or the chart's values): show what the coordinator would add (none when empty)")
	nodeName := fs.String("node-name", "", "node name (default: the metadata hostname); one node only")
	addresses := fs.String("addresses", "", "comma-separated interface addresses as `CIDRs`, the first the node IP (default: talosctl's node address); one node only")
	policy := fs.String("provider-id-policy", string(desired.ProviderIDFromMetadata), "the agent's provider-ID policy: metadata, talos-fallback or never (unless given: the rules document's NODEINIT_PROVIDER_ID_POLICY)")
	output := fs.String("o", "table", "output format: json, yaml or table")
	if code, stop := parse(fs, args); stop {
		return code
	}
	fail := func(err error) int {
		fmt.Fprintln(stderr, "explain:", err)
		return 1
	}
	if *mdFile == "" {
		fmt.Fprintln(stderr, "explain: --platform-metadata FILE is required")
		return 2
	}
	var rs *rules.Rules
	var src rulesource.Source
	var err error
	if *rulesFile == "" {
		rs, _ = rules.Compile(rules.File{})
	} else if rs, src, err = rulesource.LoadFile(*rulesFile); err != nil {
		return fail(fmt.Errorf("%s: invalid:\n%w", *rulesFile, err))
	}
	// The document's environment is what `run` reads (its last entry of a
	// name, as Talos appends patches' entries), unless the command line says.
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if !set["provider-id-policy"] {
		for _, e := range src.Environment {
			if v, ok := strings.CutPrefix(e.Entry, envflag.Name(agentEnvPrefix, "provider-id-policy")+"="); ok {
				*policy = v
				fmt.Fprintf(stderr, "explain: provider-id-policy %s, from %s:%d\n", v, *rulesFile, e.Pos.Line)
			}
		}
	}
	pol, err := desired.ParseProviderIDPolicy(*policy)
	if err != nil {
		return fail(err)
	}
	data, err := os.ReadFile(*mdFile)
	if err != nil {
		return fail(err)
	}
	nodes, err := explain.ReadNodes(data)
	if err != nil {
		return fail(fmt.Errorf("%s: %w", *mdFile, err))
	}
	if len(nodes) > 1 && (*addresses != "" || *nodeName != "") {
		fmt.Fprintf(stderr, "explain: --addresses and --node-name describe one node; %s has %d\n", *mdFile, len(nodes))
		return 2
	}
	systems := map[string]facts.System{}
	if *siFile != "" {
		if data, err = os.ReadFile(*siFile); err != nil {
			return fail(err)
		}
		if systems, err = explain.ReadSystemInformationNodes(data); err != nil {
			return fail(fmt.Errorf("%s: %w", *siFile, err))
		}
	}
	var cc *config.Config
	if *coordFile != "" {
		if cc, err = config.Load(*coordFile); err != nil {
			return fail(err)
		}
	}
	var given []netip.Prefix
	for s := range strings.SplitSeq(*addresses, ",") {
		if s = strings.TrimSpace(s); s == "" {
			continue
		}
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return fail(fmt.Errorf("--addresses: %w", err))
		}
		given = append(given, p)
	}
	var outs explain.Outputs
	for _, n := range nodes {
		in := explain.Input{Rules: rs, Metadata: n.Metadata, NodeName: *nodeName, Node: n.Node, Policy: pol, Addresses: given, Coordinator: cc}
		if si, ok := systems[n.Node]; ok {
			in.System = &si
		} else if si, ok := systems[""]; ok {
			in.System = &si
		}
		if len(given) == 0 {
			// talosctl's node address is how the admin reaches the node: its IP.
			if ip, err := netip.ParseAddr(n.Node); err == nil {
				in.Addresses = []netip.Prefix{netip.PrefixFrom(ip, ip.BitLen())}
			}
		}
		outs = append(outs, explain.Explain(in))
	}
	if err := outs.Write(stdout, *output); err != nil {
		return fail(err)
	}
	if outs.HasErrors() {
		fmt.Fprintln(stderr, "explain: the output shows errors: run would leave those outputs out")
		return 1
	}
	return 0
}
