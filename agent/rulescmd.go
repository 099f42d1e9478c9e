package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/talos-nodeinit/talos-nodeinit/pkg/envflag"
	"github.com/talos-nodeinit/talos-nodeinit/pkg/rules"
	"github.com/talos-nodeinit/talos-nodeinit/pkg/rulesource"
	"github.com/talos-nodeinit/talos-nodeinit/pkg/suggest"
	"github.com/talos-nodeinit/talos-nodeinit/pkg/talosccm"
)

// rulesFileFlag defines --rules-file, run's spelling, and --rules, the
// older one validate used, as an alias.
func rulesFileFlag(fs *flag.FlagSet, usage string) func() string {
	file := fs.String("rules-file", "", usage)
	old := fs.String("rules", "", "deprecated: use --rules-file")
	return func() string {
		if *file != "" {
			return *file
		}
		return *old
	}
}

func validate(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("validate", "Usage: nodeinit-agent validate --rules-file FILE\n\n"+
		"Check the agent's rules: exit 0 when they are valid, 1 with every error (file:line:column, and a fix) otherwise.\n"+
		"FILE is a rules file (Talos CCM's configuration format), the ExtensionServiceConfig that delivers it,\n"+
		"a Talos machine config holding that, or Talos CCM's ConfigMap.", stderr)
	file := rulesFileFlag(fs, "the `FILE` to check")
	if code, stop := parse(fs, args); stop {
		return code
	}
	if file() == "" {
		fmt.Fprintln(stderr, "validate: --rules-file FILE is required")
		return 2
	}
	rs, src, err := rulesource.LoadFile(file())
	if envErr := environmentProblems(src.Environment).InFile(file()); len(envErr) > 0 {
		var ps rules.Problems
		if err != nil && !errors.As(err, &ps) {
			fmt.Fprintf(stderr, "%s: invalid:\n%v\n", file(), err)
			return 1
		}
		err = append(ps, envErr...)
	}
	if err != nil {
		fmt.Fprintf(stderr, "%s: invalid:\n%v\n", file(), err)
		if mentionsTalosCCM(err) {
			fmt.Fprintf(stderr, "\nTo convert a Talos CCM configuration: nodeinit-agent migrate --from-talos-ccm %s\n", file())
		}
		return 1
	}
	fmt.Fprintf(stdout, "%s: OK: %s, %d rules %q\n", file(), src.Describe(), len(rs.Names()), rs.Names())
	return 0
}

func mentionsTalosCCM(err error) bool {
	var ps rules.Problems
	if !errors.As(err, &ps) {
		return false
	}
	for _, p := range ps {
		if strings.Contains(p.Msg+p.Fix, "Talos CCM") || strings.Contains(p.Msg, "coordinator") {
			return true
		}
	}
	return false
}

func migrate(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("migrate", "Usage: nodeinit-agent migrate --from-talos-ccm FILE [--coordinator-out FILE] > nodeinit-rules.yaml\n\n"+
		"Convert a Talos CCM configuration (ccm-config.yaml, or its ConfigMap) into the agent's rules, printed as the\n"+
		"ExtensionServiceConfig `talosctl patch mc --patch @nodeinit-rules.yaml` applies, and a fragment of the\n"+
		"coordinator's configuration. Every difference from Talos CCM is listed on stderr and as comments.", stderr)
	from := fs.String("from-talos-ccm", "", "the Talos CCM configuration `FILE`")
	coordOut := fs.String("coordinator-out", "", "write the coordinator configuration fragment to `FILE` (default: stderr)")
	if code, stop := parse(fs, args); stop {
		return code
	}
	if *from == "" {
		fmt.Fprintln(stderr, "migrate: --from-talos-ccm FILE is required")
		return 2
	}
	data, err := os.ReadFile(*from)
	if err != nil {
		fmt.Fprintln(stderr, "migrate:", err)
		return 1
	}
	res, err := talosccm.Convert(filepath.Base(*from), data)
	if err != nil {
		if ps, ok := err.(rules.Problems); ok {
			err = ps.InFile(*from)
		}
		fmt.Fprintf(stderr, "%s: cannot migrate:\n%v\n", *from, err)
		return 1
	}
	for _, n := range res.Notes {
		if n.Pos.Line > 0 {
			fmt.Fprintf(stderr, "%s:%d:%d: %s\n", *from, n.Pos.Line, n.Pos.Col, n.Text)
		} else {
			fmt.Fprintf(stderr, "%s: %s\n", *from, n.Text)
		}
	}
	if *coordOut != "" {
		if err := os.WriteFile(*coordOut, res.Coordinator, 0o644); err != nil {
			fmt.Fprintln(stderr, "migrate:", err)
			return 1
		}
		fmt.Fprintf(stderr, "wrote the coordinator configuration fragment to %s\n", *coordOut)
	} else {
		fmt.Fprintf(stderr, "\ncoordinator configuration fragment (merge into coordinator.yaml):\n%s", res.Coordinator)
	}
	if _, err := stdout.Write(res.AgentPatch); err != nil {
		fmt.Fprintln(stderr, "migrate:", err)
		return 1
	}
	return 0
}

