// Package envflag lets every command-line flag also come from the
// environment, the way Talos extension services and Kubernetes manifests are
// usually configured: --rules-file becomes NODEINIT_RULES_FILE. A flag given
// on the command line wins over the environment.
package envflag

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
)

// Name is the environment variable for a flag: prefix, then the flag name in
// upper case with dashes as underscores.
func Name(prefix, flagName string) string {
	return prefix + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// Parse parses args, then sets each flag not given on the command line from
// its environment variable, if present. A bad value names the variable.
func Parse(fs *flag.FlagSet, prefix string, args []string) error {
	if err := fs.Parse(args); err != nil {
		return err
	}
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	var err error
	fs.VisitAll(func(f *flag.Flag) {
		if given[f.Name] || err != nil {
			return
		}
		env := Name(prefix, f.Name)
		if v, ok := os.LookupEnv(env); ok {
			if e := fs.Set(f.Name, v); e != nil {
				err = fmt.Errorf("environment %s=%q: %w", env, v, e)
			}
		}
	})
	return err
}

// Usage prints the flags with their environment variables, for --help.
func Usage(fs *flag.FlagSet, prefix string) {
	out := fs.Output()
	fs.VisitAll(func(f *flag.Flag) {
		name, usage := flag.UnquoteUsage(f)
		line := "  --" + f.Name
		if name != "" {
			line += " " + name
		}
		fmt.Fprintf(out, "%s\n    \t%s", line, strings.ReplaceAll(usage, "\n", "\n    \t"))
		if f.DefValue != "" && f.DefValue != "false" {
			fmt.Fprintf(out, " (default %q)", f.DefValue)
		}
		fmt.Fprintf(out, " [$%s]\n", Name(prefix, f.Name))
	})
}

// NewFlagSet returns a flag set for one subcommand whose --help prints the
// synopsis and every flag with its environment variable.
func NewFlagSet(name, synopsis, prefix string, out io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(out)
	fs.Usage = func() {
		fmt.Fprintf(out, "%s\n\nFlags:\n", synopsis)
		Usage(fs, prefix)
	}
	return fs
}

// ParseCommand parses a subcommand's arguments and the environment. When
// the command should not go on (--help, a bad flag, stray arguments) it
// returns stop and the exit code, having said why.
func ParseCommand(fs *flag.FlagSet, prefix string, args []string) (code int, stop bool) {
	switch err := Parse(fs, prefix, args); {
	case errors.Is(err, flag.ErrHelp):
		return 0, true
	case err != nil:
		fmt.Fprintln(fs.Output(), err)
		return 2, true
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(fs.Output(), "unexpected arguments: %q\n", fs.Args())
		return 2, true
	}
	return 0, false
}
