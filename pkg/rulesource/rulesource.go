// Package rulesource finds the agent's rules in the files users have: a bare
// rules file (Talos CCM's configuration format), the ExtensionServiceConfig
// document that delivers it to the extension, the EtcFileConfig document that
// delivers it to the ContainerConfig (Talos 1.14), a Talos machine config
// holding either, or Talos CCM's own ConfigMap. It is pure; LoadFile is the one edge that
// reads a file.
package rulesource

import (
	"fmt"
	"os"
	"slices"
	"strings"

	"go.yaml.in/yaml/v4"

	"github.com/talos-nodeinit/talos-nodeinit/pkg/rules"
	"github.com/talos-nodeinit/talos-nodeinit/pkg/yamlstrict"
)

// MountPath is where the ExtensionServiceConfig mounts the rules: the
// agent's default --rules-file.
const MountPath = "/usr/local/etc/nodeinit/rules.yaml"

// ServiceName is the extension service's name, as ExtensionServiceConfig names it.
const ServiceName = "nodeinit-agent"

// EtcFileName is the EtcFileConfig (Talos 1.14) that delivers the rules to
// the agent run as a ContainerConfig: Talos writes /etc/nodeinit/rules.yaml,
// which the container mounts at MountPath.
const EtcFileName = "nodeinit/rules.yaml"

// ContainerName is the agent's ContainerConfig's name (Talos 1.14).
const ContainerName = "nodeinit-agent"

// TalosCCMConfigKey is the key of Talos CCM's ConfigMap holding its configuration.
const TalosCCMConfigKey = "ccm-config.yaml"

// Kind says which kind of file held the rules.
type Kind string

const (
	KindRules                  Kind = "rules file"
	KindExtensionServiceConfig Kind = "ExtensionServiceConfig"
	KindEtcFileConfig          Kind = "EtcFileConfig"
	KindMachineConfig          Kind = "Talos machine config"
	KindTalosCCMConfigMap      Kind = "Talos CCM ConfigMap"
	KindTalosCCMHelmValues     Kind = "Talos CCM Helm values"
)

// chartKeys are top-level keys of Talos CCM's Helm chart values
// (charts/talos-cloud-controller-manager/values.yaml): a file with
// transformations and one of these is a values file, of which only
// transformations are rules.
var chartKeys = []string{"replicaCount", "image", "imagePullSecrets", "nameOverride", "fullnameOverride", "extraArgs", "enabledControllers",
	"logVerbosityLevel", "serviceAccount", "priorityClassName", "podAnnotations", "podSecurityContext", "securityContext", "service",
	"resources", "daemonSet", "updateStrategy", "nodeSelector", "tolerations", "affinity"}

// Source is the rules document found in a file.
type Source struct {
	Kind Kind
	// Content is the rules document itself.
	Content []byte
	// Doc is the 1-based number of the YAML document that held it.
	Doc int
	// shift moves a position in Content to the same place in the file.
	shift func(rules.Pos) rules.Pos
	// Root, when set, is the rules document as a node of the file itself
	// (positions need no shift); Content is then the whole file.
	Root *yaml.Node
	// Values is the whole Helm values document, for KindTalosCCMHelmValues.
	Values *yaml.Node
	// Environment is the ExtensionServiceConfig's environment: the agent's
	// flags as NODEINIT_* variables, each where it is in the file.
	Environment []Env
}

// Env is one NAME=value entry of an ExtensionServiceConfig's environment.
type Env struct {
	Entry string
	Pos   rules.Pos
}

// Where maps a position in Content to the file's line and column.
func (s Source) Where(p rules.Pos) rules.Pos {
	if s.shift == nil || p.Line == 0 {
		return p
	}
	return s.shift(p)
}

// Describe names what was read, for `validate` output.
func (s Source) Describe() string {
	switch s.Kind {
	case KindRules:
		return string(s.Kind)
	case KindTalosCCMConfigMap:
		return fmt.Sprintf("%s (data.%s, document %d)", s.Kind, TalosCCMConfigKey, s.Doc)
	case KindTalosCCMHelmValues:
		return fmt.Sprintf("%s (transformations)", s.Kind)
	case KindEtcFileConfig:
		return fmt.Sprintf("%s %s (contents, document %d)", s.Kind, EtcFileName, s.Doc)
	}
	return fmt.Sprintf("%s %s (configFiles %s, document %d)", s.Kind, ServiceName, MountPath, s.Doc)
}

