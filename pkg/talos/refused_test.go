package talos_test

import (
	"context"
	"errors"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/resources/runtime"

	"github.com/talos-nodeinit/talos-nodeinit/pkg/facts"
	"github.com/talos-nodeinit/talos-nodeinit/pkg/harness/machined"
	"github.com/talos-nodeinit/talos-nodeinit/pkg/talos"
)

// TestRefusedByRealMachined runs the reader against machined's own socket
// authorization (hack/machined): unregistered, it is refused, says so
// through Problem, and publishes the fallback facts marked with the refusal;
// once its PID is registered it reads machined and clears the problem.
func TestRefusedByRealMachined(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	p, err := machined.Start(nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	n, err := p.Node(ctx, "refused-1")
	if err != nil {
		t.Fatal(err)
	}
	if err := n.SetPlatformMetadata(ctx, runtime.PlatformMetadataSpec{Platform: "aws", Hostname: "refused-1", Zone: "eu-1a"}); err != nil {
		t.Fatal(err)
	}
	for _, err := range []error{n.SetNodename(ctx, "refused-1")} {
		if err != nil {
			t.Fatal(err)
		}
	}

	var mu sync.Mutex
	var problems []error
	updates := make(chan facts.Talos, 16)
	r := &talos.Reader{
		Socket: n.Socket, MinBackoff: 50 * time.Millisecond, MaxBackoff: 200 * time.Millisecond,
		Fallback: func() (facts.Talos, error) {
			return talos.ParseCmdline("talos.platform=metal talos.hostname=refused-1"), nil
		},
		Problem: func(err error) {
			mu.Lock()
			defer mu.Unlock()
			problems = append(problems, err)
		},
	}
	go func() { _ = r.Watch(ctx, func(f facts.Talos) { updates <- f }) }()

	next := func(what string) facts.Talos {
		t.Helper()
		select {
		case f := <-updates:
			return f
		case <-time.After(30 * time.Second):
			t.Fatalf("no facts (%s) within 30s", what)
			return facts.Talos{}
		}
	}
	f := next("fallback")
	if !strings.Contains(f.Degraded, "machined refused this process") || f.Metadata == nil || f.Metadata.Platform != "metal" {
		t.Fatalf("fallback facts: %+v (degraded %q)", f.Metadata, f.Degraded)
	}
	mu.Lock()
	if len(problems) != 1 || !errors.Is(problems[0], talos.ErrRefused) {
		t.Fatalf("problems reported: %v", problems)
	}
	mu.Unlock()

	if err := n.RegisterAgent(ctx, os.Getpid()); err != nil {
		t.Fatal(err)
	}
	f = next("from machined once registered")
	if f.Degraded != "" || f.Metadata == nil || f.Metadata.Zone != "eu-1a" {
		t.Fatalf("facts after registration: %+v (degraded %q)", f.Metadata, f.Degraded)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(problems) != 2 || problems[1] != nil {
		t.Fatalf("problems reported: %v, want the refusal then nil", problems)
	}
}
