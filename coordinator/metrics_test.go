package main

import (
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/talos-nodeinit/talos-nodeinit/pkg/harness/syncbuf"
)

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// The real binary, as its ServiceAccount with the shipped RBAC, serves
// /metrics on --secure-metrics-addr only to callers the API server
// authenticates and RBAC allows to get /metrics, as Kubernetes components
// do; /healthz and /readyz stay open there for the kubelet's probes.
func TestSecureMetrics(t *testing.T) {
	admin := kubernetes.NewForConfigOrDie(cluster.Admin())
	kc := coordinatorKubeconfig(t, "coordinator-secure-metrics")
	// A scraper bound to the shipped reader role, and one bound to nothing.
	scraper, err := cluster.ServiceAccountIdentity(t.Context(), "monitoring", "prometheus")
	if err != nil {
		t.Fatal(err)
	}
	stranger, err := cluster.ServiceAccountIdentity(t.Context(), "monitoring", "stranger")
	if err != nil {
		t.Fatal(err)
	}
	_, err = admin.RbacV1().ClusterRoleBindings().Create(t.Context(), &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "prometheus-nodeinit-coordinator-metrics"},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "nodeinit-coordinator-metrics-reader"},
		Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Namespace: "monitoring", Name: "prometheus"}},
	}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}

	cfg := filepath.Join(t.TempDir(), "coordinator.yaml")
	if err := os.WriteFile(cfg, []byte("ipam: {ipv4Pool: 10.244.0.0/16}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	plain, secure := freeAddr(t), freeAddr(t)
	var logs syncbuf.Buffer
	cmd := exec.Command(coordinatorBinary(t), "run", "--kubeconfig", kc, "--config", cfg, "--id", "secure-metrics",
		"--lease-name", "secure-metrics", "--metrics-addr", plain, "--secure-metrics-addr", secure)
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("coordinator logs:\n%s", logs.String())
		}
	}()

	// The certificate is self-signed; what is checked here is who may read.
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	get := func(url, token string) (int, string) {
		t.Helper()
		req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, url, nil)
		if err != nil {
			t.Fatal(err)
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := client.Do(req)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	until(t, 20*time.Second, "the secure listener serving /healthz", func() bool {
		code, _ := get("https://"+secure+"/healthz", "")
		return code == http.StatusOK
	})

	for _, tc := range []struct {
		name, path, token string
		want              int
	}{
		{"no token", "/metrics", "", http.StatusUnauthorized},
		{"a token the API server does not know", "/metrics", "not-a-token", http.StatusUnauthorized},
		{"a valid token without the /metrics permission", "/metrics", stranger.BearerToken, http.StatusForbidden},
		{"a token bound to nodeinit-coordinator-metrics-reader", "/metrics", scraper.BearerToken, http.StatusOK},
		{"the reader's token a second time (cached)", "/metrics", scraper.BearerToken, http.StatusOK},
		{"probes need no token: /healthz", "/healthz", "", http.StatusOK},
	} {
		code, body := get("https://"+secure+tc.path, tc.token)
		if code != tc.want {
			t.Errorf("%s: GET %s = %d %q, want %d", tc.name, tc.path, code, body, tc.want)
		}
		if tc.want == http.StatusOK && tc.path == "/metrics" && !strings.Contains(body, "nodeinit_coordinator_") {
			t.Errorf("%s: no coordinator metrics in the body", tc.name)
		}
	}
	// /readyz answers without a token (ready or not: never 401/403).
	if code, body := get("https://"+secure+"/readyz", ""); code != http.StatusOK && code != http.StatusServiceUnavailable {
		t.Errorf("/readyz without a token: %d %q", code, body)
	}
	// Plain HTTP is the loopback listener, without authentication.
	if code, body := get("http://"+plain+"/metrics", ""); code != http.StatusOK || !strings.Contains(body, "nodeinit_coordinator_") {
		t.Errorf("plain loopback /metrics: %d", code)
	}
	// Plain HTTP to the secure port is refused.
	if code, _ := get("http://"+secure+"/metrics", scraper.BearerToken); code == http.StatusOK {
		t.Error("the secure port answered plain HTTP")
	}
}

// The default is loopback: a coordinator started without --metrics-addr
// does not listen on the node's other addresses.
func TestMetricsDefaultIsLoopback(t *testing.T) {
	code, _, errOut := runCmd("run", "--help")
	if code != 0 || !strings.Contains(errOut, `(default "127.0.0.1:10290")`) {
		t.Errorf("--metrics-addr default: %s", errOut)
	}
}
