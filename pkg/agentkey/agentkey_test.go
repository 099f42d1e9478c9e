package agentkey

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestCreateThenReload(t *testing.T) {
	path := filepath.Join(t.TempDir(), "nodeinit", "agent.key")
	key, created, err := LoadOrCreate(path)
	if err != nil || !created {
		t.Fatalf("first start: created=%v err=%v, want a new key", created, err)
	}
	again, created, err := LoadOrCreate(path)
	if err != nil || created {
		t.Fatalf("restart: created=%v err=%v, want the stored key", created, err)
	}
	if !key.Equal(again) {
		t.Error("a restart loaded another key than the one created")
	}

	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o600 {
		t.Errorf("key file mode %v, want 0600", st.Mode().Perm())
	}
	if st, err := os.Stat(filepath.Dir(path)); err != nil || st.Mode().Perm() != 0o700 {
		t.Errorf("key directory: %v %v, want mode 0700", st.Mode(), err)
	}
	entries, _ := os.ReadDir(filepath.Dir(path))
	if len(entries) != 1 {
		t.Errorf("the directory holds %d entries, want only the key (no temporary file left)", len(entries))
	}
	data, _ := os.ReadFile(path)
	if b, _ := pem.Decode(data); b == nil || b.Type != "PRIVATE KEY" {
		t.Errorf("the key file is not a PKCS#8 PEM block:\n%s", data)
	}
}

func TestLoadMissing(t *testing.T) {
	if _, err := Load(filepath.Join(t.TempDir(), "agent.key")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Load of a missing file: %v, want os.ErrNotExist", err)
	}
}

// A key file that exists but cannot be used is never replaced: the
// coordinator trusts only the key it enrolled.
func TestUnusableKeyRefused(t *testing.T) {
	ec, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalPKCS8PrivateKey(ec)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name    string
		content []byte
		dir     bool
	}{
		{name: "empty", content: nil},
		{name: "not PEM", content: []byte("ed25519 please\n")},
		{name: "another PEM type", content: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})},
		{name: "truncated PKCS#8", content: pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der[:20]})},
		{name: "an ECDSA key", content: pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})},
		{name: "a directory", dir: true},
	} {
		path := filepath.Join(t.TempDir(), "agent.key")
		if c.dir {
			err = os.Mkdir(path, 0o700)
		} else {
			err = os.WriteFile(path, c.content, 0o600)
		}
		if err != nil {
			t.Fatal(err)
		}
		_, created, err := LoadOrCreate(path)
		if err == nil || created {
			t.Errorf("%s: created=%v err=%v, want an error", c.name, created, err)
			continue
		}
		for _, want := range []string{path, "delete", "re-enrol"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("%s: the error must name the file and the way out; %q missing from: %v", c.name, want, err)
			}
		}
		if !c.dir {
			if after, _ := os.ReadFile(path); string(after) != string(c.content) {
				t.Errorf("%s: the unusable file was changed", c.name)
			}
		}
	}
}
