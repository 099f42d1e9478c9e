package rules

import (
	"fmt"
	"slices"
	"strings"

	"go.yaml.in/yaml/v4"

	"github.com/talos-nodeinit/talos-nodeinit/pkg/suggest"
)

// The keys of each level of the file, in the order they are documented.
var (
	topKeys        = []string{"global", "transformations"}
	globalKeys     = []string{"betaTopologyLabels", "preferIPv6", "clusterName"}
	ruleKeys       = []string{"name", "nodeSelector", "labels", "annotations", "taints", "platformMetadata", "features"}
	termKeys       = []string{"name", "matchExpressions"}
	expressionKeys = []string{"key", "operator", "values"}
	featureKeys    = []string{"publicIPDiscovery", "publicIPPredict"}
)

const documentNote = "this is a Kubernetes or Talos document, not a bare rules file: the agent's --rules-file is the file Talos mounts from the ExtensionServiceConfig's configFiles; `nodeinit-agent validate --rules-file` reads the document itself"

const machineConfigNote = "this is a Talos machine config, not a bare rules file: `nodeinit-agent validate --rules-file` finds the nodeinit-agent ExtensionServiceConfig in it"

// keyNotes explain keys that are not ours, where "unknown key" would not
// help, by the path of the mapping they appear in.
var keyNotes = map[string]map[string]string{
	"": {
		"apiVersion": documentNote,
		"kind":       documentNote,
		"version":    machineConfigNote,
		"machine":    machineConfigNote,
	},
	"global": {
		"PreferIPv6": "keys are case-sensitive: write preferIPv6 (Talos CCM ignored PreferIPv6 as written in its docs, so it never took effect there either)",
		"endpoints":  "Talos CCM's global.endpoints (Talos API endpoints) has no use here: the agent reads its own node's machined socket; remove it",
	},
}

// decoder builds a File from YAML nodes, recording every position and
// collecting every problem rather than stopping at the first.
type decoder struct {
	f        File
	problems Problems
	// shift moves positions of a document embedded in another file (the
	// content of an ExtensionServiceConfig) to where they are in that file.
	shift func(Pos) Pos
}

func (d *decoder) pos(n *yaml.Node) Pos {
	p := posOf(n)
	if d.shift != nil && p.Line > 0 {
		p = d.shift(p)
	}
	return p
}

func (d *decoder) mark(path string, n *yaml.Node) {
	if d.f.at == nil {
		d.f.at = map[string]Pos{}
	}
	d.f.at[path] = d.pos(n)
}

func (d *decoder) fail(n *yaml.Node, path, msg, fix string) {
	d.problems = append(d.problems, Problem{Pos: d.pos(n), Rule: path, Msg: msg, Fix: fix})
}

func resolve(n *yaml.Node) *yaml.Node {
	for n != nil && n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	if n != nil && n.Kind == yaml.DocumentNode && len(n.Content) == 1 {
		return resolve(n.Content[0])
	}
	return n
}

func isNull(n *yaml.Node) bool {
	return n == nil || (n.Kind == yaml.ScalarNode && n.Tag == "!!null")
}

func kindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		return fmt.Sprintf("the value %q", n.Value)
	}
	return "something else"
}

// mapping calls each for every entry of a mapping, refusing keys not in
// known (with the nearest known key) and keys given twice.
func (d *decoder) mapping(n *yaml.Node, path string, known []string, each func(key string, k, v *yaml.Node)) {
	n = resolve(n)
	if isNull(n) {
		return
	}
	if n.Kind != yaml.MappingNode {
		d.fail(n, path, "must be a mapping (key: value), not "+kindName(n), "")
		return
	}
	seen := map[string]bool{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := resolve(n.Content[i]), resolve(n.Content[i+1])
		at := join(path, k.Value)
		if seen[k.Value] {
			d.fail(k, at, fmt.Sprintf("key %q is given twice", k.Value), "keep one")
			continue
		}
		seen[k.Value] = true
		if known != nil && !slices.Contains(known, k.Value) {
			d.unknownKey(k, path, known)
			continue
		}
		each(k.Value, k, v)
	}
}

