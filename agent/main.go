// Command nodeinit-agent runs on every Talos node as a system extension
// service and initializes its own Node with the node's kubelet credentials:
// labels, addresses, the facts the coordinator needs (with the providerID
// it sets when it initializes the Node), and attestations of its serving
// CSRs.
package main

import (
	"context"
	"crypto/ed25519"
	"flag"
	"fmt"
	"io"
	"net/netip"
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
		// Moved: it predicts the coordinator too, with the coordinator's
		// own code, which the agent does not link.
		fmt.Fprintln(stderr, "explain is now `nodeinit-coordinator explain`, with the same flags (--config for --coordinator-config)")
		return 2
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
	f := addRunFlags(fs)
	envflag.AddVersion(fs, stdout, version.String("nodeinit-agent"))
	if code, stop := parse(fs, args); stop {
		return code
	}
	// Values are checked before anything connects anywhere.
	if err := f.check(); err != nil {
		return envflag.Fail(fs, err.Error())
	}
	log, err := telemetry.NewLogger(stderr, *f.logLevel, *f.logFormat)
	if err != nil {
		return envflag.Fail(fs, err.Error())
	}
	// Talos appends each patch's environment entries: a setting given twice
	// takes its last value (envflag.Parse), and says so.
	for _, w := range envflag.Repeated(envPrefix, envflag.Environ()) {
		log.Warn(w)
	}
	// A misspelt setting would keep its default without a word.
	for _, w := range envflag.Unknown(fs, envPrefix, envflag.Environ()) {
		log.Warn(w)
	}
	defer telemetry.RouteKlog(log)()                   // from here on client-go logs too, until run returns
	pol, _ := desired.ParseProviderIDPolicy(*f.policy) // checked above
	optionalRules := *f.rulesFile == DefaultRulesFile
	rulesText, err := readRules(*f.rulesFile, optionalRules)
	var rs *rules.Rules
	if err == nil {
		rs, err = compileRules(*f.rulesFile, rulesText)
	}
	if err != nil {
		// Talos restarts the service; `talosctl logs ext-nodeinit-agent` shows this.
		log.Error("invalid rules; not starting", "file", *f.rulesFile, "err", err)
		return 1
	}
	var reader *talos.Reader
	var watchFacts func(context.Context, func(facts.Talos)) error
	switch *f.facts {
	case "machined", "auto":
		reader = &talos.Reader{Socket: *f.socket, Log: log}
		if *f.facts == "auto" {
			reader.Fallback = func() (facts.Talos, error) { return talos.FromCmdline(*f.cmdline) }
		}
		watchFacts = reader.Watch
	case "cmdline":
		watchFacts = func(ctx context.Context, update func(facts.Talos)) error {
			tf, err := talos.FromCmdline(*f.cmdline)
			if err != nil {
				return err
			}
			update(tf)
			<-ctx.Done()
			return nil
		}
	}

	key, created, err := agentkey.LoadOrCreate(*f.keyFile)
	if err != nil {
		log.Error("no agent key; not starting", "file", *f.keyFile, "err", err)
		return 1
	}
	// The public half is public: the coordinator enrols it from the Node.
	log.Info("agent key", "file", *f.keyFile, "created", created, "public-key", contract.EncodeAgentKey(key.Public().(ed25519.PublicKey)))

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	reg := telemetry.NewRegistry()
	var extra []string
	for p := range strings.SplitSeq(*f.exclude, ",") {
		if p = strings.TrimSpace(p); p != "" {
			extra = append(extra, p)
		}
	}
	agent, err := controller.New(controller.Config{
		NodeName: *f.nodeName, Kubeconfig: *f.kubeconfig, CredentialsPoll: *f.credPoll, Facts: watchFacts, NetNS: *f.netns,
		Rules: rs, Classifier: netaddr.NewClassifier(extra...), Policy: pol, Version: version.Version,
		Key: key, KubeletServingCert: *f.servingCert, Log: log, Metrics: controller.NewMetrics(reg),
	})
	if err != nil {
		log.Error("invalid configuration", "err", err)
		return 2
	}
	if reader != nil {
		reader.Problem = agent.SetFactsProblem // shown by /readyz
	}
	if *f.metricsAddr != "" {
		srv := &telemetry.Server{Addr: *f.metricsAddr, Registry: reg, Ready: agent.Ready, Log: log}
		addr, err := srv.Listen(ctx)
		if err != nil {
			log.Error("cannot serve metrics", "err", err)
			return 1
		}
		log.Info("serving metrics and health", "addr", addr, "authentication", "none")
		if ap, err := netip.ParseAddrPort(addr); err == nil && !ap.Addr().IsLoopback() {
			log.Warn("metrics are served without authentication beyond loopback", "addr", addr)
		}
	}
	log.Info("starting", "version", version.Version, "rules", rs.Names(), "provider-id-policy", pol, "facts", *f.facts, "netns", *f.netns)
	if *f.rulesFile != "" {
		watched := make(chan struct{})
		go func() {
			defer close(watched)
			poll := time.NewTicker(rulesPoll)
			defer poll.Stop()
			watchRules(ctx, *f.rulesFile, optionalRules, rulesText, poll.C, log, stop)
		}()
		defer func() { stop(); <-watched }()
	}
	if err := agent.Run(ctx); err != nil {
		log.Error("stopped", "err", err)
		return 1
	}
	return 0
}
