// Package envflag lets every command-line flag also come from the
// environment, the way Talos extension services and Kubernetes manifests are
// usually configured: --rules-file becomes NODEINIT_RULES_FILE. A flag given
// on the command line wins over the environment.
package envflag

import (
	"flag"
	"fmt"
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
