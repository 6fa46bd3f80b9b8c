package ftsim

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strconv"

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
// then once for each PE in pes failing before every stride-th event of
// that run (1: every event), and hands each run to check. The PEs take
// the events in turn: the i-th of pes fails before events i+1, i+1+stride,
// …, so that with at least as many PEs as the stride every event is
// some PE's. The
// runs with a failure follow the failure-free one up to the failure: the
// same seed makes the same choices until then.
func Sweep[C, A any](main *chare.Type[C, A], arg A, cfg chare.Config, seed uint64, pes []int, stride int,
	check func(free chare.Result, f Failure)) (events int, err error) {
	free := Run(main, arg, cfg, seed)
	if free.Err != nil {
		return 0, fmt.Errorf("the failure-free run (seed %d): %w", seed, free.Err)
	}
	events = free.Stats.Events
	stride = max(stride, 1)
	for e := 1; e <= events; e++ {
		for i, p := range pes {
			if (e-1-i%stride+stride)%stride != 0 {
				continue
			}
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
		sent := free.Stats.PEs[p].HandedOver()
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

// RandomFailures runs trials random runs of the program under base's
// protocol (and teams): each on 3 to 7 PEs (4 to 7 with teams, so that
// no team holds more than half of them) with 2- to 4-ary trees and its
// own interleaving,
// first without failures, then with two or three failures at random
// moments of that run (before an event or, one in three, right after a
// message a PE hands over). check gets both runs and the configuration
// of the second; runs in which a failure's moment never came are passed
// over. rng chooses everything. It returns how many runs check got.
func RandomFailures[C, A any](main *chare.Type[C, A], arg A, base chare.Config, trials int, rng *rand.Rand,
	check func(free, res chare.Result, cfg chare.Config)) (int, error) {
	ran, ft := 0, base.FT
	for trial := 0; trial < trials; trial++ {
		pes := 3 + rng.IntN(5)
		if base.Teams != "" {
			pes = 4 + rng.IntN(4)
		}
		seed := rng.Uint64()
		cfg := chare.Config{PEs: pes, FT: ft, Teams: base.Teams, Branching: 2 + rng.IntN(3), LogLimit: base.LogLimit, LogLimitStrategy: base.LogLimitStrategy}
		free := Run(main, arg, cfg, seed)
		if free.Err != nil {
			return ran, fmt.Errorf("%s, %d PEs, seed %d, without failures: %w", ft, pes, seed, free.Err)
		}
		cfg.Kills = make([]chare.Kill, 2+rng.IntN(2))
		for i := range cfg.Kills {
			// Kills before one event are one failure of several PEs: a PE
			// and the buddy that holds its snapshot's copy, at once, leave
			// none (the run says so and ends); the moments differ.
			for {
				k := randomKill(rng, free)
				if k.Event == 0 || !slices.ContainsFunc(cfg.Kills[:i], func(o chare.Kill) bool { return o.Event == k.Event }) {
					cfg.Kills[i] = k
					break
				}
			}
		}
		cfg.Seed = seed
		if base.CheckpointDir != "" {
			cfg.CheckpointDir = filepath.Join(base.CheckpointDir, strconv.Itoa(trial)) // a run's own
		}
		res := Run(main, arg, cfg, seed)
		if Unfired(res) {
			continue
		}
		ran++
		check(free, res, cfg)
	}
	return ran, nil
}

// randomKill is a failure at a random moment of a run like free: before
// an event, or (one in three) right after a message its PE hands over.
func randomKill(rng *rand.Rand, free chare.Result) chare.Kill {
	p := rng.IntN(len(free.Stats.PEs))
	if sent := free.Stats.PEs[p].HandedOver(); rng.IntN(3) == 0 && sent > 0 {
		return chare.Kill{PE: p, Step: -1, HandOver: 1 + rng.Uint64N(sent)}
	}
	return chare.Kill{PE: p, Step: -1, Event: 1 + rng.IntN(free.Stats.Events)}
}
