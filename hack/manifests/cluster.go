package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"slices"
	"strings"

	"github.com/siderolabs/talos/pkg/machinery/config/configloader"
	"github.com/siderolabs/talos/pkg/machinery/config/configpatcher"
	"github.com/siderolabs/talos/pkg/machinery/config/machine"
	"go.yaml.in/yaml/v3"
)

// Cluster is what one node's machine configuration says about the cluster,
// read from `talosctl -n <node> get mc -o yaml` (or the config file): the
// renderer decides from it, not from what the user remembers.
type Cluster struct {
	File string
	Type machine.Type
	// Form is how the config is written (a KubeletConfig document: created
	// with Talos 1.14).
	Form Form
	// TalosVersion is the installer image's tag ("" when it names none).
	TalosVersion string
	// WorkloadIsolation: a SecurityProfileConfig turns it on.
	WorkloadIsolation bool
	PodSubnets        []string
	// CloudController names the cloud controller the config installs
	// ("" none): Talos CCM, or another external cloud provider.
	CloudController string
	config          []byte
}

// ReadCluster reads one node's machine configuration. It accepts the output
// of `talosctl get mc -o yaml` (the resource, its spec the config) and the
// config itself, and loads it with Talos's own config loader.
func ReadCluster(file string, raw []byte) (Cluster, error) {
	cfgBytes, err := unwrapResource(raw)
	if err != nil {
		return Cluster{}, fmt.Errorf("%s: %w", file, err)
	}
	cfg, err := configloader.NewFromBytes(cfgBytes)
	if err != nil {
		return Cluster{}, fmt.Errorf("%s is not a Talos machine configuration (`talosctl -n <node> get mc -o yaml > %s` writes one): %w", file, file, err)
	}
	c := Cluster{File: file, config: cfgBytes, Form: FormV1Alpha1}
	if m := cfg.Machine(); m != nil {
		c.Type = m.Type()
		if img := m.Install().Image(); img != "" {
			if i := strings.LastIndex(img, ":"); i > strings.LastIndex(img, "/") {
				c.TalosVersion = strings.SplitN(img[i+1:], "@", 2)[0]
			}
		}
	}
	if cl := cfg.Cluster(); cl != nil && cl.ExternalCloudProvider().Enabled() {
		// Enabled alone is what this install sets too: only a manifest the
		// config installs is another cloud controller (one installed with
		// Helm or kubectl is not in the machine configuration).
		for _, u := range cl.ExternalCloudProvider().ManifestURLs() {
			c.CloudController = "a cloud controller (" + u + ")"
			if strings.Contains(u, "talos-cloud-controller-manager") {
				c.CloudController = "Talos CCM (" + u + ")"
				break
			}
		}
	}
	dec := yaml.NewDecoder(bytes.NewReader(cfgBytes))
	for {
		var doc map[string]any
		if err := dec.Decode(&doc); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return Cluster{}, fmt.Errorf("%s: %w", file, err)
		}
		switch doc["kind"] {
		case "KubeletConfig":
			c.Form = FormMultidoc
		case "SecurityProfileConfig":
			c.WorkloadIsolation = doc["workloadIsolation"] == true
		}
		walk(doc, func(key string, v any) {
			switch key {
			case "podSubnets":
				for _, s := range asList(v) {
					if !slices.Contains(c.PodSubnets, s) {
						c.PodSubnets = append(c.PodSubnets, s)
					}
				}
			case "manifest", "contents":
				if s, ok := v.(string); ok && strings.Contains(s, "talos-cloud-controller-manager") {
					c.CloudController = "Talos CCM (an inline manifest)"
				}
			}
		})
	}
	return c, nil
}

// ReadVersion reads the output of `talosctl -n <node> get version -o yaml`:
// the Talos version the node runs. ok is false for any other file.
func ReadVersion(raw []byte) (version string, ok bool) {
	var res struct {
		Metadata struct {
			Type string `yaml:"type"`
		} `yaml:"metadata"`
		Spec struct {
			Version string `yaml:"version"`
		} `yaml:"spec"`
	}
	if yaml.Unmarshal(raw, &res) != nil || res.Metadata.Type != "Versions.runtime.talos.dev" {
		return "", false
	}
	return res.Spec.Version, true
}

