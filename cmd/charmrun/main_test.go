package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func buildLeanMD(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "leanmd")
	out, err := exec.Command("go", "build", "-o", bin, "../../apps/leanmd").CombinedOutput()
	require.NoError(t, err, string(out))
	return bin
}

func TestCharmrunRunsLeanMD(t *testing.T) {
	bin := buildLeanMD(t)
	var out, errb bytes.Buffer
	code := run([]string{"+p2", "--watchdog", "30s", bin, "2", "2", "2", "3", "--progress", "1"}, &out, &errb)
	require.Equal(t, 0, code, errb.String())
	s := out.String()
	for _, want := range []string{"LENNARD JONES MOLECULAR DYNAMICS START UP ...", "Cell Array Dimension X:2 Y:2 Z:2 of size 15 15 30",
		"Final Step Count:3", "Cells: 2 X 2 X 2 .... created", "Computes: 304 .... created", "Starting simulation ....",
		"Step 1 Benchmark Time", "Step 3 Benchmark Time", "Energy conservation test passed", "Total application time",
		"atoms 1322, cells 8, computes 304, steps 3, PEs 2"} {
		require.Contains(t, s, want)
	}
}

// Bad input: one clear line naming the argument and the range, exit 2, no
// stack trace — from charmrun and from the program itself.
func TestBadInput(t *testing.T) {
	bin := buildLeanMD(t)
	cases := []struct {
		args []string
		want string
	}{
		{[]string{bin, "3", "x", "3"}, `leanmd: argument Y: "x" is not a whole number (want 1 to 64)`},
		{[]string{bin, "-3", "3", "3"}, "leanmd: argument X: -3 is out of range (want 1 to 64)"},
		{[]string{bin, "3", "3", "3", "0"}, "leanmd: argument steps: 0 is out of range"},
		{[]string{"+p5000", bin}, "leanmd: flag +p: 5000 is out of range (want 1 to 1024)"},
		{[]string{bin, "--frobnicate"}, "leanmd: unknown runtime flag --frobnicate (see --help)"},
		{[]string{"+pmany", bin}, `leanmd: flag +p: "many" is not a whole number`},
		{[]string{bin, "--progress", "0"}, "leanmd: flag --progress:"},
		{[]string{"++n", "2", "++ppn", "2", "+p", "3", bin}, "charmrun: flags +p 3, ++n 2, ++ppn 2: 2 processes of 2 PEs are 4 PEs, not 3"},
		{[]string{"++n", "0", bin}, "charmrun: ++n 0: want a whole number from 1 to 1024"},
		{[]string{"++n", "2", "++nodelist", "/no/such/file", bin}, "charmrun: ++nodelist /no/such/file: open /no/such/file: no such file"},
		{[]string{"--restart", "/no/such/dir", bin}, "leanmd: flag --restart: /no/such/dir does not exist"},
		{[]string{"--ft", "camel", "--kill", "1@0", bin, "2", "2", "2", "3"}, "leanmd: flag --kill: PE 1 at step 0 can never happen: the program runs steps 1 to 3"},
		{[]string{"--frobnicate", bin}, "charmrun: unknown option --frobnicate before the program"},
		{[]string{"++bogus", bin}, "charmrun: unknown charmrun option ++bogus"},
		{[]string{"./no-such-program"}, "charmrun: program ./no-such-program:"},
		{nil, "charmrun: no program to run"},
	}
	for _, c := range cases {
		var out, errb bytes.Buffer
		code := run(c.args, &out, &errb)
		require.Equal(t, 2, code, "%v: %s", c.args, errb.String())
		msg := strings.TrimSpace(errb.String())
		require.True(t, strings.HasPrefix(msg, c.want), "%v: got %q", c.args, msg)
		require.NotContains(t, msg, "\n", "one line")
		require.NotContains(t, msg, "goroutine")
	}
}

func TestHelp(t *testing.T) {
	var out, errb bytes.Buffer
	require.Equal(t, 0, run([]string{"--help"}, &out, &errb))
	require.Contains(t, out.String(), "usage: charmrun")
	bin := buildLeanMD(t)
	out.Reset()
	require.Equal(t, 0, run([]string{bin, "--help"}, &out, &errb))
	for _, want := range []string{"usage: leanmd", "--original-physics", "--progress N", "+p N, --pes N", "--wire-check"} {
		require.Contains(t, out.String(), want)
	}
}

// Every runtime flag can go before the program (charmrun passes it on),
// and a package directory is built and run: the README's example works
// in a fresh clone.
func TestRuntimeFlagsBeforeTheProgramAndAPackage(t *testing.T) {
	dir := t.TempDir()
	var out, errb bytes.Buffer
	code := run([]string{"+p", "2", "--ft", "camel", "--kill", "1@2", "--ckpt-dir", dir, "--watchdog=30s", "--wire-check",
		"../../apps/leanmd", "2", "2", "2", "3", "20", "20", "2"}, &out, &errb)
	require.Equal(t, 0, code, errb.String())
	require.Contains(t, out.String(), "atoms 1322, cells 8, computes 304, steps 3, PEs 2")
	require.Contains(t, out.String(), "fault tolerance: camel, 1 failures, 1 PEs rolled back")
	require.Contains(t, errb.String(), "PE 1 failed (injected: PE 1 at step 2); it recovers alone (camel)")
	_, err := os.Stat(filepath.Join(dir, "LATEST"))
	require.NoError(t, err, "--ckpt-dir reached the program")

	out.Reset()
	errb.Reset()
	require.Equal(t, 2, run([]string{"+p2", t.TempDir()}, &out, &errb))
	require.Contains(t, errb.String(), "is a directory without Go files")
}
