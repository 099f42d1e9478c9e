// Package kubecreds loads a kubeconfig whose client certificate is a file the
// kubelet rotates (Talos's kubeconfig-kubelet points at
// /var/lib/kubelet/pki/kubelet-client-current.pem), and notices when it is
// replaced, so a long-running client keeps working without a restart.
//
// client-go rereads certificate files only every five minutes; an agent that
// relied on that would fail for up to five minutes once the old certificate
// expired. Here the files are read into the config, and a new config is
// produced as soon as their content changes.
package kubecreds

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"fmt"
	"os"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// Loaded is one reading of the credentials.
type Loaded struct {
	Config *rest.Config
	// Fingerprint changes whenever the kubeconfig, certificate, key or CA do.
	Fingerprint string
}

// Load reads the kubeconfig and every file it references, inlining them.
func Load(path string) (Loaded, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return Loaded{}, fmt.Errorf("reading kubeconfig: %w", err)
	}
	cfg, err := clientcmd.RESTConfigFromKubeConfig(raw)
	if err != nil {
		return Loaded{}, fmt.Errorf("kubeconfig %s: %w", path, err)
	}
	sum := sha256.New()
	sum.Write(raw)
	inline := func(file string, data *[]byte) error {
		if file == "" {
			return nil
		}
		b, err := os.ReadFile(file)
		if err != nil {
			return fmt.Errorf("kubeconfig %s references %w", path, err)
		}
		*data = b
		return nil
	}
	t := &cfg.TLSClientConfig
	for _, f := range []struct {
		file *string
		data *[]byte
	}{{&t.CertFile, &t.CertData}, {&t.KeyFile, &t.KeyData}, {&t.CAFile, &t.CAData}} {
		if err := inline(*f.file, f.data); err != nil {
			return Loaded{}, err
		}
		*f.file = ""
		sum.Write(*f.data)
		sum.Write([]byte{0})
	}
	if len(t.CertData) > 0 {
		if _, err := tls.X509KeyPair(t.CertData, t.KeyData); err != nil {
			return Loaded{}, fmt.Errorf("kubeconfig %s: client certificate and key: %w", path, err)
		}
	}
	return Loaded{Config: cfg, Fingerprint: hex.EncodeToString(sum.Sum(nil))}, nil
}

// Watch rereads the credentials every interval and sends them whenever the
// fingerprint differs from the last one (starting with last). A reading that
// fails, as during a rotation that has not finished, is retried at the next
// tick; the last good credentials stay in use. The channel closes with ctx.
func Watch(ctx context.Context, path string, interval time.Duration, last string) <-chan Loaded {
	out := make(chan Loaded)
	go func() {
		defer close(out)
		tick := time.NewTicker(interval)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			l, err := Load(path)
			if err != nil || l.Fingerprint == last {
				continue
			}
			select {
			case out <- l:
				last = l.Fingerprint
			case <-ctx.Done():
				return
			}
		}
	}()
	return out
}
