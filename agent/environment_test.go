package main

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// escHead is an ExtensionServiceConfig without rules, up to its
// environment list, whose entries the tests append.
const escHead = `apiVersion: v1alpha1
kind: ExtensionServiceConfig
name: nodeinit-agent
configFiles:
  - mountPath: /usr/local/etc/nodeinit/rules.yaml
    content: |
      transformations: []
environment:
`

// validate checks the NODEINIT_* environment an ExtensionServiceConfig
// gives the agent as `run` reads it: what run would refuse at start, or
// silently ignore, validate refuses, at the entry's line and column.
func TestValidateChecksTheEnvironment(t *testing.T) {
	head := escHead
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

// The same checks on a ContainerConfig's environment (Talos 1.14), its
// rules in the EtcFileConfig, as `make install-patch` renders them: a bad
// value there made the agent crash-loop on every node while validate said
// OK.
func TestValidateChecksTheContainerEnvironment(t *testing.T) {
	doc := `apiVersion: v1alpha1
kind: ContainerConfig
name: nodeinit-agent
image: registry.example.com/nodeinit-agent-pod:v1
args: [run, --facts=auto]
environment:
  - NODEINIT_LOG_FORMAT=json
  - NODEINIT_PROVIDER_ID_POLICY=bogus
---
apiVersion: v1alpha1
kind: EtcFileConfig
name: nodeinit/rules.yaml
contents: |
  transformations: []
`
	file := filepath.Join(t.TempDir(), "container.yaml")
	if err := os.WriteFile(file, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := runCmd("validate", "--rules-file", file)
	if code != 1 || !strings.Contains(errOut, "bogus") || !strings.Contains(errOut, file+":7:5: ") {
		t.Fatalf("exit %d\nstdout: %s\nstderr: %s\nwant exit 1 naming the bad value at the environment, 7:5", code, out, errOut)
	}
	good := strings.Replace(doc, "=bogus", "=talos-fallback", 1)
	if err := os.WriteFile(file, []byte(good), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, _, errOut := runCmd("validate", "--rules-file", file); code != 0 {
		t.Fatalf("a valid ContainerConfig: exit %d: %s", code, errOut)
	}
}

// Talos appends each patch's environment entries to the extension's (a
// migration patch's NODEINIT_PROVIDER_ID_POLICY after the install's), and
// the container runtime passes them all to the agent. The real binary,
// given such an environment as execve gives it (os/exec would drop the
// duplicates, so it is started with syscall.ForkExec), takes the last
// entry and says so; before, Go's os.Getenv returned the first and the
// later patch was silently lost.
func TestRunTakesTheLastOfARepeatedSetting(t *testing.T) {
	bin := agentBinary(t)
	run := func(env ...string) (int, string) {
		t.Helper()
		r, w, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		devnull, err := os.Open(os.DevNull)
		if err != nil {
			t.Fatal(err)
		}
		defer devnull.Close()
		pid, err := syscall.ForkExec(bin, []string{bin, "run", "--kubeconfig", "/nonexistent/kubeconfig", "--rules-file", "", "--key-file", filepath.Join(t.TempDir(), "key"), "--facts", "cmdline", "--node-name", "w1", "--cmdline-file", "/dev/null"},
			&syscall.ProcAttr{Env: append([]string{"PATH=/usr/bin:/bin"}, env...), Files: []uintptr{devnull.Fd(), devnull.Fd(), w.Fd()}})
		w.Close()
		if err != nil {
			t.Fatal(err)
		}
		// A valid setting lets it start and wait for its kubeconfig: the
		// log is read for a few seconds, then it is stopped.
		_ = r.SetReadDeadline(time.Now().Add(5 * time.Second))
		out, _ := io.ReadAll(r)
		_ = syscall.Kill(pid, syscall.SIGKILL)
		var ws syscall.WaitStatus
		if _, err := syscall.Wait4(pid, &ws, 0, nil); err != nil {
			t.Fatal(err)
		}
		return ws.ExitStatus(), string(out)
	}
	// The install patch said metadata, the migration patch a bad value:
	// the agent must read the migration's, and refuse it.
	code, out := run("NODEINIT_PROVIDER_ID_POLICY=metadata", "NODEINIT_PROVIDER_ID_POLICY=talos-fallbak")
	if code != 2 || !strings.Contains(out, "talos-fallbak") {
		t.Errorf("exit %d, want 2 refusing the last value talos-fallbak:\n%s", code, out)
	}
	// Both valid: the last is used, and the start-up log says the setting is repeated.
	code, out = run("NODEINIT_PROVIDER_ID_POLICY=metadata", "NODEINIT_PROVIDER_ID_POLICY=talos-fallback")
	for _, want := range []string{`NODEINIT_PROVIDER_ID_POLICY is set 2 times (\"metadata\", \"talos-fallback\"): using the last, \"talos-fallback\"`} {
		if !strings.Contains(out, want) {
			t.Errorf("exit %d; the log lacks %q:\n%s", code, want, out)
		}
	}
}
