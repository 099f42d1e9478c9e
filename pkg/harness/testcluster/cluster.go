// Package testcluster runs a real Kubernetes control plane for tests and the
// demo: etcd, kube-apiserver with Node,RBAC authorization and NodeRestriction,
// and optionally kube-controller-manager running the CSR signer (and any
// controllers Options.Controllers adds). All of it listens on 127.0.0.1, and
// all of it stops when the cluster is closed or the test process dies.
package testcluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/talos-nodeinit/talos-nodeinit/pkg/harness/daemon"
)

// Options select what a cluster runs.
// APIServerVIP and APIServerName are in the API server's certificate, as a
// Talos shared VIP and cluster endpoint name are (nothing listens on them).
const (
	APIServerVIP  = "10.0.7.200"
	APIServerName = "api.lb.example.com"
)

type Options struct {
	// ControllerManager starts kube-controller-manager with only the
	// csrsigning controller, so approved CSRs get certificates.
	ControllerManager bool
	// Controllers are kube-controller-manager controllers to run besides
	// csrsigning (implies ControllerManager), for workloads run by a real
	// kubelet: deployment and replicaset for a Deployment's pods,
	// root-ca-cert-publisher for the kube-root-ca.crt ConfigMap their
	// service-account token volumes need, serviceaccount for the default
	// ServiceAccounts. With any, kube-controller-manager also gets the
	// cluster CA (--root-ca-file) and the service-account signing key.
	Controllers []string
	// AuditLog makes the API server log every mutating request (see Audit).
	AuditLog bool
	// ServiceCIDRs is --service-cluster-ip-range (default dual-stack).
	ServiceCIDRs string
	// ExtraAPIServerArgs are appended to kube-apiserver's flags.
	ExtraAPIServerArgs []string
	// ExtraControllerManagerArgs are appended to kube-controller-manager's.
	ExtraControllerManagerArgs []string
	// Log receives progress lines; nil means stderr.
	Log io.Writer
	// AfterTests, for Main, stops what the package's tests share besides
	// the cluster (testnode.Close), before goroutines are checked.
	AfterTests func()
}

// DefaultServiceCIDRs is the service range a cluster uses unless told otherwise.
const DefaultServiceCIDRs = "10.96.0.0/16,fd00:10:96::/112"

// Cluster is a running control plane.
type Cluster struct {
	dir  string
	ca   *authority
	opts Options
	log  io.Writer

	host      string // https://127.0.0.1:port
	etcd      *daemon.Process
	apiserver *daemon.Process
	kcm       *daemon.Process
	admin     *rest.Config

	mu        sync.Mutex
	closed    bool
	StartedIn time.Duration // wall time from Start to /readyz
}

// Start builds (or finds) the binaries and starts a control plane.
func Start(ctx context.Context, opts Options) (*Cluster, error) {
	began := time.Now()
	bins, err := BinDir()
	if err != nil {
		return nil, err
	}
	if opts.ServiceCIDRs == "" {
		opts.ServiceCIDRs = DefaultServiceCIDRs
	}
	logw := opts.Log
	if logw == nil {
		logw = os.Stderr
	}
	// Short paths: tests put unix sockets under here too.
	dir, err := os.MkdirTemp("", "tc-")
	if err != nil {
		return nil, err
	}
	c := &Cluster{dir: dir, opts: opts, log: logw}
	if err := c.start(ctx, bins); err != nil {
		tails := c.LogTails(30)
		c.Close()
		return nil, fmt.Errorf("%w\n%s", err, tails)
	}
	c.StartedIn = time.Since(began)
	fmt.Fprintf(logw, "testcluster: control plane ready at %s in %s (dir %s)\n", c.host, c.StartedIn.Round(time.Millisecond), dir)
	return c, nil
}

