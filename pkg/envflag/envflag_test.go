package envflag

import (
	"bytes"
	"flag"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		name    string
		args    []string
		env     map[string]string
		want    string
		wantDur time.Duration
		wantErr string
	}{
		{name: "default", want: "def", wantDur: time.Second},
		{name: "env", env: map[string]string{"T_RULES_FILE": "/env"}, want: "/env", wantDur: time.Second},
		{name: "flag wins", args: []string{"--rules-file=/flag"}, env: map[string]string{"T_RULES_FILE": "/env"}, want: "/flag", wantDur: time.Second},
		{name: "env duration", env: map[string]string{"T_POLL": "3s"}, want: "def", wantDur: 3 * time.Second},
		{name: "bad env value is refused by name", env: map[string]string{"T_POLL": "soon"}, wantErr: `environment T_POLL="soon"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			fs := flag.NewFlagSet("t", flag.ContinueOnError)
			rules := fs.String("rules-file", "def", "rules")
			poll := fs.Duration("poll", time.Second, "poll")
			err := Parse(fs, "T_", tc.args)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if *rules != tc.want || *poll != tc.wantDur {
				t.Fatalf("rules=%q poll=%v, want %q %v", *rules, *poll, tc.want, tc.wantDur)
			}
		})
	}
}

func TestUsageNamesEnvironment(t *testing.T) {
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	var buf bytes.Buffer
	fs.SetOutput(&buf)
	fs.String("node-name", "", "the `NAME` of the node")
	Usage(fs, "NODEINIT_")
	if !strings.Contains(buf.String(), "--node-name NAME") || !strings.Contains(buf.String(), "$NODEINIT_NODE_NAME") {
		t.Fatalf("usage:\n%s", buf.String())
	}
}

func TestParseCommand(t *testing.T) {
	for _, tc := range []struct {
		args []string
		code int
		stop bool
	}{
		{nil, 0, false}, {[]string{"--help"}, 0, true}, {[]string{"--nope"}, 2, true}, {[]string{"stray"}, 2, true},
	} {
		var buf bytes.Buffer
		fs := NewFlagSet("t", "Usage: t", "T_", &buf)
		fs.String("x", "", "x")
		code, stop := ParseCommand(fs, "T_", tc.args)
		if code != tc.code || stop != tc.stop {
			t.Errorf("ParseCommand(%q) = %d %v, want %d %v", tc.args, code, stop, tc.code, tc.stop)
		}
	}
}

// A bad flag says what is wrong and where the usage is, in two lines: not
// the usage itself, and never twice.
func TestBadFlagIsShort(t *testing.T) {
	for _, args := range [][]string{{"--nope"}, {"--x"}, {"stray"}, {"--n=abc"}} {
		var buf bytes.Buffer
		fs := NewFlagSet("prog cmd", "Usage: prog cmd [flags]", "T_", &buf)
		fs.String("x", "", "x")
		fs.Int("n", 1, "n")
		if code, stop := ParseCommand(fs, "T_", args); code != 2 || !stop {
			t.Errorf("%q: %d %v, want 2 true", args, code, stop)
		}
		lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
		if len(lines) != 2 || lines[1] != "Run 'prog cmd --help' for usage." || strings.Contains(buf.String(), "Usage:") {
			t.Errorf("%q printed:\n%s\nwant one error line and \"Run 'prog cmd --help' for usage.\"", args, buf.String())
		}
	}
}

// Flags are listed as Kubernetes lists them: -o, --long-name.
func TestUsageSpelling(t *testing.T) {
	var buf bytes.Buffer
	fs := NewFlagSet("prog cmd", "Usage: prog cmd [flags]", "T_", &buf)
	fs.String("o", "table", "output `FORMAT`")
	fs.String("rules", "", "the rules `FILE`")
	if code, stop := ParseCommand(fs, "T_", []string{"--help"}); code != 0 || !stop {
		t.Fatalf("--help: %d %v", code, stop)
	}
	if !strings.Contains(buf.String(), "\n  -o FORMAT\n") || strings.Contains(buf.String(), "--o ") || !strings.Contains(buf.String(), "\n  --rules FILE\n") {
		t.Errorf("usage:\n%s", buf.String())
	}
}

// --version is a flag; it prints to its own writer and is never read from
// the environment (NODEINIT_VERSION may well hold something else).
func TestVersionFlag(t *testing.T) {
	for _, tc := range []struct {
		args  []string
		env   string
		stop  bool
		print bool
	}{
		{[]string{"--version"}, "", true, true},
		{[]string{"-version"}, "", true, true},
		{[]string{"--version=false"}, "", false, false},
		{nil, "true", false, false},
		{nil, "v1.2.3", false, false},
	} {
		if tc.env != "" {
			t.Setenv("T_VERSION", tc.env)
		}
		var out, errOut bytes.Buffer
		fs := NewFlagSet("prog", "Usage: prog", "T_", &errOut)
		AddVersion(fs, &out, "prog v9")
		code, stop := ParseCommand(fs, "T_", tc.args)
		if code != 0 || stop != tc.stop || (out.String() == "prog v9\n") != tc.print {
			t.Errorf("%q env %q: %d %v, printed %q, stderr %q", tc.args, tc.env, code, stop, out.String(), errOut.String())
		}
	}
}

// Fail reports a bad value the way a bad flag is reported.
func TestFail(t *testing.T) {
	var buf bytes.Buffer
	fs := NewFlagSet("prog run", "Usage: prog run", "T_", &buf)
	if code := Fail(fs, "--workers 0: want 1 or more"); code != 2 || buf.String() != "--workers 0: want 1 or more\nRun 'prog run --help' for usage.\n" {
		t.Errorf("Fail: %d %q", code, buf.String())
	}
}

// Talos appends a later patch's environment entries to the earlier ones:
// the last entry of a name is the one meant, and each repeated name is
// reported with its values.
func TestRepeatedEnvironment(t *testing.T) {
	for _, tc := range []struct {
		name    string
		environ []string
		want    string
		repeats []string
	}{
		{"once", []string{"NI_MODE=a"}, "a", nil},
		{"twice: the last", []string{"NI_MODE=a", "PATH=/bin", "NI_MODE=b"}, "b", []string{`NI_MODE is set 2 times ("a", "b"): using the last, "b"`}},
		{"three times", []string{"NI_MODE=a", "NI_MODE=b", "NI_MODE=c"}, "c", []string{`NI_MODE is set 3 times ("a", "b", "c"): using the last, "c"`}},
		{"the same value twice", []string{"NI_MODE=a", "NI_MODE=a"}, "a", []string{`NI_MODE is set 2 times ("a", "a")`}},
		{"others' variables repeated are not ours", []string{"OTHER=1", "OTHER=2", "NI_MODE=a"}, "a", nil},
		{"empty last value", []string{"NI_MODE=a", "NI_MODE="}, "", []string{`using the last, ""`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fs := flag.NewFlagSet("x", flag.ContinueOnError)
			mode := fs.String("mode", "default", "")
			if err := ParseEnviron(fs, "NI_", nil, tc.environ); err != nil {
				t.Fatal(err)
			}
			if *mode != tc.want {
				t.Errorf("--mode %q, want %q", *mode, tc.want)
			}
			got := Repeated("NI_", tc.environ)
			if len(got) != len(tc.repeats) {
				t.Fatalf("Repeated: %q, want %d messages", got, len(tc.repeats))
			}
			for i, w := range tc.repeats {
				if !strings.Contains(got[i], w) {
					t.Errorf("Repeated[%d] = %q, want it to contain %q", i, got[i], w)
				}
			}
		})
	}
	// A flag on the command line still wins.
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	mode := fs.String("mode", "default", "")
	if err := ParseEnviron(fs, "NI_", []string{"--mode", "cli"}, []string{"NI_MODE=a", "NI_MODE=b"}); err != nil || *mode != "cli" {
		t.Errorf("--mode %q (%v), want cli", *mode, err)
	}
}

// A misspelt NODEINIT_ variable is said, with the setting it was probably
// meant as; the flags' own variables and other prefixes are not.
func TestUnknownEnvironment(t *testing.T) {
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	fs.String("provider-id-policy", "metadata", "")
	fs.String("rules-file", "", "")
	fs.Bool("dry-run", false, "")
	got := Unknown(fs, "NODEINIT_", []string{
		"NODEINIT_PROVIDERID_POLICY=talos-fallback", // underscores
		"NODEINIT_RULES_FIEL=/x",                    // two letters swapped
		"NODEINIT_PROVIDER_ID_POLICY=metadata",      // a setting
		"NODEINIT_SOMETHING_ELSE=1",                 // nothing near
		"NODEINIT_PROVIDERID_POLICY=again",          // said once
		"PATH=/bin", "KUBERNETES_SERVICE_HOST=10.96.0.1",
	})
	want := []string{
		"NODEINIT_PROVIDERID_POLICY is not a setting of run: ignored; did you mean NODEINIT_PROVIDER_ID_POLICY?",
		"NODEINIT_RULES_FIEL is not a setting of run: ignored; did you mean NODEINIT_RULES_FILE?",
		"NODEINIT_SOMETHING_ELSE is not a setting of run: ignored",
	}
	if !slices.Equal(got, want) {
		t.Fatalf("Unknown:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
