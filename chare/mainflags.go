package chare

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// MainWith is Main for a program with flags and arguments of its own,
// declared the Go way on fs (flag.NewFlagSet(name, flag.ContinueOnError),
// then fs.IntVar and the rest): the command line holds the runtime's
// flags (Charm++'s spellings and Go's) and the program's (-name value,
// --name=value, -v for a boolean), in any order. Once they are parsed,
// parse turns the positional arguments left (and what the flags set) into
// main's argument, checked; its error is the run's one line, exit 2.
// --help prints fs's usage (fs.Usage, when the program set one to
// describe its positional arguments; then its flags) and the runtime's.
// Then it runs as Main does.
//
//	var p Params
//	fs := flag.NewFlagSet("jacobi2d", flag.ContinueOnError)
//	fs.IntVar(&p.Blocks, "blocks", 4, "blocks a side")
//	chare.MainWith(mainType, fs, func(args []string) (Params, error) { return p, p.Validate(args) })
func MainWith[C, A any](main *Type[C, A], fs *flag.FlagSet, parse func(args []string) (A, error)) {
	os.Exit(mainWith(main, fs, parse, os.Args[1:], os.Stdout, os.Stderr))
}

func mainWith[C, A any](main *Type[C, A], fs *flag.FlagSet, parse func(args []string) (A, error), args []string, stdout, stderr io.Writer) int {
	prog := fs.Name()
	if prog == "" {
		prog = filepath.Base(os.Args[0])
	}
	own, err := FlagSetFlags(fs)
	if err != nil {
		panic("chare.MainWith: " + err.Error())
	}
	cfg, err := ParseFlagsWith(args, own)
	if errors.Is(err, ErrHelp) {
		WriteFlagSetUsage(stdout, fs)
		fmt.Fprintln(stdout)
		WriteUsage(stdout)
		return 0
	}
	var arg A
	if err == nil {
		arg, err = parse(cfg.Args)
	}
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", prog, err)
		return 2
	}
	cfg.Notices = stderr
	return finish(prog, RunWith(main, arg, cfg))
}

// FlagSetFlags is fs's flags as ParseFlagsWith takes them: each as
// -name and --name; a boolean also as -name=value. A flag named as one
// of the runtime's is an error. The list is never nil: a program whose
// line MainWith parses declares its flags, even none.
func FlagSetFlags(fs *flag.FlagSet) ([]Flag, error) {
	out := []Flag{} // not nil: the program declares its flags, even none
	var errs []error
	fs.VisitAll(func(f *flag.Flag) {
		isBool := false
		if b, ok := f.Value.(interface{ IsBoolFlag() bool }); ok && b.IsBoolFlag() {
			isBool = true
		}
		arg := ""
		if !isBool {
			if arg, _ = flag.UnquoteUsage(f); arg == "" {
				arg = "value"
			}
		}
		set := func(v string) error {
			if isBool && v == "" {
				v = "true"
			}
			if err := f.Value.Set(v); err != nil {
				return fmt.Errorf("invalid value %q: %v", v, err)
			}
			return nil
		}
		for _, name := range []string{"-" + f.Name, "--" + f.Name} {
			if known, _ := RuntimeFlag(name); known || name == "-h" || name == "-help" || name == "--help" {
				errs = append(errs, fmt.Errorf("the program's flag %s is one of the runtime's", name))
			}
			out = append(out, Flag{Name: name, Arg: arg, Usage: f.Usage, Set: set, boolValue: isBool})
		}
	})
	return out, errors.Join(errs...)
}

// WriteFlagSetUsage writes the usage of a program whose flags are fs's:
// fs.Usage when the program set it (its own words on its arguments),
// otherwise a line naming the program; then fs's flags.
func WriteFlagSetUsage(w io.Writer, fs *flag.FlagSet) {
	out := fs.Output()
	fs.SetOutput(w)
	defer fs.SetOutput(out)
	if fs.Usage != nil {
		fs.Usage()
	} else {
		fmt.Fprintf(w, "usage: %s [flags] [arguments]\n", fs.Name())
	}
	has := false
	fs.VisitAll(func(*flag.Flag) { has = true })
	if has {
		fmt.Fprintf(w, "\n%s flags:\n", fs.Name())
		fs.PrintDefaults()
	}
}

// didYouMean suggests the known flag nearest name, a flag nobody knows
// ("did you mean ++ppn? "), or "".
func didYouMean(name string, own []Flag) string {
	cands := []string{"+p"}
	for n := range runtimeFlags {
		cands = append(cands, n)
	}
	for _, f := range own {
		cands = append(cands, f.Name)
	}
	slices.Sort(cands) // ties go the same way every time
	bare := strings.TrimLeft(name, "+-")
	best, bestD := "", 3
	for _, c := range cands {
		d := editDistance(name, c)
		if strings.TrimLeft(c, "+-") == bare {
			d = 0 // the right word with the wrong dashes: +ppn for ++ppn
		}
		if d < bestD {
			best, bestD = c, d
		}
	}
	if best == "" || best == name {
		return ""
	}
	return "did you mean " + best + "? "
}

// editDistance is the Levenshtein distance between a and b.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
