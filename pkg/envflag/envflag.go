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
	"regexp"
	"strconv"
	"strings"

	"github.com/talos-nodeinit/talos-nodeinit/pkg/suggest"
)

// Name is the environment variable for a flag: prefix, then the flag name in
// upper case with dashes as underscores.
func Name(prefix, flagName string) string {
	return prefix + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// Parse parses args, then sets each flag not given on the command line from
// its environment variable, if present. A bad value names the variable.
// The environment is the process's as it was given (Environ): a variable
// set more than once takes its last value.
func Parse(fs *flag.FlagSet, prefix string, args []string) error {
	return ParseEnviron(fs, prefix, args, Environ())
}

// ParseEnviron is Parse with the environment given: NAME=value entries,
// duplicates included, the last of a name winning. Talos appends a
// patch's environment entries to an ExtensionServiceConfig's (and a
// ContainerConfig's) instead of replacing them, so the entry a later
// patch meant is the last one; Go's os.Getenv, like C's getenv, would
// return the first.
func ParseEnviron(fs *flag.FlagSet, prefix string, args, environ []string) error {
	if err := fs.Parse(args); err != nil {
		return err
	}
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	last := map[string]string{}
	for _, e := range environ {
		if k, v, ok := strings.Cut(e, "="); ok {
			last[k] = v
		}
	}
	var err error
	fs.VisitAll(func(f *flag.Flag) {
		if _, isVersion := f.Value.(*versionFlag); given[f.Name] || err != nil || isVersion {
			return
		}
		env := Name(prefix, f.Name)
		if v, ok := last[env]; ok {
			if e := fs.Set(f.Name, v); e != nil {
				err = fmt.Errorf("environment %s=%q: %w", env, v, e)
			}
		}
	})
	return err
}

// Repeated names each variable with prefix set more than once in environ,
// with its values in order: a message per variable, for a warning at start.
func Repeated(prefix string, environ []string) []string {
	values := map[string][]string{}
	var order []string
	for _, e := range environ {
		k, v, ok := strings.Cut(e, "=")
		if !ok || !strings.HasPrefix(k, prefix) {
			continue
		}
		if _, seen := values[k]; !seen {
			order = append(order, k)
		}
		values[k] = append(values[k], v)
	}
	var out []string
	for _, k := range order {
		if vs := values[k]; len(vs) > 1 {
			out = append(out, fmt.Sprintf("%s is set %d times (%s): using the last, %q. Talos appends the environment entries of each patch; keep one",
				k, len(vs), strings.Join(quoteAll(vs), ", "), vs[len(vs)-1]))
		}
	}
	return out
}

func quoteAll(vs []string) []string {
	out := make([]string, len(vs))
	for i, v := range vs {
		out[i] = strconv.Quote(v)
	}
	return out
}

// Environ is the process's environment with the duplicates it was given:
// Go's os.Environ keeps only the first entry of each name, so a name still
// holding that first value is listed with every entry /proc/self/environ
// has for it (the environment at exec). A name set or changed since (by
// the process itself) is listed with its current value.
func Environ() []string {
	cur := os.Environ()
	b, err := os.ReadFile("/proc/self/environ")
	if err != nil {
		return cur
	}
	raw := map[string][]string{}
	for e := range strings.SplitSeq(string(b), "\x00") {
		if k, v, ok := strings.Cut(e, "="); ok {
			raw[k] = append(raw[k], v)
		}
	}
	var out []string
	for _, e := range cur {
		k, v, _ := strings.Cut(e, "=")
		if vs := raw[k]; len(vs) > 1 && vs[0] == v {
			for _, rv := range vs {
				out = append(out, k+"="+rv)
			}
			continue
		}
		out = append(out, e)
	}
	return out
}

// Spelling is how a flag is written on the command line, as Kubernetes
// commands write it: -o for a one-letter flag, --name for the others.
func Spelling(name string) string {
	if len(name) == 1 {
		return "-" + name
	}
	return "--" + name
}

// Usage prints the flags with their environment variables, for --help.
func Usage(fs *flag.FlagSet, prefix string) {
	out := fs.Output()
	fs.VisitAll(func(f *flag.Flag) {
		name, usage := flag.UnquoteUsage(f)
		line := "  " + Spelling(f.Name)
		if name != "" {
			line += " " + name
		}
		fmt.Fprintf(out, "%s\n    \t%s", line, strings.ReplaceAll(usage, "\n", "\n    \t"))
		if f.DefValue != "" && f.DefValue != "false" {
			fmt.Fprintf(out, " (default %q)", f.DefValue)
		}
		if _, isVersion := f.Value.(*versionFlag); !isVersion {
			fmt.Fprintf(out, " [$%s]", Name(prefix, f.Name))
		}
		fmt.Fprintln(out)
	})
}

// NewFlagSet returns a flag set for one command, named as a user types it
// ("nodeinit-agent run"), whose --help prints the synopsis and every flag
// with its environment variable.
func NewFlagSet(name, synopsis, prefix string, out io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(out)
	fs.Usage = func() {
		fmt.Fprintf(out, "%s\n\nFlags:\n", synopsis)
		Usage(fs, prefix)
	}
	return fs
}

// ParseCommand parses a command's arguments and the environment. When the
// command should not go on (--help, --version, a bad flag, stray arguments)
// it returns stop and the exit code, having said why: a bad flag in one
// line, then where the usage is.
func ParseCommand(fs *flag.FlagSet, prefix string, args []string) (code int, stop bool) {
	out, usage := fs.Output(), fs.Usage
	// The flag package prints the error and the whole usage itself; say it
	// once, shortly, instead.
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	err := Parse(fs, prefix, args)
	fs.SetOutput(out)
	fs.Usage = usage
	switch {
	case errors.Is(err, flag.ErrHelp):
		usage()
		return 0, true
	case err != nil:
		return Fail(fs, respell(err.Error())), true
	}
	if f := fs.Lookup("version"); f != nil {
		if v, ok := f.Value.(*versionFlag); ok && v.on {
			fmt.Fprintln(v.out, v.text)
			return 0, true
		}
	}
	if fs.NArg() > 0 {
		return Fail(fs, fmt.Sprintf("unexpected arguments: %q", fs.Args())), true
	}
	return 0, false
}

// Fail reports a bad flag or value and where the usage is; it returns the
// exit code for bad usage, 2.
func Fail(fs *flag.FlagSet, msg string) int {
	fmt.Fprintf(fs.Output(), "%s\nRun '%s --help' for usage.\n", msg, fs.Name())
	return 2
}

// The flag package names flags with one dash whatever the user typed.
var flagInMessage = regexp.MustCompile(`(flag provided but not defined|flag needs an argument|for flag):? -([A-Za-z0-9][-A-Za-z0-9_]*)`)

func respell(msg string) string {
	msg = flagInMessage.ReplaceAllStringFunc(msg, func(m string) string {
		i := strings.LastIndex(m, " -")
		return m[:i+1] + Spelling(m[i+2:])
	})
	return strings.Replace(msg, "flag provided but not defined:", "unknown flag:", 1)
}

// AddVersion adds --version, which prints text to out and stops the
// command. It is never read from the environment.
func AddVersion(fs *flag.FlagSet, out io.Writer, text string) {
	fs.Var(&versionFlag{out: out, text: text}, "version", "print the version and exit")
}

type versionFlag struct {
	on   bool
	out  io.Writer
	text string
}

func (v *versionFlag) IsBoolFlag() bool { return true }
func (v *versionFlag) String() string {
	if v == nil {
		return "false"
	}
	return strconv.FormatBool(v.on)
}

func (v *versionFlag) Set(s string) (err error) {
	v.on, err = strconv.ParseBool(s)
	return err
}

// Unknown names each variable with prefix in environ that is no flag of
// fs, and the flag's variable it was probably meant as: a message per
// variable, for a warning at start. A misspelt setting is otherwise
// ignored without a word, and the flag keeps its default.
func Unknown(fs *flag.FlagSet, prefix string, environ []string) []string {
	known := map[string]bool{}
	var names []string // without the prefix, which every one shares
	fs.VisitAll(func(f *flag.Flag) {
		known[Name(prefix, f.Name)] = true
		names = append(names, strings.TrimPrefix(Name(prefix, f.Name), prefix))
	})
	seen := map[string]bool{}
	var out []string
	for _, e := range environ {
		k, _, ok := strings.Cut(e, "=")
		if !ok || !strings.HasPrefix(k, prefix) || known[k] || seen[k] {
			continue
		}
		seen[k] = true
		msg := fmt.Sprintf("%s is not a setting of %s: ignored", k, fs.Name())
		if near, ok := suggest.Typo(strings.TrimPrefix(k, prefix), names); ok {
			msg += "; did you mean " + prefix + near + "?"
		}
		out = append(out, msg)
	}
	return out
}
