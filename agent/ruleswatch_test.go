package main

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/talos-nodeinit/talos-nodeinit/pkg/harness/syncbuf"
)

// The running agent applies a rules file Talos rewrote (a ContainerConfig's
// EtcFileConfig, an ExtensionServiceConfig) by restarting, only once the
// new rules compile; a broken or unreadable file keeps the rules in force
// and says so once.
func TestWatchRules(t *testing.T) {
	const valid = "transformations:\n  - name: a\n    nodeSelector: [{matchExpressions: [{key: platform, operator: In, values: [metal]}]}]\n    labels: {example.com/a: \"1\"}\n"
	const other = "transformations:\n  - name: b\n    nodeSelector: [{matchExpressions: [{key: platform, operator: In, values: [metal]}]}]\n    labels: {example.com/b: \"1\"}\n"
	const broken = "transformations:\n  - name: b\n    labels: [not, a, map]\n"
	for _, tc := range []struct {
		name     string
		optional bool
		writes   []string // "" removes the file
		restart  bool
		logs     []string // each must appear exactly once
	}{
		{name: "unchanged", writes: []string{valid, valid}},
		{name: "changed", writes: []string{other}, restart: true, logs: []string{"the rules file changed; restarting"}},
		{name: "broken, then fixed", writes: []string{broken, broken, broken, other}, restart: true,
			logs: []string{"changed but is invalid", "the rules file changed; restarting"}},
		{name: "broken stays broken", writes: []string{broken, broken}, logs: []string{"changed but is invalid"}},
		{name: "broken, then back to the rules in force", writes: []string{broken, valid}, logs: []string{"changed but is invalid"}},
		{name: "removed at the default path: no rules", optional: true, writes: []string{""}, restart: true, logs: []string{"restarting"}},
		{name: "removed at a given path", writes: []string{"", ""}, logs: []string{"cannot read the rules file"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "rules.yaml")
			if err := os.WriteFile(path, []byte(valid), 0o644); err != nil {
				t.Fatal(err)
			}
			var out syncbuf.Buffer
			log := slog.New(slog.NewTextHandler(&out, nil))
			ctx, cancel := context.WithCancel(t.Context())
			restarted := make(chan struct{})
			done := make(chan struct{})
			looks := make(chan time.Time)
			go func() {
				defer close(done)
				watchRules(ctx, path, tc.optional, []byte(valid), looks, log, func() { close(restarted) })
			}()
			defer func() { cancel(); <-done }()
			// look makes watchRules look once more; its loop takes a look
			// only once the one before has ended. False: it has returned.
			look := func() bool {
				select {
				case looks <- time.Time{}:
					return true
				case <-done:
					return false
				}
			}
			for _, w := range tc.writes {
				var err error
				if w == "" {
					err = os.Remove(path)
				} else {
					// As Talos writes it (files.AtomicUpdate): a new file renamed over.
					if err = os.WriteFile(path+".tmp", []byte(w), 0o644); err == nil {
						err = os.Rename(path+".tmp", path)
					}
				}
				if err != nil && !os.IsNotExist(err) {
					t.Fatal(err)
				}
				// Three looks taken: the first two have ended, enough for
				// a change to be seen twice and acted on.
				for range 3 {
					if !look() {
						break
					}
				}
			}
			select {
			case <-restarted:
				if !tc.restart {
					t.Error("restarted; want the rules in force kept")
				}
			default:
				if tc.restart {
					t.Errorf("no restart after the rules changed; log:\n%s", out.String())
				}
			}
			cancel()
			<-done
			for _, want := range tc.logs {
				if n := strings.Count(out.String(), want); n != 1 {
					t.Errorf("log holds %q %d times, want once:\n%s", want, n, out.String())
				}
			}
		})
	}
}
