package main

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"time"

	"github.com/talos-nodeinit/talos-nodeinit/pkg/rules"
)

// rulesPoll is how often the running agent looks at its rules file.
const rulesPoll = 5 * time.Second

// readRules reads the rules file as loadRules sees it: a missing optional
// file reads as empty.
func readRules(path string, optional bool) ([]byte, error) {
	if path == "" {
		return nil, nil
	}
	b, err := os.ReadFile(path)
	if err != nil && optional && errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	return b, err
}

// watchRules looks at the rules file at every value from looks (a
// rulesPoll ticker's), and calls restart once it holds rules other than
// inForce that compile, the same on two looks in a row (a file being
// rewritten is not read half-way): the agent then exits 0 and its runner
// starts it again with them (the extension's `restart: always`,
// the ContainerConfig runtime's restart after 5 s, the static pod's
// restartPolicy). Talos rewrites the file when the machine config changes
// (EtcFileConfig, ExtensionServiceConfig), and nothing else tells a
// ContainerConfig's container. A file that does not compile is reported
// once per content and changes nothing: the rules in force stay.
func watchRules(ctx context.Context, path string, optional bool, inForce []byte, looks <-chan time.Time, log *slog.Logger, restart func()) {
	var refused, pending []byte
	for {
		select {
		case <-ctx.Done():
			return
		case <-looks:
		}
		now, err := readRules(path, optional)
		switch {
		case err != nil:
			if refused == nil || !bytes.Equal(refused, []byte(err.Error())) {
				log.Error("cannot read the rules file; the rules in force stay", "file", path, "err", err)
				refused = []byte(err.Error())
			}
			continue
		case bytes.Equal(now, inForce), refused != nil && bytes.Equal(now, refused):
			pending = nil
			continue
		case !bytes.Equal(now, pending):
			// Seen once: act only when the next look sees the same, so
			// that a file caught while being rewritten (truncated, half
			// written) is never taken for the new rules.
			pending = now
			continue
		}
		if _, err := compileRules(path, now); err != nil {
			log.Error("the rules file changed but is invalid; the rules in force stay (check it with nodeinit-agent validate --rules-file)", "file", path, "err", err)
			refused = now
			continue
		}
		log.Info("the rules file changed; restarting to apply it", "file", path)
		restart()
		return
	}
}

// compileRules compiles the content of the rules file at path (empty: no
// rules); problems are reported at their line and column in path.
func compileRules(path string, b []byte) (*rules.Rules, error) {
	rs, err := rules.Load(b)
	if ps, ok := err.(rules.Problems); ok {
		return nil, ps.InFile(path)
	}
	return rs, err
}
