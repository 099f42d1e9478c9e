// Command nodeinit-agent runs on every Talos node as a system extension
// service and initializes its own Node with the node's kubelet credentials:
// labels, providerID, addresses, the facts the coordinator needs, and
// attestations of its serving CSRs.
package main

import (
	"context"
	"crypto/ed25519"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/talos-nodeinit/talos-nodeinit/agent/controller"
	"github.com/talos-nodeinit/talos-nodeinit/pkg/agentkey"
	"github.com/talos-nodeinit/talos-nodeinit/pkg/contract"
	"github.com/talos-nodeinit/talos-nodeinit/pkg/desired"
	"github.com/talos-nodeinit/talos-nodeinit/pkg/envflag"
	"github.com/talos-nodeinit/talos-nodeinit/pkg/facts"
	"github.com/talos-nodeinit/talos-nodeinit/pkg/netaddr"
	"github.com/talos-nodeinit/talos-nodeinit/pkg/rules"
	"github.com/talos-nodeinit/talos-nodeinit/pkg/talos"
	"github.com/talos-nodeinit/talos-nodeinit/pkg/telemetry"
	"github.com/talos-nodeinit/talos-nodeinit/pkg/version"
)

const envPrefix = "NODEINIT_"

// DefaultRulesFile is where the ExtensionServiceConfig in extension/ mounts
// the rules. A missing file at this default means "no rules"; a missing file
// named explicitly is an error.
const DefaultRulesFile = "/usr/local/etc/nodeinit/rules.yaml"

const usage = `nodeinit-agent initializes this node's Kubernetes Node object on Talos Linux.

Usage:
  nodeinit-agent [run] [flags]                   run the node agent (the default)
  nodeinit-agent validate --rules-file FILE      check the rules (a rules file, its ExtensionServiceConfig,
                                                a machine config, Talos CCM's config) and exit
  nodeinit-agent explain [flags]                 print what run would write for given facts, offline
  nodeinit-agent migrate --from-talos-ccm FILE   convert a Talos CCM configuration to the agent's rules
  nodeinit-agent version                         print the version (also: --version)

Run 'nodeinit-agent <command> --help' for a command's flags. Every flag can
also be set from the environment: --rules-file is NODEINIT_RULES_FILE.
`

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	cmd := "run"
	if len(args) > 0 && (args[0] == "-h" || args[0] == "--help" || args[0] == "-help") {
		fmt.Fprint(stderr, usage+"\nnodeinit-agent run:\n")
		return runAgent(args, stdout, stderr)
	}
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		cmd, args = args[0], args[1:]
	}
	switch cmd {
	case "run":
		return runAgent(args, stdout, stderr)
	case "validate":
		return validate(args, stdout, stderr)
	case "explain":
		return explainCmd(args, stdout, stderr)
	case "migrate":
		return migrate(args, stdout, stderr)
	case "version":
		fmt.Fprintln(stdout, version.String("nodeinit-agent"))
		return 0
	case "help":
		fmt.Fprint(stdout, usage)
		return 0
	}
	fmt.Fprintf(stderr, "unknown command %q\nRun 'nodeinit-agent --help' for usage.\n", cmd)
	return 2
}

func newFlagSet(name, synopsis string, stderr io.Writer) *flag.FlagSet {
	return envflag.NewFlagSet("nodeinit-agent "+name, synopsis, envPrefix, stderr)
}

func parse(fs *flag.FlagSet, args []string) (int, bool) {
	return envflag.ParseCommand(fs, envPrefix, args)
}