// walk calls f with every key and value in v, depth first.
func walk(v any, f func(string, any)) {
	switch v := v.(type) {
	case map[string]any:
		for k, x := range v {
			f(k, x)
			walk(x, f)
		}
	case []any:
		for _, x := range v {
			walk(x, f)
		}
	}
}

// asList is v's strings, when it is a list of them.
func asList(v any) []string {
	var out []string
	if l, ok := v.([]any); ok {
		for _, x := range l {
			if s, ok := x.(string); ok {
				out = append(out, s)
			}
		}
	}
	return out
}

// unwrapResource returns the machine configuration inside a COSI resource
// as `talosctl get mc -o yaml` prints it (node, metadata, spec), or raw
// when it is the configuration itself.
func unwrapResource(raw []byte) ([]byte, error) {
	var res struct {
		Metadata map[string]any `yaml:"metadata"`
		Spec     yaml.Node      `yaml:"spec"`
	}
	if err := yaml.Unmarshal(raw, &res); err != nil || res.Metadata == nil || res.Spec.Kind == 0 {
		return raw, nil
	}
	if res.Spec.Kind == yaml.ScalarNode {
		return []byte(res.Spec.Value), nil
	}
	return yaml.Marshal(&res.Spec)
}

// decide takes in's form and mode from the clusters' configurations and
// refuses, with the fix, what would break the cluster. It returns what it
// decided and why, one line each.
func (in *Install) decide(clusters []Cluster, ipv4Pool string) ([]string, error) {
	var said []string
	var errs []error
	forms := map[Form][]string{}
	for _, c := range clusters {
		forms[c.Form] = append(forms[c.Form], c.File)
	}
	if len(forms) > 1 {
		return nil, fmt.Errorf("MACHINE_CONFIG: the files disagree on the config's form (%v): give configurations of one cluster", forms)
	}
	c0 := clusters[0]
	if in.Form != "" && in.Form != c0.Form {
		errs = append(errs, fmt.Errorf("TALOS_CONFIG=%s, but %s is written in the %s form: leave TALOS_CONFIG out, it is read from the cluster", in.Form, c0.File, c0.Form))
	}
	in.Form = c0.Form
	said = append(said, fmt.Sprintf("config form: %s (%s)", in.Form, map[Form]string{FormMultidoc: "it holds a KubeletConfig document: created with Talos 1.14", FormV1Alpha1: "no KubeletConfig document: created with Talos 1.13 or earlier"}[in.Form]))
	version, isolated := in.Running, false
	for _, c := range clusters {
		if c.TalosVersion != "" && version == "" {
			version = c.TalosVersion
		}
		isolated = isolated || c.WorkloadIsolation
	}
	on13 := strings.HasPrefix(version, "v1.13.") || strings.HasPrefix(version, "v1.12.")
	switch {
	case in.Running != "":
		said = append(said, "Talos version: "+version+" (talosctl get version)")
		for _, c := range clusters {
			if c.TalosVersion != "" && c.TalosVersion != version {
				said = append(said, fmt.Sprintf("%s names installer %s: the nodes run %s, which decides", c.File, c.TalosVersion, version))
				break
			}
		}
	case version != "":
		said = append(said, "Talos version: "+version+" (machine.install.image; the running one, from `talosctl -n <node> get version -o yaml > version.yaml` in MACHINE_CONFIG, would decide)")
	case in.Form == FormMultidoc:
		said = append(said, "Talos version: 1.14 or later (a KubeletConfig document)")
	default:
		// The v1alpha1 form is read by 1.13 and by 1.14: only the running
		// version tells whether a ContainerConfig can be applied.
		if in.Mode != ModeExtension {
			errs = append(errs, errors.New("MACHINE_CONFIG does not say which Talos the nodes run (the config is in the v1alpha1 form, read by 1.13 and 1.14, and names no installer): "+
				"add `talosctl -n <a worker> get version -o yaml > version.yaml` to MACHINE_CONFIG (MACHINE_CONFIG=cp.yaml,worker.yaml,version.yaml), or MODE=extension, which works on both"))
		}
	}
	if in.Mode == "" {
		in.Mode = ModeContainer
		if on13 {
			in.Mode = ModeExtension
			if in.AgentImage != "" {
				said = append(said, "AGENT_IMAGE is not used: on Talos 1.13 the agent is the extension, in the Talos image")
				in.AgentImage = ""
			}
		}
	}
	switch {
	case in.Mode == ModeContainer && on13:
		errs = append(errs, fmt.Errorf("MODE=container on Talos %s: ContainerConfig is a Talos 1.14 document; leave MODE out (the extension is chosen) or upgrade Talos first", version))
	case in.Mode == ModeContainer && isolated:
		said = append(said, "agent: a ContainerConfig; workloadIsolation is on, and Talos v1.14.0-v1.14.1 refuse such a container on machined's socket, "+
			"so the agent reads the kernel command line instead (--facts=auto): Nodes get their platform, addresses, rules and certificates, not region, zone, instance type or VIPs. "+
			"Nothing is switched off; MODE=extension gives complete facts (an image with the extension, and a reboot per node)")
	case in.Mode == ModeContainer:
		said = append(said, "agent: a ContainerConfig (no image rebuild, no reboot); workloadIsolation is off")
	default:
		said = append(said, "agent: the system extension (build it into the Talos image first, and reboot each node into it)")
	}
	if pool, err := netip.ParsePrefix(ipv4Pool); err == nil {
		var subnets []string
		for _, c := range clusters {
			for _, s := range c.PodSubnets {
				if !slices.Contains(subnets, s) {
					subnets = append(subnets, s)
				}
			}
		}
		ok := len(subnets) == 0
		for _, s := range subnets {
			if p, err := netip.ParsePrefix(s); err == nil && p.Addr().Is4() && p.Bits() <= pool.Bits() && p.Contains(pool.Addr()) {
				ok = true
			}
		}
		if !ok {
			errs = append(errs, fmt.Errorf("ipam.ipv4Pool %s is not inside the cluster's pod subnets %v (cluster.network.podSubnets): a CNI cannot route pods there. Set ipam.ipv4Pool in CONFIG to one of them", ipv4Pool, subnets))
		} else if len(subnets) > 0 {
			said = append(said, fmt.Sprintf("pod subnets: %v; ipam.ipv4Pool %s lies in them", subnets, ipv4Pool))
		}
	}
	for _, c := range clusters {
		switch {
		case c.CloudController == "":
			continue
		case in.ReplacesTalosCCM && strings.HasPrefix(c.CloudController, "Talos CCM"):
			said = append(said, fmt.Sprintf("%s installs %s: this install replaces it. Everything is rendered and validated now; "+
				"remove Talos CCM right before applying these patches, as docs/migrating.md's switch says, so that the two never both approve", c.File, c.CloudController))
		default:
			errs = append(errs, fmt.Errorf("%s installs %s: with two node controllers, serving CSRs are approved without the agent's attestation and Nodes are initialized twice. "+
				"To replace Talos CCM, render with MIGRATING=talos-ccm and follow docs/migrating.md; remove any other cloud controller first", c.File, c.CloudController))
		}
		break
	}
	return said, errors.Join(errs...)
}

// validateOn applies patch to the cluster's own configuration, as
// `talosctl patch mc` would, and validates the result with Talos's
// machinery.
func (c Cluster) validateOn(patch []byte) error {
	p, err := configpatcher.LoadPatch(patch)
	if err != nil {
		return err
	}
	out, err := configpatcher.Apply(configpatcher.WithBytes(c.config), []configpatcher.Patch{p})
	if err != nil {
		return fmt.Errorf("%s: %w", c.File, err)
	}
	cfg, err := out.Config()
	if err != nil {
		return fmt.Errorf("%s: %w", c.File, err)
	}
	for _, m := range []validationMode{{}, {container: true}} {
		if _, err := cfg.Validate(m); err != nil {
			return fmt.Errorf("%s (%s): %w", c.File, m, err)
		}
	}
	return nil
}