// Find locates the rules document in data.
func Find(data []byte) (Source, error) {
	docs, err := rules.ParseDocuments(data)
	if err != nil {
		return Source{}, err
	}
	machineConfig := false
	var containerEnv []Env
	var found []Source
	var problems rules.Problems
	for i, doc := range docs {
		root := doc
		if root.Kind == yaml.DocumentNode && len(root.Content) == 1 {
			root = root.Content[0]
		}
		if root.Kind != yaml.MappingNode {
			continue
		}
		kind, name := str(yamlstrict.Value(root, "kind")), str(yamlstrict.Value(root, "name"))
		switch {
		case yamlstrict.Value(root, "machine") != nil || yamlstrict.Value(root, "cluster") != nil:
			machineConfig = true // the v1alpha1 document; other documents hold ours
		case kind == "ExtensionServiceConfig" && name == ServiceName:
			s, p := fromExtensionServiceConfig(data, root)
			if p != nil {
				problems = append(problems, *p)
				continue
			}
			s.Doc = i + 1
			found = append(found, s)
		case kind == "ContainerConfig" && name == ContainerName:
			// Its environment is the agent's settings, checked as the
			// ExtensionServiceConfig's are; its rules come in the
			// EtcFileConfig.
			containerEnv = environmentOf(root)
		case kind == "EtcFileConfig" && name == EtcFileName:
			c := yamlstrict.Value(root, "contents")
			if c == nil || c.Kind != yaml.ScalarNode {
				problems = append(problems, rules.Problem{Pos: pos(root), Rule: "EtcFileConfig " + EtcFileName,
					Msg: "has no contents", Fix: "write the rules under contents: |"})
				continue
			}
			s := embedded(data, c)
			s.Kind, s.Doc = KindEtcFileConfig, i+1
			found = append(found, s)
		case kind == "ConfigMap":
			d := yamlstrict.Value(root, "data")
			if c := yamlstrict.Value(d, TalosCCMConfigKey); c != nil {
				s := embedded(data, c)
				s.Kind, s.Doc = KindTalosCCMConfigMap, i+1
				found = append(found, s)
			} else if yamlstrict.Value(d, "coordinator.yaml") != nil {
				problems = append(problems, rules.Problem{Pos: pos(root), Msg: "this is the coordinator's ConfigMap, not rules",
					Fix: "check it with `nodeinit-coordinator validate --config FILE`"})
			}
		case kind == "" && yamlstrict.Value(root, "transformations") != nil && slices.ContainsFunc(chartKeys, func(k string) bool { return yamlstrict.Value(root, k) != nil }):
			rulesRoot := &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map", Line: root.Line, Column: root.Column}
			for i := 0; i+1 < len(root.Content); i += 2 {
				if root.Content[i].Value == "transformations" {
					rulesRoot.Content = append(rulesRoot.Content, root.Content[i], root.Content[i+1])
				}
			}
			found = append(found, Source{Kind: KindTalosCCMHelmValues, Content: data, Doc: i + 1, Root: rulesRoot, Values: root})
		case kind == "" && len(docs) == 1:
			found = append(found, Source{Kind: KindRules, Content: data, Doc: 1})
		case kind == "" && (yamlstrict.Value(root, "transformations") != nil || yamlstrict.Value(root, "global") != nil):
			found = append(found, Source{Kind: KindRules, Content: data, Doc: i + 1})
		}
	}
	if len(docs) > 1 && slices.ContainsFunc(found, func(s Source) bool { return s.Kind == KindRules }) {
		return Source{}, rules.Problems{{Pos: rules.Pos{Line: 1, Col: 1}, Msg: "a rules file is one YAML document; this one has " + fmt.Sprint(len(docs)),
			Fix: "keep only the document with transformations"}}
	}
	for i := range found {
		if found[i].Kind == KindEtcFileConfig && found[i].Environment == nil {
			found[i].Environment = containerEnv
		}
	}
	if machineConfig {
		for i := range found {
			if found[i].Kind == KindExtensionServiceConfig {
				found[i].Kind = KindMachineConfig
			}
		}
	}
	switch {
	case len(found) == 1:
		return found[0], nil
	case len(found) > 1:
		var where []string
		for _, s := range found {
			where = append(where, s.Describe())
		}
		return Source{}, rules.Problems{{Msg: "more than one set of rules: " + strings.Join(where, "; "), Fix: "keep one: the agent reads one rules file"}}
	case len(problems) > 0:
		return Source{}, problems
	}
	return Source{}, rules.Problems{{Msg: "no nodeinit-agent rules here",
		Fix: fmt.Sprintf("give a rules file (transformations: …), an ExtensionServiceConfig named %s with a configFiles entry at %s, an EtcFileConfig named %s, a machine config holding one, or Talos CCM's ConfigMap (data.%s)", ServiceName, MountPath, EtcFileName, TalosCCMConfigKey)}}
}