func (c *Cluster) start(ctx context.Context, bins string) error {
	ca, err := newAuthority()
	if err != nil {
		return err
	}
	c.ca = ca
	if err := c.writePKI(); err != nil {
		return err
	}
	if err := c.startEtcd(ctx, bins); err != nil {
		return err
	}
	if err := c.startAPIServer(ctx, bins); err != nil {
		return err
	}
	if c.opts.ControllerManager || len(c.opts.Controllers) > 0 {
		if err := c.startControllerManager(bins); err != nil {
			return err
		}
	}
	return nil
}

func (c *Cluster) path(name string) string { return filepath.Join(c.dir, name) }

func (c *Cluster) writePKI() error {
	files := map[string][]byte{"ca.crt": c.ca.certPEM, "ca.key": c.ca.keyPEM}
	servCert, servKey, err := c.ca.issue(leaf{
		commonName: "kube-apiserver", server: true,
		// As on Talos, the certificate also names the cluster endpoint and a
		// shared VIP (APIServerVIP, APIServerName): addresses and names no
		// node certificate may carry.
		dnsNames: []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc", APIServerName},
		ips:      []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback, net.ParseIP("10.96.0.1"), net.ParseIP(APIServerVIP)},
	})
	if err != nil {
		return err
	}
	files["apiserver.crt"], files["apiserver.key"] = servCert, servKey
	adminCert, adminKey, err := c.ca.issue(leaf{commonName: "admin", organization: []string{"system:masters"}})
	if err != nil {
		return err
	}
	files["admin.crt"], files["admin.key"] = adminCert, adminKey
	saPriv, saPub, err := newServiceAccountKey()
	if err != nil {
		return err
	}
	files["sa.key"], files["sa.pub"] = saPriv, saPub
	files["audit-policy.yaml"] = []byte(auditPolicy)
	for name, data := range files {
		if err := os.WriteFile(c.path(name), data, 0o600); err != nil {
			return err
		}
	}
	return nil
}

// startEtcd starts etcd, retrying with new ports if another process grabbed one.
func (c *Cluster) startEtcd(ctx context.Context, bins string) error {
	var lastErr error
	for attempt := 0; attempt < 3; attempt++ {
		clientPort, peerPort := freePort(), freePort()
		client := "http://127.0.0.1:" + strconv.Itoa(clientPort)
		peer := "http://127.0.0.1:" + strconv.Itoa(peerPort)
		c.etcd = &daemon.Process{
			Name: "etcd", LogPath: c.path("etcd.log"),
			Argv: []string{filepath.Join(bins, "etcd"),
				"--name=default", "--data-dir=" + c.path("etcd-data"),
				"--listen-client-urls=" + client, "--advertise-client-urls=" + client,
				"--listen-peer-urls=" + peer, "--initial-advertise-peer-urls=" + peer,
				"--initial-cluster=default=" + peer,
				"--unsafe-no-fsync", "--log-level=warn", "--quota-backend-bytes=8589934592",
			},
		}
		if lastErr = c.etcd.Start(); lastErr != nil {
			return lastErr
		}
		lastErr = waitFor(ctx, 30*time.Second, c.etcd, func() error {
			resp, err := http.Get(client + "/health")
			if err != nil {
				return err
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				return fmt.Errorf("etcd /health: %s", resp.Status)
			}
			return nil
		})
		if lastErr == nil {
			return nil
		}
		c.etcd.Stop(syscall.SIGKILL, time.Second)
	}
	return fmt.Errorf("etcd did not become healthy: %w", lastErr)
}

func (c *Cluster) etcdURL() string {
	for _, a := range c.etcd.Argv[1:] {
		if v, ok := strings.CutPrefix(a, "--listen-client-urls="); ok {
			return v
		}
	}
	return ""
}

