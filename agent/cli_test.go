package main

import (
	"strings"
	"testing"
)

// The command line follows Kubernetes conventions: --version is a flag, a
// bad flag or value is two lines (what is wrong, where the usage is) and
// exit 2, and values are checked before anything connects.
func TestCommandLine(t *testing.T) {
	const hint = "Run 'nodeinit-agent run --help' for usage.\n"
	// Past the checks, run would fail later (exit 1) on these.
	noNode := []string{"--kubeconfig", "/nonexistent/kubeconfig", "--rules-file", "", "--key-file", "/dev/null/key"}
	for _, tc := range []struct {
		name   string
		args   []string
		code   int
		stdout string
		stderr []string
	}{
		{"--version", []string{"--version"}, 0, "nodeinit-agent", nil},
		{"run --version", []string{"run", "--version"}, 0, "nodeinit-agent", nil},
		{"version", []string{"version"}, 0, "nodeinit-agent", nil},
		{"unknown flag", []string{"--nope"}, 2, "", []string{"unknown flag: --nope\n" + hint}},
		{"unknown command", []string{"nope"}, 2, "", []string{"unknown command \"nope\"\nRun 'nodeinit-agent --help' for usage.\n"}},
		{"zero credentials poll", append([]string{"--credentials-poll=0s"}, noNode...), 2, "", []string{"--credentials-poll 0s: want a positive duration\n" + hint}},
		{"negative credentials poll", append([]string{"--credentials-poll=-1s"}, noNode...), 2, "", []string{"--credentials-poll -1s"}},
		{"unparsable metrics address", append([]string{"--metrics-addr=localhost"}, noNode...), 2, "", []string{"--metrics-addr: \"localhost\": want host:port"}},
		{"bad log format", append([]string{"--log-format=xml"}, noNode...), 2, "", []string{"log format \"xml\"", hint}},
		{"validate's bad flag", []string{"validate", "--nope"}, 2, "", []string{"unknown flag: --nope\nRun 'nodeinit-agent validate --help' for usage.\n"}},
		{"explain moved to the coordinator", []string{"explain", "--rules-file", "x"}, 2, "", []string{"nodeinit-coordinator explain"}},
		{"good values get as far as the key file", noNode, 1, "", []string{"/dev/null/key"}},
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
			if code == 2 && (strings.Count(errOut, "\n") > 3 || strings.Contains(errOut, "Flags:")) {
				t.Errorf("%q: a usage error printed the usage:\n%s", tc.args, errOut)
			}
		})
	}
}

// --help lists the flags as --name, as Kubernetes does.
func TestHelpListsFlagsAsKubernetesDoes(t *testing.T) {
	code, _, errOut := runCmd("run", "--help")
	if code != 0 || !strings.Contains(errOut, "\n  --kubeconfig string\n") || !strings.Contains(errOut, "\n  --version\n") || strings.Contains(errOut, "$NODEINIT_VERSION") {
		t.Errorf("run --help: exit %d\n%s", code, errOut)
	}
}
