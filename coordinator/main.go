// Command nodeinit-coordinator is the cluster-side half of talos-nodeinit: a leader-elected
// Deployment that allocates pod CIDRs, grants the labels and taints nodes may not set
// themselves, removes the uninitialized taint, and approves or denies kubelet serving CSRs.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/signal"
	"syscall"
	"time"

	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/leaderelection"

	"github.com/talos-nodeinit/talos-nodeinit/coordinator/config"
	"github.com/talos-nodeinit/talos-nodeinit/coordinator/controller"
	"github.com/talos-nodeinit/talos-nodeinit/pkg/apiclient"
	"github.com/talos-nodeinit/talos-nodeinit/pkg/delegatedauth"
	"github.com/talos-nodeinit/talos-nodeinit/pkg/envflag"
	"github.com/talos-nodeinit/talos-nodeinit/pkg/telemetry"
	"github.com/talos-nodeinit/talos-nodeinit/pkg/version"
)

const envPrefix = "NODEINIT_"

// DefaultConfigFile is where coordinator/deploy mounts the ConfigMap.
const DefaultConfigFile = "/etc/nodeinit/coordinator.yaml"

const usage = `nodeinit-coordinator finalizes Talos nodes: pod CIDRs, granted labels and
taints, the uninitialized taint, and kubelet serving CSRs.

Usage:
  nodeinit-coordinator [run] [flags]           run (the default)
  nodeinit-coordinator validate --config FILE  check a configuration file (or its ConfigMap) and exit
  nodeinit-coordinator explain [flags]         print what the agent and this coordinator would write for a
                                              node's facts (talosctl get … -o yaml), offline
  nodeinit-coordinator version                 print the version (also: --version)

Run 'nodeinit-coordinator <command> --help' for a command's flags. Every flag
can also be set from the environment: --config is NODEINIT_CONFIG.
`

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

func run(args []string, stdout, stderr io.Writer) int {
	cmd := "run"
	if len(args) > 0 && (args[0] == "-h" || args[0] == "--help" || args[0] == "-help") {
		fmt.Fprint(stderr, usage+"\nnodeinit-coordinator run:\n")
		return runCoordinator(args, stdout, stderr)
	}
	if len(args) > 0 && args[0] != "" && args[0][0] != '-' {
		cmd, args = args[0], args[1:]
	}
	switch cmd {
	case "run":
		return runCoordinator(args, stdout, stderr)
	case "validate":
		return validate(args, stdout, stderr)
	case "explain":
		return explainCmd(args, stdout, stderr)
	case "version":
		fmt.Fprintln(stdout, version.String("nodeinit-coordinator"))
		return 0
	case "help":
		fmt.Fprint(stdout, usage)
		return 0
	}
	fmt.Fprintf(stderr, "unknown command %q\nRun 'nodeinit-coordinator --help' for usage.\n", cmd)
	return 2
}

func newFlagSet(name, synopsis string, stderr io.Writer) *flag.FlagSet {
	return envflag.NewFlagSet("nodeinit-coordinator "+name, synopsis, envPrefix, stderr)
}

func parse(fs *flag.FlagSet, args []string) (int, bool) {
	return envflag.ParseCommand(fs, envPrefix, args)
}

func loadConfig(file string) (*config.Config, error) {
	c, err := config.Load(file)
	if err != nil && file == DefaultConfigFile && errors.Is(err, os.ErrNotExist) {
		return config.Parse(nil)
	}
	return c, err
}

