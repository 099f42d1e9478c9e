package controller_test

import (
	"context"
	"encoding/pem"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/talos-nodeinit/talos-nodeinit/agent/controller"
)

// slowWatches is a TLS proxy to the real API server, as the node, that
// holds back what a watch stream opened before slowFrom carries after it,
// until release (given to slowFrom) is closed: the agent's first watch
// syncs at once (its initial list is a watch stream too, with client-go's
// WatchList) and then delivers late, as under a join storm's load (or
// never, with a nil release); a watch opened later is not held. read is
// closed once a direct read of the Node, after slowFrom, has found it.
type slowWatches struct {
	kubeconfig string
	from       atomic.Pointer[slowSince]
	read       chan struct{}
	readOnce   sync.Once
	watches    atomic.Int32 // watch streams opened
}

type slowSince struct {
	at      time.Time
	release <-chan struct{}
}

func (s *slowWatches) slowFrom(release <-chan struct{}) {
	s.from.Store(&slowSince{at: time.Now(), release: release})
}

func newSlowWatches(t *testing.T, n *node) *slowWatches {
	t.Helper()
	sw := &slowWatches{read: make(chan struct{})}
	upstream, err := url.Parse(cluster.Admin().Host)
	if err != nil {
		t.Fatal(err)
	}
	transport, err := rest.TransportFor(n.id.Config())
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	proxy := &httputil.ReverseProxy{
		Rewrite:   func(r *httputil.ProxyRequest) { r.SetURL(upstream) },
		Transport: transport,
		ModifyResponse: func(resp *http.Response) error {
			switch r := resp.Request; {
			case r.URL.Query().Get("watch") == "true":
				opened := time.Now()
				sw.watches.Add(1)
				resp.Body = delayed(resp.Body, func(at time.Time) (held bool, release <-chan struct{}) {
					if from := sw.from.Load(); from != nil && opened.Before(from.at) && at.After(from.at) {
						return true, from.release
					}
					return false, nil
				}, done)
			case r.Method == http.MethodGet && r.URL.Path == "/api/v1/nodes/"+n.name && resp.StatusCode == http.StatusOK && sw.from.Load() != nil:
				sw.readOnce.Do(func() { close(sw.read) })
			}
			return nil
		},
	}
	srv := httptest.NewUnstartedServer(proxy)
	srv.EnableHTTP2 = true
	srv.StartTLS()
	t.Cleanup(func() {
		close(done)
		srv.CloseClientConnections()
		srv.Close()
		utilnet.CloseIdleConnectionsFor(transport)
	})

	kc := clientcmdapi.NewConfig()
	kc.Clusters["proxy"] = &clientcmdapi.Cluster{Server: srv.URL,
		CertificateAuthorityData: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})}
	kc.AuthInfos["node"] = &clientcmdapi.AuthInfo{ClientCertificate: n.id.CertFile, ClientKey: n.id.CertFile}
	kc.Contexts["proxy"] = &clientcmdapi.Context{Cluster: "proxy", AuthInfo: "node"}
	kc.CurrentContext = "proxy"
	sw.kubeconfig = filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*kc, sw.kubeconfig); err != nil {
		t.Fatal(err)
	}
	return sw
}

// delayed passes body through, each chunk at once or, when hold(its
// arrival) says so, once release is closed (never, if nil).
func delayed(body io.ReadCloser, hold func(time.Time) (bool, <-chan struct{}), done <-chan struct{}) io.ReadCloser {
	d := &delayedBody{body: body, chunks: make(chan chunk, 1024), done: done, closed: make(chan struct{})}
	go func() {
		defer close(d.chunks)
		for {
			buf := make([]byte, 32<<10)
			n, err := body.Read(buf)
			if n > 0 {
				held, release := hold(time.Now())
				select {
				case d.chunks <- chunk{buf[:n], held, release}:
				case <-d.closed:
					return
				case <-done:
					return
				}
			}
			if err != nil {
				return
			}
		}
	}()
	return d
}

