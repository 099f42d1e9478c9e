package main

import (
	"strings"
	"testing"
)

// The command line follows Kubernetes conventions: --version is a flag, a
// bad flag or value is two lines (what is wrong, where the usage is) and
// exit 2, and every value is checked before anything connects.
func TestCommandLine(t *testing.T) {
	const hint = "Run 'nodeinit-coordinator run --help' for usage.\n"
	// Past the checks, run would fail on this kubeconfig with exit 1.
	noCluster := []string{"--kubeconfig", "/nonexistent/kubeconfig", "--config", "", "--metrics-addr", ""}
	for _, tc := range []struct {
		name   string
		args   []string
		code   int
		stdout string
		stderr []string // each must appear
	}{
		{"--version", []string{"--version"}, 0, "nodeinit-coordinator", nil},
		{"run --version", []string{"run", "--version"}, 0, "nodeinit-coordinator", nil},
		{"version", []string{"version"}, 0, "nodeinit-coordinator", nil},
		{"unknown flag", []string{"--nope"}, 2, "", []string{"unknown flag: --nope\n" + hint}},
		{"unknown command", []string{"nope"}, 2, "", []string{"unknown command \"nope\"\nRun 'nodeinit-coordinator --help' for usage.\n"}},
		{"flag without value", append([]string{"--csr-workers"}, noCluster...), 2, "", []string{"invalid value", "--csr-workers", hint}},
		{"no CSR workers", append([]string{"--csr-workers=0"}, noCluster...), 2, "", []string{"--csr-workers 0: want 1 or more\n" + hint}},
		{"negative node workers", append([]string{"--node-workers=-1"}, noCluster...), 2, "", []string{"--node-workers -1: want 1 or more"}},
		{"zero QPS", append([]string{"--kube-api-qps=0"}, noCluster...), 2, "", []string{"--kube-api-qps 0: want more than 0"}},
		{"negative burst", append([]string{"--kube-api-burst=-5"}, noCluster...), 2, "", []string{"--kube-api-burst -5: want more than 0"}},
		{"lease not longer than renew deadline", append([]string{"--lease-duration=10s", "--renew-deadline=10s"}, noCluster...), 2, "", []string{"--lease-duration 10s must be longer than --renew-deadline 10s"}},
		{"renew deadline within retry jitter", append([]string{"--renew-deadline=2s", "--retry-period=2s"}, noCluster...), 2, "", []string{"--renew-deadline 2s must be longer than --retry-period 2s × 1.2"}},
		{"zero retry period", append([]string{"--retry-period=0s"}, noCluster...), 2, "", []string{"--retry-period 0s: want a positive duration"}},
		{"unparsable metrics address", []string{"--kubeconfig", "/nonexistent/kubeconfig", "--config", "", "--metrics-addr", "10290"}, 2, "", []string{"--metrics-addr: \"10290\": want host:port"}},
		{"metrics port out of range", []string{"--kubeconfig", "/nonexistent/kubeconfig", "--config", "", "--metrics-addr", ":70000"}, 2, "", []string{"port \"70000\""}},
		{"bad log level", append([]string{"--log-level=loud"}, noCluster...), 2, "", []string{"log level \"loud\"", hint}},
		{"every bad value at once", append([]string{"--csr-workers=0", "--kube-api-qps=-1"}, noCluster...), 2, "", []string{"--csr-workers 0", "--kube-api-qps -1"}},
		{"good values get as far as the kubeconfig", noCluster, 1, "", []string{"/nonexistent/kubeconfig"}},
		{"validate without --config", []string{"validate"}, 2, "", []string{"--config FILE is required\nRun 'nodeinit-coordinator validate --help' for usage.\n"}},
		{"validate the shipped ConfigMap", []string{"validate", "--config", "deploy/configmap.yaml"}, 0, "deploy/configmap.yaml: OK", nil},
		{"validate the chart's values", []string{"validate", "--config", "chart/nodeinit-coordinator/values.yaml"}, 0, "values.yaml: OK", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errOut := runCmd(tc.args...)
			if code != tc.code || !strings.Contains(out, tc.stdout) {
				t.Errorf("%q: exit %d, stdout %q; want %d and %q\nstderr:\n%s", tc.args, code, out, tc.code, tc.stdout, errOut)
			}
			for _, w := range tc.stderr {
				if !strings.Contains(errOut, w) {
					t.Errorf("%q: stderr\n%s\nwant %q", tc.args, errOut, w)
				}
			}
			if code == 2 && (strings.Count(errOut, "\n") > 4 || strings.Contains(errOut, "Flags:")) {
				t.Errorf("%q: a usage error printed the usage:\n%s", tc.args, errOut)
			}
		})
	}
}

// --help lists one-letter flags as -x and the others as --name.
func TestHelpListsFlagsAsKubernetesDoes(t *testing.T) {
	code, _, errOut := runCmd("run", "--help")
	if code != 0 || !strings.Contains(errOut, "\n  --csr-workers int\n") || !strings.Contains(errOut, "\n  --version\n") || strings.Contains(errOut, "$NODEINIT_VERSION") {
		t.Errorf("run --help: exit %d\n%s", code, errOut)
	}
}
