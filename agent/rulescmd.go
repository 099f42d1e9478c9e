package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/talos-nodeinit/talos-nodeinit/pkg/rules"
	"github.com/talos-nodeinit/talos-nodeinit/pkg/rulesource"
)

// rulesFileFlag defines --rules-file, run's spelling, and --rules, the
// older one validate and explain used, as an alias.
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
