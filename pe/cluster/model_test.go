package cluster

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The membership model (checked against real jobs of 12 processes by
// TestTheJobsProgressCrossesTheTree): its own rules, at sizes from 2 to
// 16,384 processes.

func modelOf(t *testing.T, cfg ModelConfig) ModelReport {
	t.Helper()
	rep, err := SimulateMembership(cfg)
	require.NoError(t, err)
	return rep
}

// Without a loss every process sends each neighbour in the tree a
// heartbeat a period, and holds links to those alone; the same seed
// gives the same run.
func TestModelHeartbeatsGoToTheTreeAlone(t *testing.T) {
	for _, procs := range []int{2, 9, 10, 73, 1000} {
		t.Run(fmt.Sprint(procs), func(t *testing.T) {
			cfg := ModelConfig{Procs: procs, HeartbeatTimeout: 10 * time.Second, Latency: time.Millisecond, Duration: 20 * time.Second, Lost: -1, Seed: 7}
			rep := modelOf(t, cfg)
			require.Equal(t, rep, modelOf(t, cfg))
			require.Equal(t, time.Duration(-1), rep.FirstFound, "no loss")
			edges := 0
			for r, p := range rep.Processes {
				parent, children := treeNeighbours(procs, r, func(int) bool { return false })
				nb := len(children)
				if parent >= 0 {
					nb++
				}
				edges += nb
				require.Equal(t, nb, p.Neighbours, "process %d", r)
				require.Equal(t, nb, p.DataLinks, "process %d", r)
				require.LessOrEqual(t, p.Neighbours, treeFanout+1)
				// 20 periods of 1 s; the phase decides whether the 21st falls in
				require.InDelta(t, 20*nb, p.BeatsSent, float64(nb), "process %d", r)
				require.InDelta(t, 20*nb, p.BeatsReceived, float64(2*nb), "process %d", r)
				require.False(t, p.FoundItself)
			}
			require.Equal(t, 2*(procs-1), edges, "a tree")
			require.Equal(t, procs-1, rep.Processes[0].ControlPeers, "the steward")
		})
	}
}

// A process that dies is found by its neighbours in the tree as their
// links to it break, and every other live process hears within a notice
// a level of the tree; one that hangs is found by its neighbours'
// heartbeats, after the timeout and within a period more.
func TestModelFindsALoss(t *testing.T) {
	const lat = time.Millisecond
	for _, c := range []struct {
		procs, lost int
		hung        bool
	}{
		{2, 1, false}, {12, 11, false}, {12, 1, false}, {100, 50, false}, {1024, 7, false}, {1024, 1000, true}, {100, 3, true}, {12, 0, false}, {1024, 0, true},
	} {
		t.Run(fmt.Sprintf("%d processes, %d lost, hung %v", c.procs, c.lost, c.hung), func(t *testing.T) {
			timeout := 5 * time.Second
			rep := modelOf(t, ModelConfig{Procs: c.procs, HeartbeatTimeout: timeout, Latency: lat, Duration: 30 * time.Second,
				Lost: c.lost, LostAt: 3 * time.Second, Hung: c.hung, RecoverySteps: 3, Seed: 1})
			if c.hung {
				require.Greater(t, rep.FirstFound, timeout-beatPeriod(timeout))
				require.LessOrEqual(t, rep.FirstFound, timeout+beatPeriod(timeout)+lat)
			} else {
				require.Equal(t, lat, rep.FirstFound)
			}
			// a notice a level up and a level down the tree at most
			require.LessOrEqual(t, rep.AllKnew, rep.FirstFound+time.Duration(2*rep.Depth+2)*lat)
			for r, p := range rep.Processes {
				if r != c.lost {
					require.GreaterOrEqual(t, p.KnewOfLoss, rep.FirstFound, "process %d", r)
				}
			}
			if c.lost == 0 {
				require.Equal(t, 1, rep.Steward, "the lowest live rank steers")
				require.Equal(t, c.procs-1, rep.RendezvousSent)
			} else {
				require.Zero(t, rep.Steward)
			}
			// each process passes its first notice to at most its
			// neighbours
			require.LessOrEqual(t, rep.Notices, (c.procs-1)*(treeFanout+1))
		})
	}
}

// The model refuses what it cannot run.
func TestModelRefusesABadConfig(t *testing.T) {
	for _, cfg := range []ModelConfig{
		{Procs: 1, HeartbeatTimeout: time.Second, Latency: 1, Duration: 1},
		{Procs: 4, Latency: 1, Duration: 1},
		{Procs: 4, HeartbeatTimeout: time.Second, Latency: 1, Duration: 1, Lost: 4},
	} {
		_, err := SimulateMembership(cfg)
		require.Error(t, err)
	}
}

// At 16,384 processes: a process holds at most 9 neighbours, sends at
// most 9 heartbeats a second (8 s simulated), and all know of a loss within a few
// notices; the steward alone is linear (its control connections, a
// recovery's steps).
func TestModelAtSixteenThousand(t *testing.T) {
	if testing.Short() {
		t.Skip("short")
	}
	rep := modelOf(t, ModelConfig{Procs: 16384, HeartbeatTimeout: 30 * time.Second, Latency: 200 * time.Microsecond, Duration: 8 * time.Second,
		Lost: 9000, LostAt: 5 * time.Second, RecoverySteps: 3, Seed: 3})
	require.Equal(t, 5, rep.Depth)
	for r, p := range rep.Processes {
		require.LessOrEqual(t, p.Neighbours, treeFanout+1, "process %d", r)
		require.LessOrEqual(t, p.BeatsSent, 8*(treeFanout+1)+treeFanout+1, "process %d", r)
		if r != 0 && r != 9000 {
			// its neighbours before and after the loss, and the steward
			require.LessOrEqual(t, p.ControlPeers, 2*(treeFanout+1)+1, "process %d", r)
		}
	}
	require.Equal(t, 16383, rep.Processes[0].ControlPeers)
	require.LessOrEqual(t, rep.AllKnew, 13*200*time.Microsecond)
}