// environmentOf is a document's environment entries, each where it is.
func environmentOf(root *yaml.Node) []Env {
	env := yamlstrict.Value(root, "environment")
	if env != nil && env.Kind == yaml.AliasNode {
		env = env.Alias
	}
	var out []Env
	if env != nil && env.Kind == yaml.SequenceNode {
		for _, e := range env.Content {
			at := pos(e)
			if e.Kind == yaml.AliasNode {
				e = e.Alias
			}
			out = append(out, Env{Entry: str(e), Pos: at})
		}
	}
	return out
}

// fromExtensionServiceConfig finds the configFiles entry mounted at MountPath.
func fromExtensionServiceConfig(data []byte, root *yaml.Node) (Source, *rules.Problem) {
	files := yamlstrict.Value(root, "configFiles")
	if files == nil || files.Kind != yaml.SequenceNode {
		return Source{}, &rules.Problem{Pos: pos(root), Rule: "ExtensionServiceConfig " + ServiceName,
			Msg: "has no configFiles", Fix: fmt.Sprintf("add configFiles: [{mountPath: %s, content: |…}]", MountPath)}
	}
	var mounts []string
	for _, f := range files.Content {
		mp := str(yamlstrict.Value(f, "mountPath"))
		mounts = append(mounts, mp)
		if mp != MountPath {
			continue
		}
		c := yamlstrict.Value(f, "content")
		if c == nil || c.Kind != yaml.ScalarNode {
			return Source{}, &rules.Problem{Pos: pos(f), Rule: "ExtensionServiceConfig " + ServiceName,
				Msg: "the configFiles entry at " + MountPath + " has no content", Fix: "write the rules under content: |"}
		}
		s := embedded(data, c)
		s.Kind = KindExtensionServiceConfig
		s.Environment = environmentOf(root)
		return s, nil
	}
	return Source{}, &rules.Problem{Pos: pos(files), Rule: "ExtensionServiceConfig " + ServiceName,
		Msg: fmt.Sprintf("no configFiles entry is mounted at %s (found: %s)", MountPath, strings.Join(mounts, ", ")),
		Fix: fmt.Sprintf("mount the rules at %s, where the agent reads them, or run the agent with --rules-file", MountPath)}
}

// embedded is the rules text held in a string node. In a block scalar
// (content: |) the text starts on the next line at the block's indentation,
// so positions map exactly; in any other style they map to the node.
func embedded(data []byte, c *yaml.Node) Source {
	s := Source{Content: []byte(c.Value)}
	if c.Style&(yaml.LiteralStyle) != 0 {
		lines := strings.Split(string(data), "\n")
		indent := 0
		for l := c.Line; l < len(lines); l++ { // c.Line is 1-based: lines[c.Line] is the next line
			if strings.TrimSpace(lines[l]) != "" {
				indent = len(lines[l]) - len(strings.TrimLeft(lines[l], " "))
				break
			}
		}
		s.shift = func(p rules.Pos) rules.Pos { return rules.Pos{Line: c.Line + p.Line, Col: p.Col + indent} }
		return s
	}
	s.shift = func(rules.Pos) rules.Pos { return rules.Pos{Line: c.Line, Col: c.Column} }
	return s
}

// Load finds and loads the rules in data. Problems carry positions in data.
func Load(data []byte) (*rules.Rules, Source, error) {
	s, err := Find(data)
	if err != nil {
		return nil, s, err
	}
	var r *rules.Rules
	if s.Root != nil {
		r, err = rules.LoadNode(s.Root)
	} else {
		r, err = rules.Load(s.Content)
	}
	if ps, ok := err.(rules.Problems); ok {
		for i := range ps {
			ps[i].Pos = s.Where(ps[i].Pos)
		}
		return nil, s, ps
	}
	return r, s, err
}

// LoadFile reads path and loads the rules in it; problems name the file.
func LoadFile(path string) (*rules.Rules, Source, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, Source{}, err
	}
	r, s, err := Load(data)
	if ps, ok := err.(rules.Problems); ok {
		return nil, s, ps.InFile(path)
	}
	return r, s, err
}

func str(n *yaml.Node) string {
	if n == nil || n.Kind != yaml.ScalarNode {
		return ""
	}
	return n.Value
}

func pos(n *yaml.Node) rules.Pos { return rules.Pos{Line: n.Line, Col: n.Column} }
