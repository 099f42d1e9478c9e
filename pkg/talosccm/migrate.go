// Package talosccm converts a Talos CCM configuration (its ccm-config.yaml,
// or the ConfigMap holding it) into what talos-nodeinit needs: the agent's
// rules, as the ExtensionServiceConfig document `talosctl patch mc` applies,
// and a fragment of the coordinator's configuration. Every option Talos CCM
// has is either carried over with the same meaning or dropped with a note
// saying why and what does its job now. It is pure: bytes in, bytes out.
package talosccm

import (
	"bytes"
	"cmp"
	"fmt"
	"math"
	"slices"
	"strings"

	"go.yaml.in/yaml/v4"

	"github.com/talos-nodeinit/talos-nodeinit/pkg/contract"
	"github.com/talos-nodeinit/talos-nodeinit/pkg/grants"
	"github.com/talos-nodeinit/talos-nodeinit/pkg/rules"
	"github.com/talos-nodeinit/talos-nodeinit/pkg/rulesource"
	"github.com/talos-nodeinit/talos-nodeinit/pkg/yamlstrict"
)

// Note is one difference between the Talos CCM configuration and the result.
type Note struct {
	// Pos is where in the Talos CCM file it applies (zero: the file as a whole).
	Pos  rules.Pos
	Text string
}

func (n Note) String() string {
	if n.Pos.Line == 0 {
		return n.Text
	}
	return fmt.Sprintf("line %d: %s", n.Pos.Line, n.Text)
}

// Result is the migrated configuration.
type Result struct {
	// AgentPatch is an ExtensionServiceConfig document carrying the rules,
	// with the notes as comments: `talosctl patch mc --patch @FILE`.
	AgentPatch []byte
	// Coordinator is YAML to merge into the coordinator's coordinator.yaml.
	Coordinator []byte
	// Rules is the rules document alone (what AgentPatch mounts).
	Rules []byte
	Notes []Note
}

// Convert migrates a Talos CCM configuration. name labels the output's
// comments. Problems that need a person (an invalid key, a template that
// does not parse) are returned as rules.Problems at their place in data.
func Convert(name string, data []byte) (Result, error) {
	src, err := rulesource.Find(data)
	if err != nil {
		return Result{}, err
	}
	switch src.Kind {
	case rulesource.KindRules, rulesource.KindTalosCCMConfigMap, rulesource.KindTalosCCMHelmValues:
	default:
		return Result{}, rules.Problems{{Msg: "this is already nodeinit-agent configuration (" + src.Describe() + "), not Talos CCM's",
			Fix: "check it with `nodeinit-agent validate --rules-file`"}}
	}
	root := &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"}
	var docs []*yaml.Node
	if src.Root == nil {
		if docs, err = rules.ParseDocuments(src.Content); err != nil {
			return Result{}, shift(err, src)
		}
	}
	if src.Root != nil {
		root = src.Root
	} else if len(docs) == 1 && len(docs[0].Content) == 1 && docs[0].Content[0].Kind == yaml.MappingNode {
		root = docs[0].Content[0]
	} else if len(docs) == 1 && len(docs[0].Content) == 1 && docs[0].Content[0].Tag != "!!null" {
		return Result{}, shift(rules.Problems{{Pos: rules.Pos{Line: docs[0].Content[0].Line, Col: docs[0].Content[0].Column},
			Msg: "a Talos CCM configuration is a mapping (global:, transformations:)"}}, src)
	}

	m := migration{src: src}
	clusterName := m.global(root)
	m.transformations(root)
	var ipamPart *ipamFragment
	if src.Values != nil {
		ipamPart = m.helmValues(src.Values)
	}

	f, ps := rules.Decode(root, nil)
	rs, err := rules.Compile(f)
	if len(ps) > 0 || err != nil {
		all := slices.Clone(ps)
		if cps, ok := err.(rules.Problems); ok {
			all = append(all, cps...)
		}
		return Result{}, shift(all, src)
	}

	var body bytes.Buffer
	enc := yaml.NewEncoder(&body)
	enc.SetIndent(2)
	if err := enc.Encode(root); err != nil {
		return Result{}, err
	}
	if err := enc.Close(); err != nil {
		return Result{}, err
	}
	grants, grantNotes := grantsFor(rs)
	m.notes = append(m.notes, grantNotes...)
	// In file order; notes about the file as a whole last.
	slices.SortStableFunc(m.notes, func(a, b Note) int {
		la, lb := a.Pos.Line, b.Pos.Line
		if la == 0 {
			la = math.MaxInt
		}
		if lb == 0 {
			lb = math.MaxInt
		}
		return cmp.Compare(la, lb)
	})
	return Result{
		Rules:       body.Bytes(),
		AgentPatch:  agentPatch(name, body.Bytes(), m.notes),
		Coordinator: coordinatorFragment(name, clusterName, grants, ipamPart),
		Notes:       m.notes,
	}, nil
}

