package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// validate checks the NODEINIT_* environment an ExtensionServiceConfig
// gives the agent as `run` reads it: what run would refuse at start, or
// silently ignore, validate refuses, at the entry's line and column.
func TestValidateChecksTheEnvironment(t *testing.T) {
	const head = `apiVersion: v1alpha1
kind: ExtensionServiceConfig
name: nodeinit-agent
configFiles:
  - mountPath: /usr/local/etc/nodeinit/rules.yaml
    content: |
      transformations: []
environment:
`
	cases := []struct {
		name string
		env  []string
		want []string // empty: valid
	}{
		{"the agent's settings", []string{"NODEINIT_PROVIDER_ID_POLICY=talos-fallback", "NODEINIT_LOG_FORMAT=json", "NODEINIT_CREDENTIALS_POLL=5s"}, nil},
		{"other variables are not the agent's", []string{"TZ=UTC", "HTTPS_PROXY=http://proxy:3128"}, nil},
		{"a misspelt setting", []string{"NODEINIT_PROVIDERID_POLICY=talos-fallback"}, []string{":9:5: ", "NODEINIT_PROVIDERID_POLICY is not a setting of nodeinit-agent run", "did you mean NODEINIT_PROVIDER_ID_POLICY?"}},
		{"an unknown setting", []string{"NODEINIT_COLOUR=red"}, []string{"NODEINIT_COLOUR is not a setting", "run --help"}},
		{"a bad policy", []string{"NODEINIT_PROVIDER_ID_POLICY=talos-fallbak"}, []string{"run would refuse to start", "talos-fallbak"}},
		{"a bad duration", []string{"NODEINIT_CREDENTIALS_POLL=often"}, []string{`NODEINIT_CREDENTIALS_POLL="often"`, "invalid"}},
		{"a zero duration", []string{"NODEINIT_CREDENTIALS_POLL=0s"}, []string{"--credentials-poll 0s: want a positive duration"}},
		{"a bad log format", []string{"NODEINIT_LOG_FORMAT=yaml"}, []string{"run would refuse to start", "yaml"}},
		{"cmdline facts without a node name", []string{"NODEINIT_FACTS=cmdline"}, []string{"--facts=cmdline needs --node-name"}},
		{"cmdline facts with a node name", []string{"NODEINIT_FACTS=cmdline", "NODEINIT_NODE_NAME=w1"}, nil},
		{"rules read from elsewhere", []string{"NODEINIT_RULES_FILE=/etc/rules.yaml"}, []string{"would read its rules from /etc/rules.yaml", "remove NODEINIT_RULES_FILE"}},
		{"not NAME=value", []string{"NODEINIT_LOG_FORMAT"}, []string{`"NODEINIT_LOG_FORMAT" is not NAME=value`}},
		{"lower case is not read", []string{"NODEINIT_provider_id_policy=never"}, []string{"NODEINIT_provider_id_policy is not read: run reads exactly NODEINIT_PROVIDER_ID_POLICY"}},
		{"dashes are not read", []string{"NODEINIT_METRICS-ADDR=127.0.0.1:9000"}, []string{"run reads exactly NODEINIT_METRICS_ADDR"}},
		{"set twice", []string{"NODEINIT_LOG_FORMAT=json", "NODEINIT_LOG_FORMAT=text"}, []string{"NODEINIT_LOG_FORMAT is set twice (first at line 9)"}},
	}
	dir := t.TempDir()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var b strings.Builder
			b.WriteString(head)
			for _, e := range c.env {
				b.WriteString("  - " + e + "\n")
			}
			file := filepath.Join(dir, strings.ReplaceAll(c.name, " ", "-")+".yaml")
			if err := os.WriteFile(file, []byte(b.String()), 0o600); err != nil {
				t.Fatal(err)
			}
			code, out, errOut := runCmd("validate", "--rules-file", file)
			if len(c.want) == 0 {
				if code != 0 {
					t.Fatalf("exit %d, want 0: %s", code, errOut)
				}
				return
			}
			if code != 1 {
				t.Fatalf("exit %d, want 1\nstdout: %s\nstderr: %s", code, out, errOut)
			}
			for _, w := range c.want {
				if !strings.Contains(errOut, w) {
					t.Errorf("stderr lacks %q:\n%s", w, errOut)
				}
			}
			if !strings.Contains(errOut, file+":9:5: ") && !strings.Contains(errOut, file+":10:5: ") {
				t.Errorf("the problem is not placed at its environment entry (%s:9:5 or :10:5):\n%s", file, errOut)
			}
		})
	}
}
