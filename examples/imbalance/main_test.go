package main

import (
	"bytes"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/charmgo/charmgo/chare"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestJumpAheadIsTheChain(t *testing.T) {
	for _, n := range []int{0, 1, 2, 7, 1000, 123457} {
		assert.Equal(t, lcgRun(42, n), lcgJump(42, n), "n=%d", n)
	}
}

func TestTheDefaultWorkloadIsImbalancedOnTwoPEs(t *testing.T) {
	assert.GreaterOrEqual(t, DefaultParams().initialMaxAvg(2), 1.5)
}

// Every balancer ends with the model's values, on 1 to 3 PEs; the first
// run is checked by main itself (exit 0), the others against it too.
func TestEveryBalancerPassesTheCheck(t *testing.T) {
	p, err := ParseArgs([]string{"24", "30", "5", "500"})
	require.NoError(t, err)
	var first []int64
	for _, c := range []chare.Config{
		{PEs: 1},
		{PEs: 2, Balancer: "greedyrefine"},
		{PEs: 3, Balancer: "graph", WireCheck: true},
		{PEs: 2, Balancer: "GreedyLB,RefineLB"},
		{PEs: 3, Balancer: "rotate"},
	} {
		var out bytes.Buffer
		c.Stdout = &out
		res := chare.RunWith(mainType, p, c)
		require.NoError(t, res.Err, "%+v", c)
		require.Equal(t, 0, res.Code)
		m := res.Main.(*Main)
		require.True(t, m.OK)
		assert.Contains(t, out.String(), "check passed: 24 blocks")
		if first == nil {
			first = m.Final
		}
		assert.Equal(t, first, m.Final)
		if c.Balancer != "" {
			require.NotNil(t, res.Stats.LB)
			assert.Positive(t, res.Stats.LB.Steps)
		}
	}
}

func TestBadArguments(t *testing.T) {
	for want, args := range map[string][]string{
		`argument 2 (steps): "x" is not a positive whole number`: {"8", "x"},
		"5 arguments: imbalance takes at most 4 (see --help)":    {"1", "2", "3", "4", "5"},
		"a ring needs at least 2 blocks":                         {"1"},
	} {
		_, err := ParseArgs(args)
		assert.ErrorContains(t, err, want)
	}
}

// The program as a user runs it (chare.Main, in a process of its own: this
// test binary again) ends with the run's summary: the layout, every PE's
// utilisation, the traffic and the balancer's steps.
func TestMainPrintsTheRunSummary(t *testing.T) {
	if os.Getenv(asMainEnv) != "" {
		os.Args = append([]string{"imbalance"}, strings.Fields(os.Getenv(asMainEnv))...)
		main()
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run", "^TestMainPrintsTheRunSummary$")
	cmd.Env = append(os.Environ(), asMainEnv+"=+p2 +balancer greedyrefine 16 30 5 20000")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, string(out))
	for _, want := range []string{"check passed", "\nSummary\n", "2 PEs in one process", "PE utilisation: mean", "point-to-point:", "load balancing (greedyrefine):"} {
		require.Contains(t, string(out), want)
	}
}

// asMainEnv runs this test binary as the program, with these arguments.
const asMainEnv = "IMBALANCE_AS_MAIN"
