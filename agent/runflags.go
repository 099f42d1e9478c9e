package main

import (
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/talos-nodeinit/talos-nodeinit/pkg/agentkey"
	"github.com/talos-nodeinit/talos-nodeinit/pkg/desired"
	"github.com/talos-nodeinit/talos-nodeinit/pkg/netaddr"
	"github.com/talos-nodeinit/talos-nodeinit/pkg/talos"
	"github.com/talos-nodeinit/talos-nodeinit/pkg/telemetry"
)

// runFlags are `run`'s flags. `validate` builds the same set to check the
// NODEINIT_* environment an ExtensionServiceConfig gives the agent.
type runFlags struct {
	kubeconfig, socket, facts, cmdline, rulesFile, keyFile, nodeName, exclude, netns *string
	servingCert                                                                      *string
	policy, logLevel, logFormat, metricsAddr                                         *string
	credPoll                                                                         *time.Duration
}

func addRunFlags(fs *flag.FlagSet) *runFlags {
	return &runFlags{
		kubeconfig:  fs.String("kubeconfig", "/etc/kubernetes/kubeconfig-kubelet", "the kubelet's kubeconfig (its client certificate may rotate)"),
		socket:      fs.String("machined-socket", talos.DefaultSocket, "machined's API socket"),
		facts:       fs.String("facts", "machined", "where Talos facts come from: machined; auto (machined, and the kernel command line while machined refuses this process); or cmdline (degraded: platform and hostname from the kernel command line, for the static-pod fallback)"),
		cmdline:     fs.String("cmdline-file", "/proc/cmdline", "kernel command line, with --facts=cmdline"),
		rulesFile:   fs.String("rules-file", DefaultRulesFile, "the rules (Talos CCM transformations) file; a missing file at the default path means no rules"),
		keyFile:     fs.String("key-file", agentkey.DefaultFile, "the agent's own ed25519 key, which signs its CSR attestations; created when missing, never replaced"),
		servingCert: fs.String("kubelet-serving-cert", "/var/lib/kubelet/pki/kubelet-server-current.pem", "the kubelet's current serving certificate: a serving request is vouched for only when the kubelet would be asking (none yet, in its renewal window, or other SANs); empty: not read"),
		nodeName:    fs.String("node-name", "", "node name (default: the kubelet's, from Talos)"),
		exclude:     fs.String("exclude-links", "", "comma-separated link name patterns whose addresses are ignored, besides "+strings.Join(netaddr.DefaultExcludedLinks, ",")),
		netns:       fs.String("netns", "", "read addresses from the network namespace at this `PATH` (default: the agent's own)"),
		policy:      fs.String("provider-id-policy", string(desired.ProviderIDFromMetadata), "where spec.providerID may come from: metadata, talos-fallback (talos://<platform>/<nodeIP> where the platform has none) or never; it can never change once set"),
		logLevel:    fs.String("log-level", "info", "debug, info, warn or error"),
		logFormat:   fs.String("log-format", "text", "text or json"),
		metricsAddr: fs.String("metrics-addr", "", "serve /metrics, /healthz and /readyz on this `ADDRESS` (off when empty)"),
		credPoll:    fs.Duration("credentials-poll", 2*time.Second, "how often the kubelet's kubeconfig and certificate files are checked for rotation"),
	}
}

// check returns what is wrong with the values, before anything connects:
// everything `run` would refuse at start.
func (f *runFlags) check() error {
	if *f.credPoll <= 0 {
		return fmt.Errorf("--credentials-poll %v: want a positive duration", *f.credPoll)
	}
	if err := telemetry.CheckAddr(*f.metricsAddr); err != nil {
		return fmt.Errorf("--metrics-addr: %w", err)
	}
	if _, err := telemetry.NewLogger(io.Discard, *f.logLevel, *f.logFormat); err != nil {
		return err
	}
	if _, err := desired.ParseProviderIDPolicy(*f.policy); err != nil {
		return err
	}
	switch *f.facts {
	case "machined", "auto":
	case "cmdline":
		if *f.nodeName == "" {
			return fmt.Errorf("--facts=cmdline needs --node-name (in a static pod, from the downward API)")
		}
	default:
		return fmt.Errorf("--facts %q: want machined, auto or cmdline", *f.facts)
	}
	return nil
}
