package envflag

import (
	"bytes"
	"flag"
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