func runAgent(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("run", "Usage: nodeinit-agent run [flags]\n\nWatch this node's facts and keep its Node object up to date.", stderr)
	kubeconfig := fs.String("kubeconfig", "/etc/kubernetes/kubeconfig-kubelet", "the kubelet's kubeconfig (its client certificate may rotate)")
	socket := fs.String("machined-socket", talos.DefaultSocket, "machined's API socket")
	factsFrom := fs.String("facts", "machined", "where Talos facts come from: machined; auto (machined, and the kernel command line while machined refuses this process); or cmdline (degraded: platform and hostname from the kernel command line, for the static-pod fallback)")
	cmdline := fs.String("cmdline-file", "/proc/cmdline", "kernel command line, with --facts=cmdline")
	rulesFile := fs.String("rules-file", DefaultRulesFile, "the rules (Talos CCM transformations) file; a missing file at the default path means no rules")
	keyFile := fs.String("key-file", agentkey.DefaultFile, "the agent's own ed25519 key, which signs its CSR attestations; created when missing, never replaced")
	nodeName := fs.String("node-name", "", "node name (default: the kubelet's, from Talos)")
	exclude := fs.String("exclude-links", "", "comma-separated link name patterns whose addresses are ignored, besides "+strings.Join(netaddr.DefaultExcludedLinks, ","))
	netns := fs.String("netns", "", "read addresses from the network namespace at this `PATH` (default: the agent's own)")
	policy := fs.String("provider-id-policy", string(desired.ProviderIDFromMetadata), "where spec.providerID may come from: metadata, talos-fallback (talos://<platform>/<nodeIP> where the platform has none) or never; it can never change once set")
	logLevel := fs.String("log-level", "info", "debug, info, warn or error")
	logFormat := fs.String("log-format", "text", "text or json")
	metricsAddr := fs.String("metrics-addr", "", "serve /metrics, /healthz and /readyz on this `ADDRESS` (off when empty)")
	credPoll := fs.Duration("credentials-poll", 2*time.Second, "how often the kubelet's kubeconfig and certificate files are checked for rotation")
	envflag.AddVersion(fs, stdout, version.String("nodeinit-agent"))
	if code, stop := parse(fs, args); stop {
		return code
	}
	// Values are checked before anything connects anywhere.
	if *credPoll <= 0 {
		return envflag.Fail(fs, fmt.Sprintf("--credentials-poll %v: want a positive duration", *credPoll))
	}
	if err := telemetry.CheckAddr(*metricsAddr); err != nil {
		return envflag.Fail(fs, "--metrics-addr: "+err.Error())
	}
	log, err := telemetry.NewLogger(stderr, *logLevel, *logFormat)
	if err != nil {
		return envflag.Fail(fs, err.Error())
	}
	telemetry.RouteKlog(log) // from here on client-go logs too
	pol, err := desired.ParseProviderIDPolicy(*policy)
	if err != nil {
		log.Error("invalid flag", "err", err)
		return 2
	}
	rs, err := loadRules(*rulesFile, *rulesFile == DefaultRulesFile)
	if err != nil {
		// Talos restarts the service; `talosctl logs ext-nodeinit-agent` shows this.
		log.Error("invalid rules; not starting", "file", *rulesFile, "err", err)
		return 1
	}
	var reader *talos.Reader
	var watchFacts func(context.Context, func(facts.Talos)) error
	switch *factsFrom {
	case "machined", "auto":
		reader = &talos.Reader{Socket: *socket, Log: log}
		if *factsFrom == "auto" {
			reader.Fallback = func() (facts.Talos, error) { return talos.FromCmdline(*cmdline) }
		}
		watchFacts = reader.Watch
	case "cmdline":
		if *nodeName == "" {
			log.Error("--facts=cmdline needs --node-name (in a static pod, from the downward API)")
			return 2
		}
		watchFacts = func(ctx context.Context, update func(facts.Talos)) error {
			f, err := talos.FromCmdline(*cmdline)
			if err != nil {
				return err
			}
			update(f)
			<-ctx.Done()
			return nil
		}
	default:
		log.Error("invalid flag", "err", fmt.Sprintf("--facts %q: want machined, auto or cmdline", *factsFrom))
		return 2
	}

	key, created, err := agentkey.LoadOrCreate(*keyFile)
	if err != nil {
		log.Error("no agent key; not starting", "file", *keyFile, "err", err)
		return 1
	}
	// The public half is public: the coordinator enrols it from the Node.
	log.Info("agent key", "file", *keyFile, "created", created, "public-key", contract.EncodeAgentKey(key.Public().(ed25519.PublicKey)))

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	reg := telemetry.NewRegistry()
	var extra []string
	for p := range strings.SplitSeq(*exclude, ",") {
		if p = strings.TrimSpace(p); p != "" {
			extra = append(extra, p)
		}
	}
	agent, err := controller.New(controller.Config{
		NodeName: *nodeName, Kubeconfig: *kubeconfig, CredentialsPoll: *credPoll, Facts: watchFacts, NetNS: *netns,
		Rules: rs, Classifier: netaddr.NewClassifier(extra...), Policy: pol, Version: version.Version,
		Key: key, Log: log, Metrics: controller.NewMetrics(reg),
	})
	if err != nil {
		log.Error("invalid configuration", "err", err)
		return 2
	}
	if reader != nil {
		reader.Problem = agent.SetFactsProblem // shown by /readyz
	}
	if *metricsAddr != "" {
		srv := &telemetry.Server{Addr: *metricsAddr, Registry: reg, Ready: agent.Ready, Log: log}
		addr, err := srv.Listen(ctx)
		if err != nil {
			log.Error("cannot serve metrics", "err", err)
			return 1
		}
		log.Info("serving metrics and health", "addr", addr)
	}
	log.Info("starting", "version", version.Version, "rules", rs.Names(), "provider-id-policy", pol, "facts", *factsFrom, "netns", *netns)
	if err := agent.Run(ctx); err != nil {
		log.Error("stopped", "err", err)
		return 1
	}
	return 0
}

func loadRules(path string, optional bool) (*rules.Rules, error) {
	if path == "" {
		return rules.Compile(rules.File{})
	}
	rs, err := rules.LoadFile(path)
	if err != nil && optional && errors.Is(err, os.ErrNotExist) {
		return rules.Compile(rules.File{})
	}
	return rs, err
}
