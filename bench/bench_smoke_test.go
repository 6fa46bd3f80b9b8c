package bench

import (
	"testing"

	"github.com/charmgo/charmgo/chare"
	"github.com/stretchr/testify/require"
)

// The benchmark programs run (tiny) in the test suite so they cannot rot.
func TestBenchProgramsRun(t *testing.T) {
	run := func(name string, pes int, f func(chare.Config) chare.Result) {
		t.Run(name, func(t *testing.T) {
			benchN, benchElapsed = 64*3, 0
			res := f(chare.Config{PEs: pes})
			require.NoError(t, res.Err)
			require.Equal(t, 0, res.Code)
			require.NotZero(t, benchElapsed)
		})
	}
	run("pingpong", 2, func(c chare.Config) chare.Result { return chare.Run(pingMain, c) })
	run("pingpong-ptr", 2, func(c chare.Config) chare.Result { return chare.Run(pingPMain, c) })
	run("stream", 2, func(c chare.Config) chare.Result { return chare.Run(streamMain, c) })
	// with the PEs spinning before they park (the default outside tests
	// where every PE has a core), and under message logging
	run("pingpong-spin", 2, func(c chare.Config) chare.Result { c.SpinPolls = 4096; return chare.Run(pingMain, c) })
	run("stream-spin", 2, func(c chare.Config) chare.Result { c.SpinPolls = 4096; return chare.Run(streamMain, c) })
	for _, ft := range []string{"scmel", "camel", "pessimist"} {
		run("pingpong-"+ft, 2, func(c chare.Config) chare.Result { c.FT = ft; return chare.Run(pingMain, c) })
		run("stream-"+ft, 2, func(c chare.Config) chare.Result { c.FT = ft; return chare.Run(streamMain, c) })
	}
	// the ping-pongs that checkpoint as they go: 64*3 round trips, a
	// checkpoint every 80 (under pessimist the second interval's sends
	// reuse the first's records)
	for _, ft := range []string{"", "pessimist"} {
		run("pingpong-checkpointing-"+ft, 2, func(c chare.Config) chare.Result {
			c.FT = ft
			pingCkptEvery, pingCkpts = 80, 0
			defer func() { pingCkptEvery = 0 }()
			res := chare.Run(pingMain, c)
			require.Equal(t, 2, pingCkpts, "a checkpoint after round trips 80 and 160")
			return res
		})
		// and the stream: rounds of 128 messages, 64 in the last
		run("stream-checkpointing-"+ft, 2, func(c chare.Config) chare.Result {
			c.FT = ft
			streamCkptEvery = 128
			defer func() { streamCkptEvery = 0 }()
			return chare.Run(streamMain, c)
		})
	}
	run("local", 1, func(c chare.Config) chare.Result { return chare.Run(localMain, c) })
	for _, mode := range []string{"reduction", "p2p"} {
		redMode = mode
		run("reduce-"+mode, 2, func(c chare.Config) chare.Result { return chare.Run(redMain, c) })
	}
	for _, mode := range []string{"section", "p2p"} {
		mcMode = mode
		run("multicast-"+mode, 3, func(c chare.Config) chare.Result { return chare.Run(mcMain, c) })
	}
}
