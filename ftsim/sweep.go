package ftsim

import (
	"errors"
	"fmt"

	"github.com/charmgo/charmgo/chare"
	"github.com/charmgo/charmgo/recovery"
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

// Unfired reports whether a run's injected failure never came: the run
// ended first (a moment counted in the failure-free run may come after
// its end was decided).
func Unfired(r chare.Result) bool {
	var u *recovery.UnfiredError
	return errors.As(r.Err, &u)
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

// SweepHandOvers is Sweep for the moments inside a handler: each PE in
// pes fails right after it handed over its s-th message to another PE,
// for every s (every stride-th) of the failure-free run — a multicast
// forwarded to some children only, a partial sent and the rest of the
// handler's messages not. Failure.Event is s.
func SweepHandOvers[C, A any](main *chare.Type[C, A], arg A, cfg chare.Config, seed uint64, pes []int, stride int,
	check func(free chare.Result, f Failure)) (handOvers int, err error) {
	free := Run(main, arg, cfg, seed)
	if free.Err != nil {
		return 0, fmt.Errorf("the failure-free run (seed %d): %w", seed, free.Err)
	}
	for _, p := range pes {
		st := free.Stats.PEs[p]
		var sent uint64
		for _, n := range st.Sent {
			sent += n
		}
		sent -= st.SentLocal
		handOvers += int(sent)
		for s := uint64(1); s <= sent; s += uint64(max(stride, 1)) {
			c := cfg
			c.Kills = append(append([]chare.Kill(nil), cfg.Kills...), chare.Kill{PE: p, Step: -1, HandOver: s})
			if res := Run(main, arg, c, seed); !Unfired(res) {
				check(free, Failure{PE: p, Event: int(s), Res: res})
			}
		}
	}
	return handOvers, nil
}
