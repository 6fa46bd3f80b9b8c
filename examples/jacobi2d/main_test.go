package main

import (
	"io"
	"math"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/charmgo/charmgo/chare"
	"github.com/stretchr/testify/require"
)

// small is a problem that runs in milliseconds: 16 blocks of 8×8 cells,
// AtSync every 5 iterations.
func small(iters int) Params {
	return Params{Blocks: 4, Size: 8, Iters: iters, LBPeriod: 5}
}

// run runs p and checks what main checks (every cell equals the serial
// computation's) and more: every iteration's largest change, bitwise.
func run(t *testing.T, p Params, cfg chare.Config) *Main {
	t.Helper()
	cfg.Stdout = io.Discard
	res := chare.RunWith(mainType, p, cfg)
	require.NoError(t, res.Err, "%+v", cfg)
	require.Equal(t, 0, res.Code)
	m := res.Main.(*Main)
	_, changes := Serial(p)
	require.Len(t, m.Residuals, len(changes))
	for i := range changes {
		require.Equal(t, math.Float64bits(changes[i]), math.Float64bits(m.Residuals[i]), "iteration %d", i+1)
	}
	return m
}

// Ghosts of an iteration reach a block before it gets there, while it
// waits at AtSync, after it moved (rotate moves every block at every
// balancing step), reordered across channels (--transport-chaos), and
// through msgpack (--wire-check): the cells are always the serial run's.
func TestTheCellsAreTheSerialRunsWhateverTheArrivalOrder(t *testing.T) {
	for _, cfg := range []chare.Config{
		{PEs: 1},
		{PEs: 2, Balancer: "rotate", WireCheck: true},
		{PEs: 3, Balancer: "greedyrefine", TransportChaos: 7},
		{PEs: 4, Balancer: "rotate", TransportChaos: 11},
		{PEs: 4, Balancer: "graph", TransportChaos: 12, WireCheck: true},
	} {
		run(t, small(40), cfg)
	}
}

// A PE killed at a time (jacobi2d reports no steps) under each protocol:
// the run recovers from its checkpoints and ends with the failure-free
// cells and changes.
func TestAFailureAtATimeEndsWithTheSameCells(t *testing.T) {
	for _, c := range []struct {
		iters int
		cfg   chare.Config
	}{
		{400, chare.Config{PEs: 2, FT: "none"}},
		{400, chare.Config{PEs: 2, FT: "scmel"}},
		{400, chare.Config{PEs: 3, FT: "camel", Balancer: "rotate"}},
		{400, chare.Config{PEs: 4, FT: "team", Teams: "2"}},
		{400, chare.Config{PEs: 4, FT: "camel", Teams: "2"}},
		{80, chare.Config{PEs: 3, FT: "camel", TransportChaos: 5}}, // (chaos delays every ghost)
		{400, chare.Config{PEs: 3, FT: "pessimist", Balancer: "rotate"}},
	} {
		c.cfg.CkptSteps = 40
		c.cfg.Kills = []chare.Kill{{PE: 1, Step: -1, After: 3 * time.Millisecond}}
		run(t, small(c.iters), c.cfg)
	}
}

// A run restarted from its checkpoint files, on another PE count, ends
// with the same cells.
func TestARestartEndsWithTheSameCells(t *testing.T) {
	dir := t.TempDir()
	p := small(60)
	run(t, p, chare.Config{PEs: 3, CkptSteps: 25, CheckpointDir: dir})
	run(t, p, chare.Config{PEs: 2, Restart: dir})
}

// The program as a user runs it (its own process: this test binary
// again): its flags the Go way next to the runtime's, --help (exit 0), a
// bad flag (one line, exit 2), a mistyped runtime flag.
func TestTheCommandLine(t *testing.T) {
	if args := os.Getenv(asMainEnv); args != "" {
		os.Args = append([]string{"jacobi2d"}, strings.Fields(args)...)
		main()
		return
	}
	cmd := func(args string) (string, string, int) {
		c := exec.Command(os.Args[0], "-test.run", "^TestTheCommandLine$")
		c.Env = append(os.Environ(), asMainEnv+"="+args)
		var out, errb strings.Builder
		c.Stdout, c.Stderr = &out, &errb
		err := c.Run()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else {
			require.NoError(t, err)
		}
		return out.String(), errb.String(), code
	}
	out, _, code := cmd("+p2 -blocks 3 --size=8 -iters 30 -lb-period 0 +balancer rotate")
	require.Equal(t, 0, code)
	require.Contains(t, out, "jacobi2d: 3×3 blocks of 8×8 cells on 2 PEs, 30 iterations")
	require.Contains(t, out, "check passed")
	out, _, code = cmd("--help")
	require.Equal(t, 0, code)
	for _, want := range []string{"usage: jacobi2d [flags]", "-blocks int", "-lb-period int", "+p N, --pes N"} {
		require.Contains(t, out, want)
	}
	out, errs, code := cmd("-blocks x")
	require.Equal(t, 2, code)
	require.Empty(t, out)
	require.Equal(t, "jacobi2d: flag -blocks: invalid value \"x\": parse error\n", errs)
	_, errs, code = cmd("-size 0 extra")
	require.Equal(t, 2, code)
	require.Equal(t, "jacobi2d: unexpected argument \"extra\" (jacobi2d takes flags only: see --help)\n", errs)
	_, errs, code = cmd("-size 0")
	require.Equal(t, 2, code)
	require.Equal(t, "jacobi2d: flag -size: 0: want 1 to 4096\n", errs)
	_, errs, code = cmd("+ppn 2")
	require.Equal(t, 2, code)
	require.Equal(t, "jacobi2d: unknown runtime flag +ppn (did you mean ++ppn? see --help)\n", errs)
}

const asMainEnv = "JACOBI2D_AS_MAIN"