type migration struct {
	src   rulesource.Source
	notes []Note
}

func (m *migration) note(n *yaml.Node, format string, args ...any) {
	var p rules.Pos
	if n != nil {
		p = m.src.Where(rules.Pos{Line: n.Line, Col: n.Column})
	}
	m.notes = append(m.notes, Note{Pos: p, Text: fmt.Sprintf(format, args...)})
}

// global rewrites the global section and returns Talos CCM's cluster name.
func (m *migration) global(root *yaml.Node) string {
	k, g := yamlstrict.Entry(root, "global")
	if g == nil || g.Kind != yaml.MappingNode {
		g = &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"}
		if k == nil {
			k = &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: "global"}
			root.Content = append([]*yaml.Node{k, g}, root.Content...)
		} else {
			setValue(root, "global", g)
		}
	}
	var clusterName string
	if ck, cv := yamlstrict.Entry(g, "clusterName"); ck != nil {
		clusterName = cv.Value
		m.note(ck, "global.clusterName %q moved to the coordinator's configuration (clusterName), which sets %s", clusterName, contract.LabelClusterName)
		remove(g, "clusterName")
	} else {
		m.note(nil, "Talos CCM took the cluster name from Talos when global.clusterName was unset; set clusterName in the coordinator's configuration to keep %s", contract.LabelClusterName)
	}
	m.drop(g, "PreferIPv6", "global.PreferIPv6 dropped: Talos CCM's keys are case-sensitive, so it ignored this spelling (from its docs) and never preferred IPv6; write preferIPv6: true if you want that")
	m.drop(g, "endpoints", "global.endpoints dropped: the agent reads its own node's machined socket, no Talos API endpoints")
	if pk, pv := yamlstrict.Entry(g, "preferIPv6"); pk != nil {
		m.note(pk, "global.preferIPv6: %s kept: the agent orders InternalIP and ExternalIP addresses by family as Talos CCM did (it lists every address, where Talos CCM kept one per family)", pv.Value)
	}
	if bk, _ := yamlstrict.Entry(g, "betaTopologyLabels"); bk == nil {
		g.Content = append(g.Content,
			&yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: "betaTopologyLabels", HeadComment: "# Talos CCM set the beta topology labels too; keep selectors on them matching."},
			&yaml.Node{Kind: yaml.ScalarNode, Tag: "!!bool", Value: "true"})
		m.note(nil, "global.betaTopologyLabels: true added: the agent sets beta.kubernetes.io/instance-type and failure-domain.beta.kubernetes.io/{region,zone} as Talos CCM did")
	}
	return clusterName
}

