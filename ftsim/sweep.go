package ftsim

import (
	"fmt"

	"github.com/charmgo/charmgo/chare"
)

// Run is one deterministic run of a program: cfg's PEs, protocol and
// failures, interleaved by seed.
func Run[C, A any](main *chare.Type[C, A], arg A, cfg chare.Config, seed uint64) chare.Result {
	cfg.Deterministic, cfg.Seed = true, seed
	if cfg.MaxEvents == 0 {
		cfg.MaxEvents = 5_000_000
	}
	return chare.RunWith(main, arg, cfg)
}

// Failure is one run of a sweep: PE failed before event Event.
type Failure struct {
	PE, Event int
	Res       chare.Result
}

func (f Failure) String() string { return fmt.Sprintf("PE %d before event %d", f.PE, f.Event) }

// Sweep runs the program once without failures (interleaved by seed),
// then once for each PE in pes failing before each event of that run
// whose number is a multiple of stride (1: every event), and hands each
// run to check. The runs with a failure follow the failure-free one up to
// the failure: the same seed makes the same choices until then.
func Sweep[C, A any](main *chare.Type[C, A], arg A, cfg chare.Config, seed uint64, pes []int, stride int,
	check func(free chare.Result, f Failure)) (events int, err error) {
	free := Run(main, arg, cfg, seed)
	if free.Err != nil {
		return 0, fmt.Errorf("the failure-free run (seed %d): %w", seed, free.Err)
	}
	events = free.Stats.Events
	for e := 1; e <= events; e += max(stride, 1) {
		for _, p := range pes {
			c := cfg
			c.Kills = append(append([]chare.Kill(nil), cfg.Kills...), chare.Kill{PE: p, Step: -1, Event: e})
			check(free, Failure{PE: p, Event: e, Res: Run(main, arg, c, seed)})
		}
	}
	return events, nil
}
