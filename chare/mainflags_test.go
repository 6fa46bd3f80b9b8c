package chare

import (
	"bytes"
	"flag"
	"testing"

	"github.com/stretchr/testify/require"
)

type mfMain struct{}

func (*mfMain) Init(*Ctx, mfParams) {}

type mfParams struct {
	Blocks, Size int
	Verbose      bool
	Args         []string
}

var mfMainT = NewMainTypeOf[mfMain, mfParams]("mf.Main")

// mfFlags is a program's own flags, the Go way.
func mfFlags(p *mfParams) *flag.FlagSet {
	fs := flag.NewFlagSet("mf", flag.ContinueOnError)
	fs.IntVar(&p.Blocks, "blocks", 4, "blocks a side")
	fs.IntVar(&p.Size, "size", 8, "cells a block side")
	fs.BoolVar(&p.Verbose, "v", false, "say more")
	return fs
}

// A program's Go flags mix with the runtime's, in either spelling, and
// what is left is its positional arguments.
func TestProgramFlagsTheGoWay(t *testing.T) {
	cases := []struct {
		args []string
		pes  int
		want mfParams
	}{
		{[]string{"+p2", "-blocks", "3", "--size=16", "-v", "7"}, 2, mfParams{Blocks: 3, Size: 16, Verbose: true, Args: []string{"7"}}},
		{[]string{"--blocks=5", "--pes", "3", "-v=false", "x", "y"}, 3, mfParams{Blocks: 5, Size: 8, Args: []string{"x", "y"}}},
		{[]string{"--v", "-size", "2", "--", "-blocks"}, 0, mfParams{Blocks: 4, Size: 2, Verbose: true, Args: []string{"-blocks"}}},
	}
	for _, c := range cases {
		var p mfParams
		own, err := FlagSetFlags(mfFlags(&p))
		require.NoError(t, err)
		cfg, err := ParseFlagsWith(c.args, own)
		require.NoError(t, err, c.args)
		p.Args = cfg.Args
		require.Equal(t, c.want, p, c.args)
		if c.pes > 0 {
			require.Equal(t, c.pes, cfg.PEs)
		}
	}
}

// --help lists the program's usage and flags, then the runtime's, and
// exits 0; a bad value of a program's flag and a refusal of its
// arguments are one line and exit 2.
func TestMainWithHelpAndBadInput(t *testing.T) {
	run := func(args ...string) (int, string, string) {
		var p mfParams
		fs := mfFlags(&p)
		fs.Usage = func() { fs.Output().Write([]byte("usage: mf [flags] [name]\n")) }
		var out, errb bytes.Buffer
		code := mainWith(mfMainT, fs, func(a []string) (mfParams, error) {
			if len(a) > 1 {
				return p, errString("argument 2: one name at most")
			}
			return p, nil
		}, args, &out, &errb)
		return code, out.String(), errb.String()
	}
	code, out, errs := run("--help")
	require.Equal(t, 0, code)
	require.Empty(t, errs)
	require.Contains(t, out, "usage: mf [flags] [name]\n")
	require.Contains(t, out, "mf flags:\n  -blocks int\n    \tblocks a side (default 4)\n")
	require.Contains(t, out, "+p N")
	code, out, errs = run("-blocks", "x")
	require.Equal(t, 2, code)
	require.Empty(t, out)
	require.Equal(t, "mf: flag -blocks: invalid value \"x\": parse error\n", errs)
	code, _, errs = run("a", "b")
	require.Equal(t, 2, code)
	require.Equal(t, "mf: argument 2: one name at most\n", errs)
}

type errString string

func (e errString) Error() string { return string(e) }

// A program's flag may not take a runtime flag's name.
func TestProgramFlagsMayNotShadowTheRuntimes(t *testing.T) {
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	fs.Int("pes", 1, "")
	fs.Bool("h", false, "")
	_, err := FlagSetFlags(fs)
	require.EqualError(t, err, "the program's flag -h is one of the runtime's\nthe program's flag -pes is one of the runtime's\nthe program's flag --pes is one of the runtime's")
}

// A mistyped flag names the one meant.
func TestAMistypedFlagSuggestsTheRightOne(t *testing.T) {
	cases := map[string]string{
		"+ppn":     "unknown runtime flag +ppn (did you mean ++ppn? see --help)",
		"++pnn":    "unknown runtime flag ++pnn (did you mean ++ppn? see --help)",
		"--kil":    "unknown runtime flag --kil (did you mean --kill? see --help)",
		"+balance": "unknown runtime flag +balance (did you mean +balancer? see --help)",
		"--zzzzzz": "unknown runtime flag --zzzzzz (see --help)",
	}
	for flagName, want := range cases {
		_, err := ParseFlags([]string{flagName, "2"})
		require.EqualError(t, err, want, flagName)
	}
}

// A program that declares its flags (MainWith) has a mistyped one refused,
// naming the one meant, in either spelling: -itres used to reach the
// program's positional arguments, and --itres=10 was called an unknown
// runtime flag. A negative number stays an argument; after "--" anything
// does. The program's flags as given are recorded (ProgramFlags).
func TestAProgramsMistypedFlagIsRefused(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"-sise", "10"}, "unknown flag -sise: neither the program's nor the runtime's (did you mean -size? see --help)"},
		{[]string{"--blokcs=10"}, "unknown flag --blokcs=10: neither the program's nor the runtime's (did you mean --blocks? see --help)"},
		{[]string{"7", "-x"}, "unknown flag -x: neither the program's nor the runtime's (did you mean -v? see --help)"},
		{[]string{"--kil", "1@2"}, "unknown flag --kil: neither the program's nor the runtime's (did you mean --kill? see --help)"},
		{[]string{"+ppn", "2"}, "unknown runtime flag +ppn (did you mean ++ppn? see --help)"},
	} {
		var p mfParams
		own, err := FlagSetFlags(mfFlags(&p))
		require.NoError(t, err)
		_, err = ParseFlagsWith(c.args, own)
		require.EqualError(t, err, c.want, c.args)
	}
	var p mfParams
	own, err := FlagSetFlags(mfFlags(&p))
	require.NoError(t, err)
	cfg, err := ParseFlagsWith([]string{"-3", "-size", "5", "-.5", "--blocks=2", "-v", "--", "-itres"}, own)
	require.NoError(t, err)
	require.Equal(t, []string{"-3", "-.5", "-itres"}, cfg.Args)
	require.Equal(t, []string{"-size", "5", "--blocks=2", "-v"}, cfg.ProgramFlags)

	// a program that declares no flags refuses them too; one that parses
	// its own line (ParseFlags) is given a single-dash word as an argument
	none, err := FlagSetFlags(flag.NewFlagSet("none", flag.ContinueOnError))
	require.NoError(t, err)
	_, err = ParseFlagsWith([]string{"-itres", "10"}, none)
	require.EqualError(t, err, "unknown flag -itres: neither the program's nor the runtime's (see --help)")
	cfg, err = ParseFlags([]string{"-itres", "10"})
	require.NoError(t, err)
	require.Equal(t, []string{"-itres", "10"}, cfg.Args)
}
