package controller

import (
	"context"
	"crypto/ed25519"
	"testing"

	"github.com/talos-nodeinit/talos-nodeinit/pkg/desired"
	"github.com/talos-nodeinit/talos-nodeinit/pkg/facts"
	"github.com/talos-nodeinit/talos-nodeinit/pkg/rules"
)

// The informer drops a deleted Node between a sync's patches and its
// attestation: attest then has nothing to answer, and must say so quietly.
func TestAttestWithoutNode(t *testing.T) {
	rs, err := rules.Compile(rules.File{})
	if err != nil {
		t.Fatal(err)
	}
	_, key, err := ed25519.GenerateKey(nil)
	if err != nil {
		t.Fatal(err)
	}
	a, err := New(Config{
		Kubeconfig: "/nonexistent", Rules: rs, Key: key,
		Facts: func(context.Context, func(facts.Talos)) error { return nil },
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.attest(t.Context(), nil, desired.State{}); err != nil {
		t.Errorf("attest without a Node: %v, want nil", err)
	}
}
