// Package agentkey keeps the node agent's own ed25519 key on disk. The
// coordinator enrols the public half on the node's first join and from then
// on accepts only attestations it signed, so the key must outlive restarts
// and is never replaced behind the coordinator's back: a file that exists
// but cannot be used is an error for a person to resolve, not a reason to
// make a new key.
package agentkey

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// DefaultFile is where the extension service keeps the key: /var/lib/nodeinit
// is bind-mounted read-write into the agent only, not into the kubelet.
const DefaultFile = "/var/lib/nodeinit/agent.key"

const pemType = "PRIVATE KEY"

// LoadOrCreate returns the key stored at path, or creates one there when
// the file does not exist (created is then true). The file is PKCS#8 PEM,
// mode 0600, written atomically; its directory is created mode 0700.
func LoadOrCreate(path string) (key ed25519.PrivateKey, created bool, err error) {
	key, err = Load(path)
	if err == nil || !errors.Is(err, os.ErrNotExist) {
		return key, false, err
	}
	if key, err = create(path); err != nil {
		return nil, false, fmt.Errorf("creating the agent key %s: %w (the key needs a writable directory that "+
			"survives restarts: the extension service mounts /var/lib/nodeinit for it)", path, err)
	}
	return key, true, nil
}

// Load reads the key at path. A missing file is an error satisfying
// errors.Is(err, os.ErrNotExist); any other failure says how to recover.
func Load(path string) (ed25519.PrivateKey, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	if err == nil {
		var key ed25519.PrivateKey
		if key, err = parse(data); err == nil {
			return key, nil
		}
	}
	return nil, fmt.Errorf("the agent key %s is unusable: %w. It is not replaced automatically, because the coordinator "+
		"trusts only the key it enrolled for this node. To start over: delete %s, restart the agent (it creates a new key), "+
		"then re-enrol the node on the coordinator, which prints the exact command when it sees the new key", path, err, path)
}

func parse(data []byte) (ed25519.PrivateKey, error) {
	block, _ := pem.Decode(data)
	if block == nil || block.Type != pemType {
		return nil, fmt.Errorf("not a PEM %q block", pemType)
	}
	k, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	if err != nil {
		return nil, err
	}
	key, ok := k.(ed25519.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("a %T, not an ed25519 key", k)
	}
	return key, nil
}

// create writes a new key to a temporary file beside path, then renames it
// into place, so a crash never leaves a truncated key behind.
func create(path string) (ed25519.PrivateKey, error) {
	_, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, err
	}
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, err
	}
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	tmp, err := os.CreateTemp(dir, ".agent-key-*") // mode 0600
	if err != nil {
		return nil, err
	}
	defer os.Remove(tmp.Name()) // fails harmlessly once renamed
	err = pem.Encode(tmp, &pem.Block{Type: pemType, Bytes: der})
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		return nil, err
	}
	// The rename must survive a power cut too, or the node comes back
	// without the key the coordinator enrolled.
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync()
		d.Close()
	}
	return key, nil
}
