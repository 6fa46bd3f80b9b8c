package chare_test

import (
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/charmgo/charmgo/chare"
	"github.com/stretchr/testify/require"
)

func TestKillFlagsAndFiles(t *testing.T) {
	file := filepath.Join(t.TempDir(), "kills")
	require.NoError(t, os.WriteFile(file, []byte("# Charm++ +killFile lines, and steps\n1 2.5\n\n0 @7\n"), 0o644))
	cfg, err := chare.ParseFlags([]string{"--kill", "1@12", "--kill-file", file, "+p3"})
	require.NoError(t, err)
	require.Equal(t, []chare.Kill{{PE: 1, Step: 12}, {PE: 1, Step: -1, After: 2500 * time.Millisecond}, {PE: 0, Step: 7}}, cfg.Kills)

	for _, c := range []struct {
		args []string
		err  string
	}{
		{[]string{"--kill", "1"}, `flag --kill: "1": want PE@STEP`},
		{[]string{"--kill", "a@3"}, `flag --kill: "a@3": PE "a" is not a PE number`},
		{[]string{"--kill", "1@3x"}, `flag --kill: "1@3x": "3x" is neither a step (a whole number) nor a time after the start (2.5s, 300ms)`},
		{[]string{"--kill-file", filepath.Join(t.TempDir(), "none")}, "flag --kill-file: open"},
	} {
		_, err := chare.ParseFlags(c.args)
		require.ErrorContains(t, err, c.err, c.args)
	}
	// a kill at a step, in a program that reports none, says what to do
	res := chare.Run(helloMain, chare.Config{PEs: 2, Stdout: io.Discard, Kills: []chare.Kill{{PE: 1, Step: 5}}})
	require.Equal(t, 2, res.Code)
	require.ErrorContains(t, res.Err, "flag --kill: PE 1 at step 5 never happened: the run ended first (after ")
	require.ErrorContains(t, res.Err, "; the program reports no steps (chare.AtStep): kill at a time instead, --kill 1@")
	res = chare.Run(ckMain, chare.Config{PEs: 2, Kills: []chare.Kill{{PE: 2, Step: 1}}})
	require.Equal(t, 2, res.Code)
	require.ErrorContains(t, res.Err, "flag --kill: PE 2, but the run has 2 PEs (0..1)")
	res = chare.Run(ckMain, chare.Config{PEs: 2, FT: "camel", CkptEvery: time.Second})
	require.Equal(t, 2, res.Code)
	require.ErrorContains(t, res.Err, "flag --ckpt-period 1s: a checkpoint cadence in time needs a protocol that rolls every PE back (--ft none)")
	res = chare.Run(ckMain, chare.Config{PEs: 2, FT: "causal"})
	require.Equal(t, 2, res.Code)
	require.ErrorContains(t, res.Err, `flag --ft: unknown protocol "causal"`)
	for _, c := range []struct {
		cfg chare.Config
		err string
	}{
		{chare.Config{PEs: 4, FT: "scmel", Teams: "2"}, "flag --teams: --ft scmel logs no teams (teams are for --ft team and camel)"},
		{chare.Config{PEs: 4, FT: "team"}, "flag --teams: --ft team needs teams: --teams N (blocks of N consecutive PEs), --teams auto or, with several processes, --teams process"},
		{chare.Config{PEs: 5, FT: "team", Teams: "3"}, "flag --teams 3: teams {0-2} {3-4} on 5 PEs: PE 2's checkpoint copy would be held in its own team, which fails with it (no team may hold more than half the PEs)"},
		{chare.Config{PEs: 4, FT: "camel", Teams: "4"}, "flag --teams 4: teams {0-3} on 4 PEs: PE 0's checkpoint copy would be held in its own team"},
	} {
		res = chare.Run(ckMain, c.cfg)
		require.Equal(t, 2, res.Code, c.err)
		require.ErrorContains(t, res.Err, c.err)
	}
}

func TestFTFlag(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
		err  string
	}{
		{nil, "", ""},
		{[]string{"--ft", "camel"}, "camel", ""},
		{[]string{"--ft=SCMEL"}, "scmel", ""},
		{[]string{"+ft", "none"}, "none", ""},
		{[]string{"--ft", "team"}, "team", ""},
		{[]string{"--ft", "mcml"}, "", `flag --ft: mcml is a log limit on a logging protocol: --ft scmel --log-limit SIZE (or camel, team)`},
		{[]string{"--ft", "pcml"}, "", `flag --ft: unknown protocol "pcml" (want none, scmel, camel, team, pessimist, spmd)`},
		{[]string{"--ft", "team", "--teams", "0"}, "", "flag --teams: 0 is out of range (want 1 to 1048576)"},
		{[]string{"--ft", "team", "--teams", "two"}, "", `flag --teams: "two" is neither a number of PEs per team, process nor auto`},
		{[]string{"--ft", "team", "--teams", "auto", "--teams-alpha", "0.5", "--teams-beta", "0.2"}, "team", ""},
		{[]string{"--ft", "team", "--teams-alpha", "-1"}, "", `flag --teams-alpha: "-1" is not a weight from 0 to 100`},
		{[]string{"--ft", "team", "--teams-beta", "NaN"}, "", `flag --teams-beta: "NaN" is not a weight from 0 to 100`},
		{[]string{"--ft"}, "", "flag --ft needs a value"},
	} {
		cfg, err := chare.ParseFlags(c.args)
		if c.err != "" {
			require.EqualError(t, err, c.err)
			continue
		}
		require.NoError(t, err)
		require.Equal(t, c.want, cfg.FT)
	}
}

