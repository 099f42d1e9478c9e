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
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"syscall"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// Loaded is one reading of the credentials.
type Loaded struct {
	Config *rest.Config
	// Fingerprint changes whenever the kubeconfig, certificate, key or CA do.
	Fingerprint string
	// files are the kubeconfig and the files it references, for stamp;
	// stamped is their stamp as Load read them (taken from each file before
	// reading it, so a change made during the reading differs from it).
	files   []string
	stamped string
}

// stamp identifies the files' versions by inode, size and modification
// time: a cheap check before rereading and parsing them (a rotation by
// rename or rewrite changes it).
func stamp(files []string) string {
	var b []byte
	for _, f := range files {
		st, err := os.Stat(f)
		if err != nil {
			return "" // unreadable: reread, and let Load say why
		}
		b = appendStamp(b, f, st)
	}
	return string(b)
}

func appendStamp(b []byte, name string, st os.FileInfo) []byte {
	ino := uint64(0)
	if sys, ok := st.Sys().(*syscall.Stat_t); ok {
		ino = sys.Ino
	}
	return fmt.Appendf(b, "%s:%d:%d:%d;", name, ino, st.Size(), st.ModTime().UnixNano())
}

// readStamped reads a file and appends its stamp, taken from the open file
// before reading it: the stamp of the version read, or of an older one.
func readStamped(name string, stamped *[]byte) ([]byte, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	*stamped = appendStamp(*stamped, name, st)
	return io.ReadAll(f)
}

// complete refuses a kubeconfig caught mid-write. Neither the kubelet nor
// Talos (1.14, controllers/k8s/kubelet_kubeconfig.go) write it atomically,
// and a truncated file can still parse: it must name its current context,
// and that context a cluster with a server and a user with credentials
// (Talos's own check, plus the fields a client needs).
func complete(raw []byte) error {
	kc, err := clientcmd.Load(raw)
	if err != nil {
		return err
	}
	ctx := kc.Contexts[kc.CurrentContext]
	if kc.CurrentContext == "" || ctx == nil {
		return errors.New("no current context (being written?)")
	}
	cluster, user := kc.Clusters[ctx.Cluster], kc.AuthInfos[ctx.AuthInfo]
	switch {
	case cluster == nil || cluster.Server == "":
		return fmt.Errorf("context %q has no cluster with a server (being written?)", kc.CurrentContext)
	case user == nil:
		return fmt.Errorf("context %q has no user (being written?)", kc.CurrentContext)
	case (user.ClientCertificate == "" && len(user.ClientCertificateData) == 0) != (user.ClientKey == "" && len(user.ClientKeyData) == 0):
		return fmt.Errorf("user %q has a client certificate without a key, or a key without one (being written?)", ctx.AuthInfo)
	case user.ClientCertificate == "" && len(user.ClientCertificateData) == 0 && user.Token == "" && user.TokenFile == "" && user.Exec == nil:
		return fmt.Errorf("user %q has no credentials (being written?)", ctx.AuthInfo)
	}
	return nil
}

// Load reads the kubeconfig and every file it references, inlining them.
func Load(path string) (Loaded, error) {
	var stamped []byte
	raw, err := readStamped(path, &stamped)
	if err != nil {
		return Loaded{}, fmt.Errorf("reading kubeconfig: %w", err)
	}
	if err := complete(raw); err != nil {
		return Loaded{}, fmt.Errorf("kubeconfig %s: %w", path, err)
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
		b, err := readStamped(file, &stamped)
		if err != nil {
			return fmt.Errorf("kubeconfig %s references %w", path, err)
		}
		*data = b
		return nil
	}
	files := []string{path}
	t := &cfg.TLSClientConfig
	hasCert, hasCA := t.CertFile != "" || len(t.CertData) > 0, t.CAFile != "" || len(t.CAData) > 0
	for _, f := range []struct {
		file *string
		data *[]byte
	}{{&t.CertFile, &t.CertData}, {&t.KeyFile, &t.KeyData}, {&t.CAFile, &t.CAData}} {
		if err := inline(*f.file, f.data); err != nil {
			return Loaded{}, err
		}
		if *f.file != "" {
			files = append(files, *f.file)
		}
		*f.file = ""
		sum.Write(*f.data)
		sum.Write([]byte{0})
	}
	// A referenced file caught mid-write (empty, or cut) is no credential.
	if hasCert {
		if _, err := tls.X509KeyPair(t.CertData, t.KeyData); err != nil {
			return Loaded{}, fmt.Errorf("kubeconfig %s: client certificate and key: %w", path, err)
		}
	}
	if hasCA && !x509.NewCertPool().AppendCertsFromPEM(t.CAData) {
		return Loaded{}, fmt.Errorf("kubeconfig %s: the certificate authority holds no certificate (being written?)", path)
	}
	return Loaded{Config: cfg, Fingerprint: hex.EncodeToString(sum.Sum(nil)), files: files, stamped: string(stamped)}, nil
}

// Watch rereads the credentials every interval and sends them whenever the
// fingerprint differs from the last one (starting with from, the reading
// in use; a zero Loaded if none). A reading that fails, as during a
// rotation that has not finished, is retried at the next tick; the last
// good credentials stay in use. The channel closes with ctx. Files whose
// inode, size and modification time are unchanged since the last reading
// (from's included) are not reread.
func Watch(ctx context.Context, path string, interval time.Duration, from Loaded) <-chan Loaded {
	tick := time.NewTicker(interval)
	context.AfterFunc(ctx, tick.Stop)
	return watch(ctx, path, tick.C, from)
}

// watch is Watch looking at the files at every value from looks: a test
// sends them itself, and knows a look has ended when the next is taken.
func watch(ctx context.Context, path string, looks <-chan time.Time, from Loaded) <-chan Loaded {
	out := make(chan Loaded)
	go func() {
		defer close(out)
		files, seen, last := from.files, from.stamped, from.Fingerprint
		for {
			select {
			case <-ctx.Done():
				return
			case <-looks:
			}
			if seen != "" && stamp(files) == seen {
				continue
			}
			l, err := Load(path)
			if err != nil {
				continue
			}
			files, seen = l.files, l.stamped
			if l.Fingerprint == last {
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

// NodeName is the node name in the client certificate (its common name,
// system:node:<name>): the identity the API server authenticates, and
// the only Node NodeRestriction lets these credentials write. It is how
// an agent that machined refuses learns its name.
func (l Loaded) NodeName() (string, error) {
	if l.Config == nil || len(l.Config.CertData) == 0 {
		return "", errors.New("the kubeconfig holds no client certificate")
	}
	pair, err := tls.X509KeyPair(l.Config.CertData, l.Config.KeyData)
	if err != nil {
		return "", err
	}
	cert, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		return "", err
	}
	name, ok := strings.CutPrefix(cert.Subject.CommonName, "system:node:")
	if !ok || name == "" {
		return "", fmt.Errorf("the client certificate's common name %q is not a node's (system:node:<name>)", cert.Subject.CommonName)
	}
	return name, nil
}