func runCoordinator(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("run", "Usage: nodeinit-coordinator run [flags]", stderr)
	configFile := fs.String("config", DefaultConfigFile, "configuration `FILE` (IPAM pools, grant policy, CSR policy); absent at the default path means defaults")
	kubeconfig := fs.String("kubeconfig", "", "kubeconfig `FILE` (default: in-cluster ServiceAccount)")
	namespace := fs.String("lease-namespace", "kube-system", "namespace of the leader Lease")
	leaseName := fs.String("lease-name", "nodeinit-coordinator", "name of the leader Lease")
	hostname, _ := os.Hostname()
	id := fs.String("id", hostname, "this replica's identity in the Lease (the pod name)")
	leaseDuration := fs.Duration("lease-duration", 15*time.Second, "how long a leader's Lease lasts without renewal: the worst-case takeover time")
	renewDeadline := fs.Duration("renew-deadline", 10*time.Second, "how long the leader retries renewing before it gives up and exits")
	retryPeriod := fs.Duration("retry-period", 2*time.Second, "interval between Lease attempts")
	nodeWorkers := fs.Int("node-workers", 64, "how many Nodes are synced at once, each with its kubelet's serving CSRs: a sync mostly waits on the API server, not the CPU (a join's makes two writes in a row)")
	csrWorkers := fs.Int("csr-workers", 16, "how many serving CSRs of requesters that are no node are denied at once (a node's are decided in its Node's sync)")
	qps := fs.Float64("kube-api-qps", 500, "client QPS to the API server (a join costs at most 5 writes and 1 Event; the API server's priority and fairness still applies)")
	burst := fs.Int("kube-api-burst", 1000, "client burst to the API server")
	metricsAddr := fs.String("metrics-addr", "127.0.0.1:10290", "serve /metrics, /healthz and /readyz over plain HTTP, without authentication, on this `ADDRESS`: keep it on loopback (empty: off)")
	secureAddr := fs.String("secure-metrics-addr", "", "serve over HTTPS on this `ADDRESS`: /metrics to callers the API server authenticates (TokenReview) and authorizes to get the non-resource URL /metrics (SubjectAccessReview); /healthz and /readyz to anyone, for probes (empty: off)")
	certFile := fs.String("tls-cert-file", "", "serving certificate `FILE` for --secure-metrics-addr (default: self-signed at start)")
	keyFile := fs.String("tls-private-key-file", "", "its private key `FILE`")
	initEvents := fs.Bool("initialized-events", false, "record a Normal Initialized Event on each Node it initializes (one more API write per join; a clean join is otherwise in the Node itself, the log and the metrics; Warnings are always recorded)")
	logLevel := fs.String("log-level", "info", "debug, info, warn or error")
	logFormat := fs.String("log-format", "text", "text or json")
	envflag.AddVersion(fs, stdout, version.String("nodeinit-coordinator"))
	if code, stop := parse(fs, args); stop {
		return code
	}
	// Every value is checked before anything connects anywhere.
	if err := checkRunFlags(runFlags{
		nodeWorkers: *nodeWorkers, csrWorkers: *csrWorkers, qps: *qps, burst: *burst,
		leaseDuration: *leaseDuration, renewDeadline: *renewDeadline, retryPeriod: *retryPeriod,
		metricsAddr: *metricsAddr, secureAddr: *secureAddr, certFile: *certFile, keyFile: *keyFile,
	}); err != nil {
		return envflag.Fail(fs, err.Error())
	}
	log, err := telemetry.NewLogger(stderr, *logLevel, *logFormat)
	if err != nil {
		return envflag.Fail(fs, err.Error())
	}
	// A misspelt setting would keep its default without a word.
	for _, w := range envflag.Unknown(fs, envPrefix, envflag.Environ()) {
		log.Warn(w)
	}
	defer telemetry.RouteKlog(log)() // from here on client-go logs too, until run returns
	settings, err := loadConfig(*configFile)
	if err != nil {
		log.Error("invalid configuration; not starting", "file", *configFile, "err", err)
		return 1
	}
	var restCfg *rest.Config
	if *kubeconfig != "" {
		restCfg, err = clientcmd.BuildConfigFromFlags("", *kubeconfig)
	} else {
		restCfg, err = rest.InClusterConfig()
	}
	if err != nil {
		log.Error("no API server credentials", "err", err, "hint", "run in-cluster or pass --kubeconfig")
		return 1
	}
	restCfg.QPS, restCfg.Burst = float32(*qps), *burst
	restCfg.UserAgent = "nodeinit-coordinator/" + version.Version
	client, err := kubernetes.NewForConfig(apiclient.Builtin(restCfg))
	if err != nil {
		log.Error("building the client", "err", err)
		return 1
	}
	dyn, err := dynamic.NewForConfig(apiclient.Custom(restCfg))
	if err != nil {
		log.Error("building the client", "err", err)
		return 1
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	reg := telemetry.NewRegistry()
	coord, err := controller.New(controller.Config{
		Client: client, Dynamic: dyn, REST: restCfg, Settings: settings, Namespace: *namespace, LeaseName: *leaseName, Identity: *id,
		LeaseDuration: *leaseDuration, RenewDeadline: *renewDeadline, RetryPeriod: *retryPeriod,
		NodeWorkers: *nodeWorkers, CSRWorkers: *csrWorkers, Log: log, Metrics: controller.NewMetrics(reg), InitializedEvents: *initEvents,
	})
	if err != nil {
		log.Error("invalid configuration", "err", err)
		return 1
	}
	if *metricsAddr != "" {
		srv := &telemetry.Server{Addr: *metricsAddr, Registry: reg, Ready: coord.Ready, Log: log}
		addr, err := srv.Listen(ctx)
		if err != nil {
			log.Error("cannot serve metrics", "err", err)
			return 1
		}
		log.Info("serving metrics and health", "addr", addr, "authentication", "none")
		if ap, err := netip.ParseAddrPort(addr); err == nil && !ap.Addr().IsLoopback() {
			log.Warn("metrics are served without authentication beyond loopback; use --secure-metrics-addr to expose them", "addr", addr)
		}
	}
	if *secureAddr != "" {
		tlsCfg, err := telemetry.ServingTLS(*certFile, *keyFile)
		if err != nil {
			log.Error("cannot serve secure metrics", "err", err)
			return 1
		}
		// The guard's reviews get their own client and rate limit, as k8s.io/apiserver's delegated
		// authentication does (QPS 200, burst 400): made-up tokens never delay Lease renewals or syncs.
		authCfg := rest.CopyConfig(restCfg)
		authCfg.QPS, authCfg.Burst = 200, 400
		authClient, err := kubernetes.NewForConfig(apiclient.Builtin(authCfg))
		if err != nil {
			log.Error("building the client", "err", err)
			return 1
		}
		guard := &delegatedauth.Guard{Client: authClient, Log: log}
		srv := &telemetry.Server{Addr: *secureAddr, Registry: reg, Ready: coord.Ready, Log: log, TLS: tlsCfg, Protect: guard.Wrap, Terse: true}
		addr, err := srv.Listen(ctx)
		if err != nil {
			log.Error("cannot serve secure metrics", "err", err)
			return 1
		}
		log.Info("serving metrics and health over HTTPS", "addr", addr, "authentication", "TokenReview", "authorization", "SubjectAccessReview get /metrics")
	}
	log.Info("starting", "version", version.Version, "id", *id, "ipam", settings.IPAMEnabled(), "attestation-required", settings.AttestationRequired())
	if err := coord.Run(ctx); err != nil {
		log.Error("stopped", "err", err)
		return 1
	}
	log.Info("stopped")
	return 0
}

func validate(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("validate", "Usage: nodeinit-coordinator validate --config FILE", stderr)
	file := fs.String("config", "", "the configuration `FILE` to check")
	if code, stop := parse(fs, args); stop {
		return code
	}
	if *file == "" {
		return envflag.Fail(fs, "--config FILE is required")
	}
	if _, err := config.Load(*file); err != nil {
		fmt.Fprintf(stderr, "invalid:\n%v\n", err)
		return 1
	}
	fmt.Fprintf(stdout, "%s: OK\n", *file)
	return 0
}

// runFlags are the run command's values checked at start.
type runFlags struct {
	nodeWorkers, csrWorkers                   int
	qps                                       float64
	burst                                     int
	leaseDuration, renewDeadline, retryPeriod time.Duration
	metricsAddr, secureAddr                   string
	certFile, keyFile                         string
}

// checkRunFlags refuses values the process would only fail on later, or never notice: client-go's
// leader-election rules, a client that may not send, no workers, an address that cannot be bound.
func checkRunFlags(f runFlags) error {
	var errs []error
	if f.nodeWorkers < 1 {
		errs = append(errs, fmt.Errorf("--node-workers %d: want 1 or more", f.nodeWorkers))
	}
	if f.csrWorkers < 1 {
		errs = append(errs, fmt.Errorf("--csr-workers %d: want 1 or more", f.csrWorkers))
	}
	if !(f.qps > 0) {
		errs = append(errs, fmt.Errorf("--kube-api-qps %v: want more than 0", f.qps))
	}
	if f.burst <= 0 {
		errs = append(errs, fmt.Errorf("--kube-api-burst %d: want more than 0", f.burst))
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"--lease-duration", f.leaseDuration}, {"--renew-deadline", f.renewDeadline}, {"--retry-period", f.retryPeriod}} {
		if d.v <= 0 {
			errs = append(errs, fmt.Errorf("%s %v: want a positive duration", d.name, d.v))
		}
	}
	if f.leaseDuration <= f.renewDeadline {
		errs = append(errs, fmt.Errorf("--lease-duration %v must be longer than --renew-deadline %v", f.leaseDuration, f.renewDeadline))
	}
	if min := time.Duration(leaderelection.JitterFactor * float64(f.retryPeriod)); f.renewDeadline <= min {
		errs = append(errs, fmt.Errorf("--renew-deadline %v must be longer than --retry-period %v × %v (%v)", f.renewDeadline, f.retryPeriod, leaderelection.JitterFactor, min))
	}
	if err := telemetry.CheckAddr(f.metricsAddr); err != nil {
		errs = append(errs, fmt.Errorf("--metrics-addr: %w", err))
	}
	if err := telemetry.CheckAddr(f.secureAddr); err != nil {
		errs = append(errs, fmt.Errorf("--secure-metrics-addr: %w", err))
	}
	if (f.certFile == "") != (f.keyFile == "") {
		errs = append(errs, errors.New("--tls-cert-file and --tls-private-key-file go together: give both, or neither for a self-signed certificate"))
	}
	return errors.Join(errs...)
}
