package talosnode

import (
	"context"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/pem"
	"fmt"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/talos-nodeinit/talos-nodeinit/pkg/harness/gobuild"
)

func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	return root
}

func selfSignedCA(t *testing.T, cn string, key any, pub any) string {
	t.Helper()
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: cn, Organization: []string{cn}}, NotBefore: time.Now().Add(-time.Hour),
		NotAfter: time.Now().Add(24 * time.Hour), IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, pub, key)
	if err != nil {
		t.Fatal(err)
	}
	return base64.StdEncoding.EncodeToString(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))
}

// workerConfig is a worker's v1alpha1 machine config for container mode,
// as `talosctl gen config` would write it, pointing at endpoint.
// caPEM is the cluster's CA (nil: a fresh one): Talos's kubelet service
// removes a client certificate the cluster CA did not sign.
func workerConfig(t *testing.T, name, endpoint string, caPEM []byte) []byte {
	t.Helper()
	osPub, osKey, _ := ed25519.GenerateKey(rand.Reader)
	k8sKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	ca := selfSignedCA(t, "kubernetes", k8sKey, &k8sKey.PublicKey)
	if caPEM != nil {
		ca = base64.StdEncoding.EncodeToString(caPEM)
	}
	return fmt.Appendf(nil, `version: v1alpha1
debug: false
persist: true
machine:
  type: worker
  token: abcdef.0123456789abcdef
  ca:
    crt: %s
    key: ""
  certSANs: []
  kubelet:
    image: ghcr.io/siderolabs/kubelet:v1.37.0
  network:
    hostname: %s
  features:
    kubePrism:
      enabled: false
    hostDNS:
      enabled: true
      forwardKubeDNSToHost: true
  install:
    disk: /dev/sda
  # Nothing is pulled from outside: every registry is mirrored to a port
  # nothing listens on inside the node.
  registries:
    mirrors:
      ghcr.io: {endpoints: ["http://127.0.0.1:5999"]}
      registry.k8s.io: {endpoints: ["http://127.0.0.1:5999"]}
      docker.io: {endpoints: ["http://127.0.0.1:5999"]}
cluster:
  id: dGVzdA==
  secret: c2VjcmV0
  controlPlane:
    endpoint: %s
  clusterName: talosnode
  network:
    dnsDomain: cluster.local
    podSubnets: [10.244.0.0/16]
    serviceSubnets: [10.96.0.0/12]
  token: abcdef.0123456789abcdef
  ca:
    crt: %s
    key: ""
`, selfSignedCA(t, "talos", osKey, osPub), name, endpoint, ca)
}

// Talos's own machined (v1.14.1) boots in container mode, starts its
// system containerd and the CRI, reads the extension as Talos's installer
// lays it out, and registers ext-nodeinit-agent with the dependencies the
// shipped spec declares. Talos 1.14 supports ExtensionServiceConfig (which
// carries our rules) only for a service that declares `configuration:
// true`; the real machined shows whether the shipped spec does: the
// service must wait for its extension service config.
func TestRealMachinedRegistersTheExtension(t *testing.T) {
	if os.Getuid() != 0 {
		t.Fatal("needs root: namespaces, mounts and veths (make e2e-talos runs as root)")
	}
	root := repoRoot(t)
	parts := Build(t, root)
	agent := gobuild.Binary(t, filepath.Join(root, "agent"))
	spec, err := os.ReadFile(filepath.Join(root, "extension/nodeinit-agent.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	n := Start(t, parts, Config{
		Name: "talos-w1", Address: "10.231.0.2",
		MachineCfg: workerConfig(t, "talos-w1", "https://10.231.0.1:6443", nil),
		Extensions: []Extension{{Name: "nodeinit-agent", Spec: spec, Files: map[string]string{"nodeinit-agent": agent}}},
	})
	ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
	defer cancel()
	for _, want := range [][]string{
		{"service[containerd](Running): Health check successful"}, // system containerd 2.x, Talos's config
		{"service[cri](Running): Health check successful"},        // the CRI containerd
	} {
		line, err := n.WaitConsole(ctx, want...)
		if err != nil {
			t.Fatal(err)
		}
		t.Log(line)
	}
	line, err := n.WaitConsole(ctx, "service[ext-nodeinit-agent](Waiting): Waiting for")
	if err != nil {
		t.Fatal(err)
	}
	t.Log(line)
	for _, want := range []string{`service "kubelet"`, `file "/etc/kubernetes/kubeconfig-kubelet" to exist`, `file "/system/run/machined/machine.sock" to exist`, "network",
		"extension service config"} {
		if !strings.Contains(line, want) {
			t.Errorf("machined's ext-nodeinit-agent does not wait for %s: %s", want, line)
		}
	}
}