func (d *decoder) unknownKey(k *yaml.Node, path string, known []string) {
	msg := fmt.Sprintf("unknown key %q", k.Value)
	if note, ok := keyNotes[path][k.Value]; ok {
		d.fail(k, path, msg, note)
		return
	}
	if near, ok := suggest.Typo(k.Value, known); ok {
		d.fail(k, path, msg, fmt.Sprintf("did you mean %q?", near))
		return
	}
	d.fail(k, path, msg, "known keys here: "+strings.Join(known, ", "))
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

func (d *decoder) sequence(n *yaml.Node, path, example string, each func(i int, item *yaml.Node)) {
	n = resolve(n)
	if isNull(n) {
		return
	}
	if n.Kind != yaml.SequenceNode {
		d.fail(n, path, "must be a list, not "+kindName(n), example)
		return
	}
	for i, item := range n.Content {
		each(i, resolve(item))
	}
}

func (d *decoder) scalar(n *yaml.Node, path string) (string, bool) {
	if isNull(n) {
		return "", true
	}
	if n.Kind != yaml.ScalarNode {
		d.fail(n, path, "must be a single value, not "+kindName(n), "quote it if it is meant as text")
		return "", false
	}
	return n.Value, true
}

func (d *decoder) boolean(n *yaml.Node, path string) (bool, bool) {
	if n.Kind == yaml.ScalarNode && n.Tag == "!!bool" {
		var b bool
		if err := n.Decode(&b); err == nil {
			return b, true
		}
	}
	d.fail(n, path, "must be true or false, not "+kindName(n), "")
	return false, false
}

// stringMap decodes labels, annotations, taints or platformMetadata,
// recording each key's position as path[key].
func (d *decoder) stringMap(n *yaml.Node, path string) map[string]string {
	var m map[string]string
	d.mapping(n, path, nil, func(key string, k, v *yaml.Node) {
		at := path + "[" + key + "]"
		d.mark(at, k)
		s, ok := d.scalar(v, at)
		if !ok {
			return
		}
		if m == nil {
			m = map[string]string{}
		}
		m[key] = s
	})
	return m
}

// decodeFile reads a rules document (Talos CCM's configuration format).
func (d *decoder) decodeFile(root *yaml.Node) {
	root = resolve(root)
	if root == nil || (root.Kind == yaml.DocumentNode && len(root.Content) == 0) {
		return
	}
	d.mapping(root, "", topKeys, func(key string, k, v *yaml.Node) {
		switch key {
		case "global":
			d.mark("global", k)
			d.decodeGlobal(v)
		case "transformations":
			d.sequence(v, "transformations", "write: transformations: [{name: …, nodeSelector: […], labels: {…}}]", func(i int, item *yaml.Node) {
				d.f.Transformations = append(d.f.Transformations, d.decodeRule(fmt.Sprintf("transformations[%d]", i), item))
			})
		}
	})
}

func (d *decoder) decodeGlobal(n *yaml.Node) {
	d.mapping(n, "global", globalKeys, func(key string, k, v *yaml.Node) {
		at := "global." + key
		d.mark(at, k)
		switch key {
		case "betaTopologyLabels":
			d.f.Global.BetaTopologyLabels, _ = d.boolean(v, at)
		case "preferIPv6":
			if b, ok := d.boolean(v, at); ok {
				d.f.Global.PreferIPv6 = &b
			}
		case "clusterName":
			d.f.Global.ClusterName, _ = d.scalar(v, at)
			d.f.Global.clusterNameSet = true
		}
	})
}

func (d *decoder) decodeRule(path string, n *yaml.Node) Rule {
	var r Rule
	d.mark(path, n)
	d.mapping(n, path, ruleKeys, func(key string, k, v *yaml.Node) {
		at := path + "." + key
		switch key {
		case "name":
			r.Name, _ = d.scalar(v, at)
		case "nodeSelector":
			d.sequence(v, at, "write: nodeSelector: [{matchExpressions: [{key: platform, operator: In, values: [metal]}]}]", func(i int, item *yaml.Node) {
				r.NodeSelector = append(r.NodeSelector, d.decodeTerm(fmt.Sprintf("%s[%d]", at, i), item))
			})
		case "labels":
			r.Labels = d.stringMap(v, path+".labels")
		case "annotations":
			r.Annotations = d.stringMap(v, path+".annotations")
		case "taints":
			r.Taints = d.stringMap(v, path+".taints")
		case "platformMetadata":
			r.PlatformMetadata = d.stringMap(v, path+".platformMetadata")
		case "features":
			d.mapping(v, at, featureKeys, func(key string, k, v *yaml.Node) {
				fat := at + "." + key
				d.mark(fat, k)
				b, ok := d.boolean(v, fat)
				if !ok {
					return
				}
				switch key {
				case "publicIPDiscovery":
					r.Features.PublicIPDiscovery = &b
				case "publicIPPredict":
					r.Features.PublicIPPredict = &b
				}
			})
		}
	})
	return r
}

func (d *decoder) decodeTerm(path string, n *yaml.Node) SelectorTerm {
	var t SelectorTerm
	d.mark(path, n)
	d.mapping(n, path, termKeys, func(key string, k, v *yaml.Node) {
		at := path + "." + key
		switch key {
		case "name":
			t.Name, _ = d.scalar(v, at)
		case "matchExpressions":
			d.mark(at, k)
			d.sequence(v, at, "write: matchExpressions: [{key: platform, operator: In, values: [metal]}]", func(i int, item *yaml.Node) {
				t.MatchExpressions = append(t.MatchExpressions, d.decodeExpression(fmt.Sprintf("%s[%d]", at, i), item))
			})
		}
	})
	return t
}

func (d *decoder) decodeExpression(path string, n *yaml.Node) Expression {
	var e Expression
	d.mark(path, n)
	d.mapping(n, path, expressionKeys, func(key string, k, v *yaml.Node) {
		at := path + "." + key
		switch key {
		case "key":
			e.Key, _ = d.scalar(v, at)
		case "operator":
			e.Operator, _ = d.scalar(v, at)
		case "values":
			d.sequence(v, at, "write: values: [a, b]", func(i int, item *yaml.Node) {
				if s, ok := d.scalar(item, fmt.Sprintf("%s[%d]", at, i)); ok {
					e.Values = append(e.Values, s)
				}
			})
		}
	})
	return e
}