// transformations drops per-rule options that did nothing in Talos CCM or
// whose job the agent does anyway.
func (m *migration) transformations(root *yaml.Node) {
	_, ts := yamlstrict.Entry(root, "transformations")
	if ts == nil || ts.Kind != yaml.SequenceNode {
		return
	}
	for _, t := range ts.Content {
		if t.Kind != yaml.MappingNode {
			continue
		}
		if fk, fv := yamlstrict.Entry(t, "features"); fk != nil && fv.Kind == yaml.MappingNode {
			m.drop(fv, "publicIPDiscovery", "features.publicIPDiscovery dropped: the agent reports the public addresses on the node's interfaces and Talos's external addresses as ExternalIP on every platform")
			m.drop(fv, "publicIPPredict", "features.publicIPPredict dropped: Talos CCM has no such feature (its code ignores the key)")
			if len(fv.Content) == 0 {
				remove(t, "features")
			}
		}
		if _, pm := yamlstrict.Entry(t, "platformMetadata"); pm != nil && pm.Kind == yaml.MappingNode {
			for i := 0; i+1 < len(pm.Content); {
				k := pm.Content[i]
				if lk := strings.ToLower(k.Value); lk == "hostname" || lk == "platform" {
					m.note(k, "platformMetadata.%s dropped: Talos CCM skipped overrides of %s silently", k.Value, lk)
					pm.Content = slices.Delete(pm.Content, i, i+2)
					continue
				}
				i += 2
			}
		}
		if _, pm := yamlstrict.Entry(t, "platformMetadata"); pm != nil && len(pm.Content) > 0 {
			k, _ := yamlstrict.Entry(t, "platformMetadata")
			m.note(k, "platformMetadata overrides are now also seen by later rules' selectors and templates, and reported in the agent's metadata (Talos CCM applied them to its own labels and providerID only)")
		}
	}
}

// grantsFor opens the coordinator's grant policy to the labels and taints
// the rules request and a node may not set itself: Talos CCM set them all.
func grantsFor(rs *rules.Rules) (grants.Policy, []Note) {
	g := grants.Policy{
		Labels: grants.Patterns{Allow: slices.Clone(grants.DefaultLabelAllow), Deny: slices.Clone(grants.DefaultLabelDeny)},
		Taints: grants.Patterns{Allow: slices.Clone(grants.DefaultTaintAllow), Deny: slices.Clone(grants.DefaultTaintDeny)},
	}
	var notes []Note
	for _, k := range rs.LabelKeys() {
		if contract.NodeMaySetLabel(k) {
			continue
		}
		if ok, _ := g.MayGrantLabel(k, "x"); ok {
			continue
		}
		if _, why := (grants.Policy{Labels: grants.Patterns{Allow: []string{k}}}).MayGrantLabel(k, "x"); why != "" {
			notes = append(notes, Note{Text: fmt.Sprintf("label %s: %s; Talos CCM set it, talos-nodeinit will not: use another key", k, why)})
			continue
		}
		g.Labels.Allow = append(g.Labels.Allow, k)
		notes = append(notes, Note{Text: fmt.Sprintf("label %s: a node may not set it; the coordinator's grants.labels.allow lists it", k)})
	}
	for _, k := range rs.TaintKeys() {
		t := contract.Taint{Key: k, Effect: "NoSchedule"}
		if ok, _ := g.MayGrantTaint(t); ok {
			continue
		}
		_, why := g.MayGrantTaint(t)
		notes = append(notes, Note{Text: fmt.Sprintf("taint %s: %s; rename it into a domain of your own (example.com/…), or narrow grants.taints.deny", k, why)})
	}
	return g, notes
}