type chunk struct {
	b       []byte
	held    bool
	release <-chan struct{}
}

type delayedBody struct {
	body      io.ReadCloser
	chunks    chan chunk
	done      <-chan struct{}
	closed    chan struct{}
	closeOnce sync.Once
	rest      []byte
}

func (d *delayedBody) Read(p []byte) (int, error) {
	if len(d.rest) == 0 {
		var c chunk
		var ok bool
		select {
		case c, ok = <-d.chunks:
		case <-d.closed:
		case <-d.done:
		}
		if !ok {
			return 0, io.EOF
		}
		if c.held {
			select {
			case <-c.release:
			case <-d.closed:
				return 0, io.EOF
			case <-d.done:
				return 0, io.EOF
			}
		}
		d.rest = c.b
	}
	n := copy(p, d.rest)
	d.rest = d.rest[n:]
	return n, nil
}

func (d *delayedBody) Close() error {
	d.closeOnce.Do(func() { close(d.closed) })
	return d.body.Close()
}

// A watch that is merely slow is not a broken one. In a join storm the
// API server delivers watch events seconds late; an agent that found its
// Node by a direct read before its watch delivered it used to restart the
// watch at once (about 200 of 500 agents in a bench storm: a new watch, its
// initial list, and a warning each). The watch is restarted only once the
// Node has been seen to exist for watchCheckAfter without the watch
// delivering it.
func TestSlowWatchIsNotRestarted(t *testing.T) {
	n, a := slowWatchNode(t, "slow-watch-node", "10.0.0.31", true)
	n.waitNode(t, 20*time.Second, "the report, from the slow watch", func(node *corev1.Node) bool {
		return hasAddress(node, corev1.NodeExternalIP, "203.0.113.10")
	})
	if got := testutil.ToFloat64(a.metrics.WatchRestarts); got != 0 {
		t.Fatalf("the agent restarted a watch that was only slow (%v restarts)", got)
	}
}

// The safety net still holds: a watch that never delivers the Node is
// restarted, and the agent joins.
func TestStuckWatchIsRestarted(t *testing.T) {
	n, a := slowWatchNode(t, "stuck-watch-node", "10.0.0.32", false)
	n.waitNode(t, 30*time.Second, "the report, after the watch's restart", func(node *corev1.Node) bool {
		return hasAddress(node, corev1.NodeExternalIP, "203.0.113.10")
	})
	if got := testutil.ToFloat64(a.metrics.WatchRestarts); got < 1 {
		t.Fatalf("the report was written without a restart of a watch that delivers nothing (%v restarts)", got)
	}
}

// slowWatchNode starts an agent with its Node absent, and creates the Node
// once the agent's first watch is open and the agent has found the Node
// missing. That watch holds back the Node: until the agent's direct read
// (5 s after it first missed the Node) has found it, when the watch is
// slow; for good when it is stuck.
func slowWatchNode(t *testing.T, name, ip string, slow bool) (*node, *agent) {
	n := newNode(t, name, ip, metal(name))
	registered, err := n.admin.CoreV1().Nodes().Get(t.Context(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := n.admin.CoreV1().Nodes().Delete(t.Context(), name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	sw := newSlowWatches(t, n)
	a := n.startAgent(t, "", func(c *controller.Config) { c.Kubeconfig = sw.kubeconfig })
	if !eventually(t, 20*time.Second, func() bool {
		err := a.Ready()
		return sw.watches.Load() > 0 && err != nil && strings.Contains(err.Error(), "to be registered by the kubelet")
	}) {
		t.Fatalf("the agent did not find its Node missing through its watch: %v", a.Ready())
	}
	var release <-chan struct{} // stuck: never
	if slow {
		release = sw.read
	}
	sw.slowFrom(release)
	registered.ResourceVersion, registered.UID = "", ""
	if _, err := n.admin.CoreV1().Nodes().Create(context.Background(), registered, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return n, a
}