// --log-limit and --log-limit-strategy: sizes as --max-memory reads
// them; a limit on a protocol that does not bound its log, a strategy
// without a limit and a limit across processes are refused, each in one
// line naming the flag.
func TestLogLimitFlags(t *testing.T) {
	for _, c := range []struct {
		args  []string
		limit uint64
		err   string
	}{
		{[]string{"--ft", "scmel", "--log-limit", "64M"}, 64 << 20, ""},
		{[]string{"--ft", "team", "--log-limit=512K", "--log-limit-strategy", "heaviest"}, 512 << 10, ""},
		{[]string{"--log-limit", "1000"}, 1000, ""},
		{[]string{"--log-limit", "0"}, 0, `flag --log-limit: "0" is not a size in bytes above zero (64M, 512K, 1G)`},
		{[]string{"--log-limit", "lots"}, 0, `flag --log-limit: "lots" is not a size in bytes above zero (64M, 512K, 1G)`},
		{[]string{"--log-limit-strategy", "lightest"}, 0, `flag --log-limit-strategy: unknown strategy "lightest" (want heaviest or cluster)`},
		{[]string{"--log-limit", "1M", "--log-limit-strategy", "cluster"}, 1 << 20, ""},
		{[]string{"--log-limit"}, 0, "flag --log-limit needs a value"},
	} {
		cfg, err := chare.ParseFlags(c.args)
		if c.err != "" {
			require.EqualError(t, err, c.err)
			continue
		}
		require.NoError(t, err)
		require.Equal(t, c.limit, cfg.LogLimit)
	}
	for _, c := range []struct {
		cfg chare.Config
		err string
	}{
		{chare.Config{PEs: 2, LogLimit: 1 << 20}, "flag --log-limit: --ft none does not bound its log (a limit is for --ft scmel, camel and team)"},
		{chare.Config{PEs: 2, FT: "scmel", LogLimitStrategy: "heaviest"}, "flag --log-limit-strategy: no --log-limit to apply it to"},
	} {
		res := chare.Run(ckMain, c.cfg)
		require.Equal(t, 2, res.Code, c.err)
		require.EqualError(t, res.Err, c.err)
	}
}

func TestCheckpointPeriodFlag(t *testing.T) {
	for _, c := range []struct {
		args  []string
		steps int
		every time.Duration
		err   string
	}{
		{[]string{"--ckpt-period", "25"}, 25, 0, ""},
		{[]string{"--ckpt-period=30s"}, 0, 30 * time.Second, ""},
		{[]string{"+ckptPeriod", "1m30s"}, 0, 90 * time.Second, ""},
		{[]string{"--ckpt-period", "0"}, 0, 0, "flag --ckpt-period: 0 steps: want at least 1"},
		{[]string{"--ckpt-period", "-2s"}, 0, 0, "flag --ckpt-period: -2s: want a positive duration"},
		{[]string{"--ckpt-period", "often"}, 0, 0, `flag --ckpt-period: "often" is neither a number of steps nor a duration (30s, 2m)`},
	} {
		cfg, err := chare.ParseFlags(c.args)
		if c.err != "" {
			require.EqualError(t, err, c.err)
			continue
		}
		require.NoError(t, err)
		require.Equal(t, c.steps, cfg.CkptSteps)
		require.Equal(t, c.every, cfg.CkptEvery)
	}
}

// RuntimeFlag knows every flag ParseFlags takes, and which take values:
// a flag it knows parses with a value (or alone), one it does not is
// refused by ParseFlags.
func TestRuntimeFlagTableMatchesTheParser(t *testing.T) {
	values := map[string]string{"+p": "2", "--pes": "2", "-pes": "2", "--branching": "3", "+balancer": "rotate", "--lb": "none",
		"--balancer": "RotateLB", "--spin": "5", "--ckpt-period": "4", "+ckptPeriod": "4", "--ckpt-dir": t.TempDir(),
		"--ft": "camel", "+ft": "none", "--kill": "1@3", "--kill-file": writeTemp(t, "1 @3\n"), "+killFile": writeTemp(t, "0 2\n"),
		"--watchdog": "3s", "--restart": "dir", "+restart": "dir", "--teams": "2", "--teams-alpha": "0.3", "--teams-beta": "0.1",
		"--log-limit": "64M", "--log-limit-strategy": "heaviest"}
	for _, name := range []string{"+p", "--pes", "-pes", "--wire-check", "--ft-verify", "--branching", "+balancer", "--lb", "--balancer", "--spin",
		"--ckpt-period", "+ckptPeriod", "--ckpt-dir", "--ft", "+ft", "--teams", "--teams-alpha", "--teams-beta", "--log-limit", "--log-limit-strategy", "--kill", "--kill-file", "+killFile", "--watchdog", "--restart", "+restart"} {
		known, takes := chare.RuntimeFlag(name)
		require.True(t, known, name)
		args := []string{name}
		if takes {
			args = append(args, values[name])
		}
		_, err := chare.ParseFlags(append(args, "prog-arg"))
		require.NoError(t, err, name)
		require.Equal(t, takes, values[name] != "", name)
	}
	known, takes := chare.RuntimeFlag("+p4")
	require.True(t, known && !takes)
	known, _ = chare.RuntimeFlag("--frobnicate")
	require.False(t, known)
}

func writeTemp(t *testing.T, text string) string {
	f := filepath.Join(t.TempDir(), "f")
	require.NoError(t, os.WriteFile(f, []byte(text), 0o644))
	return f
}