func (c *Cluster) startAPIServer(ctx context.Context, bins string) error {
	var lastErr error
	for attempt := 0; attempt < 3; attempt++ {
		port := freePort()
		c.host = "https://127.0.0.1:" + strconv.Itoa(port)
		args := []string{
			"--etcd-servers=" + c.etcdURL(),
			"--bind-address=127.0.0.1", "--advertise-address=127.0.0.1",
			"--secure-port=" + strconv.Itoa(port),
			"--cert-dir=" + c.path("apiserver-certs"),
			"--tls-cert-file=" + c.path("apiserver.crt"), "--tls-private-key-file=" + c.path("apiserver.key"),
			"--client-ca-file=" + c.path("ca.crt"),
			"--service-account-key-file=" + c.path("sa.pub"),
			"--service-account-signing-key-file=" + c.path("sa.key"),
			"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
			"--authorization-mode=Node,RBAC",
			"--enable-admission-plugins=NodeRestriction",
			"--endpoint-reconciler-type=none",
			"--service-cluster-ip-range=" + c.opts.ServiceCIDRs,
			"--profiling=false",
		}
		if c.opts.AuditLog {
			args = append(args,
				"--audit-policy-file="+c.path("audit-policy.yaml"),
				"--audit-log-path="+c.AuditLogPath(),
				"--audit-log-format=json", "--audit-log-maxbackup=0")
		}
		args = append(args, c.opts.ExtraAPIServerArgs...)
		c.apiserver = &daemon.Process{Name: "kube-apiserver", Argv: append([]string{filepath.Join(bins, "kube-apiserver")}, args...), LogPath: c.path("kube-apiserver.log")}
		if err := c.writeAdminKubeconfig(); err != nil {
			return err
		}
		if lastErr = c.apiserver.Start(); lastErr != nil {
			return lastErr
		}
		if lastErr = c.waitReady(ctx, 60*time.Second); lastErr == nil {
			return nil
		}
		c.apiserver.Stop(syscall.SIGKILL, time.Second)
	}
	return fmt.Errorf("kube-apiserver did not become ready: %w", lastErr)
}

func (c *Cluster) waitReady(ctx context.Context, timeout time.Duration) error {
	cs, err := kubernetes.NewForConfig(c.admin)
	if err != nil {
		return err
	}
	return waitFor(ctx, timeout, c.apiserver, func() error {
		_, err := cs.Discovery().RESTClient().Get().AbsPath("/readyz").Timeout(2 * time.Second).DoRaw(ctx)
		return err
	})
}

func (c *Cluster) startControllerManager(bins string) error {
	args := []string{
		"--kubeconfig=" + c.AdminKubeconfig(),
		"--controllers=" + strings.Join(append([]string{"csrsigning"}, c.opts.Controllers...), ","),
		"--cluster-signing-cert-file=" + c.path("ca.crt"),
		"--cluster-signing-key-file=" + c.path("ca.key"),
		"--leader-elect=false", "--secure-port=0",
		"--use-service-account-credentials=false",
	}
	args = append(args, c.opts.ExtraControllerManagerArgs...)
	if len(c.opts.Controllers) > 0 {
		args = append(args, "--root-ca-file="+c.path("ca.crt"), "--service-account-private-key-file="+c.path("sa.key"))
	}
	c.kcm = &daemon.Process{
		Name: "kube-controller-manager", Argv: append([]string{filepath.Join(bins, "kube-controller-manager")}, args...),
		LogPath: c.path("kube-controller-manager.log"),
	}
	return c.kcm.Start()
}

func (c *Cluster) writeAdminKubeconfig() error {
	c.admin = &rest.Config{
		Host: c.host,
		TLSClientConfig: rest.TLSClientConfig{
			CAFile: c.path("ca.crt"), CertFile: c.path("admin.crt"), KeyFile: c.path("admin.key"),
		},
		QPS: 1000, Burst: 2000,
	}
	return writeKubeconfig(c.AdminKubeconfig(), c.host, c.ca.certPEM, "admin", c.path("admin.crt"), c.path("admin.key"), "")
}