// environmentProblems checks an ExtensionServiceConfig's environment as
// `run` would read it: each NODEINIT_* entry must name one of run's flags
// and hold a value it accepts, and together they must pass run's start
// checks. Other variables are not the agent's and are left alone.
func environmentProblems(env []rulesource.Env) rules.Problems {
	if len(env) == 0 {
		return nil
	}
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	f := addRunFlags(fs)
	var names []string
	fs.VisitAll(func(fl *flag.Flag) { names = append(names, envflag.Name(envPrefix, fl.Name)) })
	const where = "nodeinit-agent's environment (ExtensionServiceConfig or ContainerConfig)"
	var ps rules.Problems
	seen := map[string]rules.Pos{}
	for _, e := range env {
		name, value, ok := strings.Cut(e.Entry, "=")
		switch {
		case !ok:
			ps = append(ps, rules.Problem{Pos: e.Pos, Rule: where, Msg: fmt.Sprintf("%q is not NAME=value", e.Entry)})
			continue
		case !strings.HasPrefix(name, envPrefix):
			continue
		}
		fl := fs.Lookup(strings.ToLower(strings.ReplaceAll(strings.TrimPrefix(name, envPrefix), "_", "-")))
		if fl != nil && name != envflag.Name(envPrefix, fl.Name) {
			ps = append(ps, rules.Problem{Pos: e.Pos, Rule: where, Msg: fmt.Sprintf("%s is not read: run reads exactly %s", name, envflag.Name(envPrefix, fl.Name)),
				Fix: "write " + envflag.Name(envPrefix, fl.Name)})
			continue
		}
		if prev, twice := seen[name]; twice {
			ps = append(ps, rules.Problem{Pos: e.Pos, Rule: where, Msg: fmt.Sprintf("%s is set twice (first at line %d); the agent takes this last one", name, prev.Line),
				Fix: "keep one (Talos appends the environment entries of each patch it applies; the agent takes the last)"})
			continue
		}
		seen[name] = e.Pos
		if fl == nil {
			p := rules.Problem{Pos: e.Pos, Rule: where, Msg: fmt.Sprintf("%s is not a setting of nodeinit-agent run, so it changes nothing", name)}
			if near, ok := suggest.Typo(name, names); ok {
				p.Fix = fmt.Sprintf("did you mean %s?", near)
			} else {
				p.Fix = "see nodeinit-agent run --help for the settings"
			}
			ps = append(ps, p)
			continue
		}
		if err := fs.Set(fl.Name, value); err != nil {
			ps = append(ps, rules.Problem{Pos: e.Pos, Rule: where, Msg: fmt.Sprintf("%s=%q: %v", name, value, err)})
			continue
		}
		if fl.Name == "rules-file" && value != DefaultRulesFile {
			ps = append(ps, rules.Problem{Pos: e.Pos, Rule: where, Msg: fmt.Sprintf("the agent would read its rules from %s, not from the configFiles entry at %s", value, DefaultRulesFile),
				Fix: "remove " + name})
		}
	}
	if err := f.check(); err != nil && len(ps) == 0 {
		ps = append(ps, rules.Problem{Pos: env[0].Pos, Rule: where, Msg: "nodeinit-agent run would refuse to start: " + err.Error()})
	}
	return ps
}