func agentPatch(name string, body []byte, notes []Note) []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, "# nodeinit-agent rules, migrated from the Talos CCM configuration %s\n", name)
	b.WriteString("# by `nodeinit-agent migrate`. Give it to `make install-patch RULES=<this file> MIGRATING=talos-ccm`,\n")
	b.WriteString("# which renders and validates the whole install before Talos CCM is touched (docs/migrating.md).\n")
	if len(notes) > 0 {
		b.WriteString("#\n# Differences from Talos CCM:\n")
		for _, n := range notes {
			b.WriteString("#   - " + strings.ReplaceAll(n.String(), "\n", " ") + "\n")
		}
	}
	b.WriteString("apiVersion: v1alpha1\nkind: ExtensionServiceConfig\nname: " + rulesource.ServiceName + "\nconfigFiles:\n")
	b.WriteString("  - mountPath: " + rulesource.MountPath + "\n    content: |\n")
	for _, line := range strings.Split(strings.TrimRight(string(body), "\n"), "\n") {
		if line == "" {
			b.WriteString("\n")
			continue
		}
		b.WriteString("      " + line + "\n")
	}
	b.WriteString("environment:\n")
	b.WriteString("  # Talos CCM set spec.providerID to talos://<platform>/<node IP> where the\n")
	b.WriteString("  # platform has none; talos-fallback keeps that for new nodes (it never changes).\n")
	b.WriteString("  - NODEINIT_PROVIDER_ID_POLICY=talos-fallback\n")
	return b.Bytes()
}

func coordinatorFragment(name, clusterName string, g grants.Policy, ip *ipamFragment) []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, "# nodeinit-coordinator configuration migrated from the Talos CCM configuration %s:\n", name)
	b.WriteString("# merge it into coordinator.yaml in the nodeinit-coordinator ConfigMap.\n")
	if clusterName != "" {
		fmt.Fprintf(&b, "clusterName: %q\n", clusterName)
	} else {
		b.WriteString("# Talos CCM used Talos's cluster name (cluster.clusterName in the machine config):\n# clusterName: <your cluster name>\n")
	}
	b.WriteString("# Take over the Nodes Talos CCM initialized: record their addresses, enrol their agents' keys.\n")
	b.WriteString("adoptExisting: true\n")
	b.WriteString("# Labels and taints the rules request that a node may not set itself; Talos CCM set them all.\n")
	b.WriteString("grants:\n")
	writeList := func(indent, key string, vals []string) {
		quoted := make([]string, len(vals))
		for i, v := range vals {
			quoted[i] = fmt.Sprintf("%q", v)
		}
		fmt.Fprintf(&b, "%s%s: [%s]\n", indent, key, strings.Join(quoted, ", "))
	}
	b.WriteString("  labels:\n")
	writeList("    ", "allow", g.Labels.Allow)
	writeList("    ", "deny", g.Labels.Deny)
	b.WriteString("  taints:\n")
	writeList("    ", "allow", g.Taints.Allow)
	writeList("    ", "deny", g.Taints.Deny)
	if ip != nil {
		b.WriteString("# Pod CIDRs, from Talos CCM's enabledControllers and extraArgs:\n")
		b.WriteString(ip.yaml())
		return b.Bytes()
	}
	b.WriteString("# Talos CCM's node-ipam-controller took its settings from flags; if you ran it\n")
	b.WriteString("# (--allocate-node-cidrs --cidr-allocator-type=CloudAllocator), the equivalent is:\n")
	b.WriteString("# ipam:\n#   families: [ipv4, ipv6]\n#   ipv4MaskSize: 24      # --node-cidr-mask-size-ipv4\n#   ipv6MaskSize: 80      # --node-cidr-mask-size-ipv6\n")
	return b.Bytes()
}

// shift moves problems found in the embedded document to their place in the file.
func shift(err error, src rulesource.Source) error {
	ps, ok := err.(rules.Problems)
	if !ok {
		return err
	}
	out := slices.Clone(ps)
	for i := range out {
		out[i].Pos = src.Where(out[i].Pos)
	}
	return out
}

func setValue(m *yaml.Node, key string, v *yaml.Node) {
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			m.Content[i+1] = v
		}
	}
}

// drop removes key from the mapping n, when it is there, with a note at
// the key saying why.
func (m *migration) drop(n *yaml.Node, key, why string) {
	if k, _ := yamlstrict.Entry(n, key); k != nil {
		m.note(k, "%s", why)
		remove(n, key)
	}
}

func remove(m *yaml.Node, key string) {
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			m.Content = slices.Delete(m.Content, i, i+2)
			return
		}
	}
}