// writeKubeconfig writes a kubeconfig using a client certificate (by path, so
// that a rotated file is what the next reader sees) or a bearer token.
func writeKubeconfig(path, host string, caPEM []byte, user, certFile, keyFile, token string) error {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["test"] = &clientcmdapi.Cluster{Server: host, CertificateAuthorityData: caPEM}
	cfg.AuthInfos[user] = &clientcmdapi.AuthInfo{ClientCertificate: certFile, ClientKey: keyFile, Token: token}
	cfg.Contexts["test"] = &clientcmdapi.Context{Cluster: "test", AuthInfo: user}
	cfg.CurrentContext = "test"
	return clientcmd.WriteToFile(*cfg, path)
}

// Admin returns a rest.Config with cluster-admin (system:masters) rights.
func (c *Cluster) Admin() *rest.Config { return rest.CopyConfig(c.admin) }

// AdminKubeconfig is the path of a kubeconfig file for Admin.
func (c *Cluster) AdminKubeconfig() string { return c.path("admin.kubeconfig") }

// Host is the API server's URL.
func (c *Cluster) Host() string { return c.host }

// CAPEM is the cluster CA certificate; it also signs kubelet serving certs.
func (c *Cluster) CAPEM() []byte { return c.ca.certPEM }

// Dir is the cluster's working directory, removed on Close.
func (c *Cluster) Dir() string { return c.dir }

// StopAPIServer stops kube-apiserver (SIGTERM); StartAPIServer brings it back
// on the same port. Together they inject an API server restart.
func (c *Cluster) StopAPIServer() { c.apiserver.Stop(syscall.SIGTERM, 20*time.Second) }

// StartAPIServer restarts a stopped kube-apiserver and waits for /readyz.
func (c *Cluster) StartAPIServer(ctx context.Context) error {
	if err := c.apiserver.Start(); err != nil {
		return err
	}
	return c.waitReady(ctx, 60*time.Second)
}

// StopEtcd stops etcd; StartEtcd brings it back with the same data.
func (c *Cluster) StopEtcd() { c.etcd.Stop(syscall.SIGTERM, 20*time.Second) }

// StartEtcd restarts a stopped etcd.
func (c *Cluster) StartEtcd() error { return c.etcd.Start() }

// LogTails returns the last n lines of every component's log.
func (c *Cluster) LogTails(n int) string {
	var b strings.Builder
	for _, p := range []*daemon.Process{c.etcd, c.apiserver, c.kcm} {
		if p == nil {
			continue
		}
		b.WriteString(p.Report(n))
	}
	return b.String()
}

// Close stops every component and removes the cluster's directory. It is
// safe to call more than once.
func (c *Cluster) Close() {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return
	}
	c.closed = true
	c.mu.Unlock()
	for _, p := range []*daemon.Process{c.kcm, c.apiserver, c.etcd} {
		if p != nil {
			p.Stop(syscall.SIGTERM, 10*time.Second)
		}
	}
	if os.Getenv("TESTCLUSTER_KEEP_DIR") == "" {
		_ = os.RemoveAll(c.dir)
	}
}

// waitFor polls check until it succeeds, the timeout passes, or the process
// exits (then there is nothing to wait for).
func waitFor(ctx context.Context, timeout time.Duration, p *daemon.Process, check func() error) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var err error
	for {
		if err = check(); err == nil {
			return nil
		}
		if p.Exited() {
			return fmt.Errorf("%s exited: %w", p.Name, err)
		}
		select {
		case <-ctx.Done():
			return errors.Join(ctx.Err(), err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// freePort asks the kernel for an unused loopback port. Another process may
// take it before the component binds it; callers retry on that.
func freePort() int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// PIDs are the running components' process IDs by name (etcd,
// kube-apiserver, kube-controller-manager), for measuring their CPU.
func (c *Cluster) PIDs() map[string]int {
	out := map[string]int{}
	for _, p := range []*daemon.Process{c.etcd, c.apiserver, c.kcm} {
		if p != nil && p.Pid() != 0 {
			out[p.Name] = p.Pid()
		}
	}
	return out
}
