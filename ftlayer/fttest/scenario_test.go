package fttest

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/charmgo/charmgo/ftlayer"
	"github.com/stretchr/testify/require"
)

// scenario is a scripted run from testdata/*.scn (named after the items of
// shared/specs/ft-scenarios.md).
type scenario struct {
	program     Program
	n           int
	protocols   []ftlayer.Factory
	seeds       []uint64
	crashes     []Crash
	sweep       bool
	expect      string
	unsupported map[string]bool // protocols expected to report ErrConcurrentFailure
	since       int             // camel-memory: collectives since the last checkpoint
}

func parseScenario(path string) (scenario, error) {
	var sc scenario
	b, err := os.ReadFile(path)
	if err != nil {
		return sc, err
	}
	for ln, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 || strings.HasPrefix(f[0], "#") {
			continue
		}
		kv := map[string]string{}
		for _, a := range f[1:] {
			if k, v, ok := strings.Cut(a, "="); ok {
				kv[k] = v
			}
		}
		num := func(k string) int {
			if err != nil {
				return 0
			}
			v, e := strconv.Atoi(kv[k])
			if e != nil {
				err = fmt.Errorf("%s:%d: %s=%q is not a number", path, ln+1, k, kv[k])
			}
			return v
		}
		switch f[0] {
		case "program":
			switch f[1] {
			case "stencil":
				sc.program = Stencil{Steps: int64(num("steps")), CkptEvery: int64(num("ckpt"))}
			case "cells":
				sc.program = Cells{Steps: int64(num("steps")), CkptEvery: int64(num("ckpt")), Width: num("width"), K: num("k"), Pad: num("pad")}
			case "ring":
				r := Ring{Laps: num("laps")}
				if kv["idle"] != "" {
					r.Idle = num("idle")
				}
				sc.program = r
			default:
				return sc, fmt.Errorf("%s:%d: unknown program %q", path, ln+1, f[1])
			}
			sc.n = num("pes")
		case "protocols":
			for _, p := range f[1:] {
				switch p {
				case "scmel":
					sc.protocols = append(sc.protocols, ftlayer.SCMELFactory{})
				case "none":
					sc.protocols = append(sc.protocols, ftlayer.NoneFactory{})
				case "camel":
					sc.protocols = append(sc.protocols, ftlayer.CAMELFactory{})
				default:
					return sc, fmt.Errorf("%s:%d: unknown protocol %q", path, ln+1, p)
				}
			}
		case "seeds":
			for _, s := range f[1:] {
				v, e := strconv.ParseUint(s, 10, 64)
				if e != nil {
					return sc, fmt.Errorf("%s:%d: seed %q", path, ln+1, s)
				}
				sc.seeds = append(sc.seeds, v)
			}
		case "crash":
			c := Crash{PE: int32(num("pe")), When: kv["when"], After: kv["after"], Optional: slices.Contains(f, "optional")}
			if kv["at"] != "" {
				c.At = num("at")
			}
			if c.When != "" || c.After != "" {
				c.Of = int32(num("of"))
			}
			if c.After != "" {
				c.Group, c.Num = uint64(num("group")), uint64(num("num"))
			}
			switch l := kv["lose"]; l {
			case "":
			case "all":
				c.LoseAll = true
			default:
				for _, s := range strings.Split(l, ",") {
					v, e := strconv.Atoi(s)
					if e != nil {
						return sc, fmt.Errorf("%s:%d: lose=%q: want all or a list of PEs", path, ln+1, l)
					}
					c.Lose = append(c.Lose, int32(v))
				}
			}
			sc.crashes = append(sc.crashes, c)
		case "sweep":
			sc.sweep = true
		case "expect":
			sc.expect = f[1]
			switch sc.expect {
			case "unsupported":
				sc.unsupported = map[string]bool{}
				for _, p := range f[2:] {
					sc.unsupported[p] = true
				}
			case "camel-memory":
				sc.since = num("since")
			}
		default:
			return sc, fmt.Errorf("%s:%d: unknown line %q", path, ln+1, f[0])
		}
	}
	return sc, err
}

func TestScenarios(t *testing.T) {
	files, err := filepath.Glob("testdata/*.scn")
	require.NoError(t, err)
	require.NotEmpty(t, files)
	for _, file := range files {
		t.Run(strings.TrimSuffix(filepath.Base(file), ".scn"), func(t *testing.T) {
			sc, err := parseScenario(file)
			require.NoError(t, err)
			aborted := 0
			happened := map[int]bool{}
			for _, proto := range sc.protocols {
				unsupported := sc.unsupported != nil && (len(sc.unsupported) == 0 || sc.unsupported[proto.Name()])
				for _, seed := range sc.seeds {
					free := Sim{N: sc.n, Seed: seed, Program: sc.program, Protocol: proto}.Run()
					require.NoError(t, free.Err)
					if sc.expect == "camel-memory" {
						checkCAMELMemory(t, sc, proto, free)
					}
					runs := [][]Crash{sc.crashes}
					if sc.sweep {
						runs = nil
						for at := 0; at <= free.Events; at++ {
							for y := 0; y < sc.n; y++ {
								runs = append(runs, []Crash{{At: at, PE: int32(y)}})
							}
						}
					}
					for _, crashes := range runs {
						got := Sim{N: sc.n, Seed: seed, Program: sc.program, Protocol: proto, Crashes: crashes}.Run()
						aborted += got.Aborted
						for _, i := range got.Crashed {
							happened[i] = true
						}
						if unsupported {
							require.True(t, errors.Is(got.Err, ftlayer.ErrConcurrentFailure), "%s seed %d: %v", proto.Name(), seed, got.Err)
							continue
						}
						require.NoError(t, Check(free, got), "%s seed %d crashes %+v", proto.Name(), seed, crashes)
					}
				}
			}
			if !sc.sweep {
				for i := range sc.crashes {
					require.True(t, happened[i], "crash %+v happened in no seed", sc.crashes[i])
				}
			}
			if sc.expect == "aborted" {
				require.Positive(t, aborted, "some failure hit a checkpoint in progress")
			}
		})
	}
}

// checkCAMELMemory is scenario 13: at the end of a failure-free run (every
// ack delivered), CAMEL's log holds one copy of each multicast since the
// last checkpoint, at its root, and of the reductions only what went to a
// root (kept until the next checkpoint) and the root's copies of it; SCMEL
// logs every hop.
func checkCAMELMemory(t *testing.T, sc scenario, proto ftlayer.Factory, free Result) {
	c := sc.program.(Cells)
	gs := c.Groups(sc.n)
	for pe, st := range free.Stats {
		me := int32(pe)
		var toRoot, copies uint64
		for _, g := range gs.IDs() {
			if gs.Has(g, me) && gs.Root(g) != me && gs.Parent(g, me) == gs.Root(g) {
				toRoot++
			}
			if gs.Root(g) == me {
				copies += uint64(len(gs.Children(g, me)))
			}
		}
		since := uint64(sc.since)
		mc, red := st.Log[ftlayer.KindMulticast], st.Log[ftlayer.KindReduction]
		if proto.Name() != "camel" {
			// every hop is logged: more than one copy per multicast
			if len(gs.Children(uint64(me+1), me)) > 1 {
				require.Greater(t, mc.Msgs, since, "%s PE %d", proto.Name(), pe)
			}
			continue
		}
		require.Equal(t, since, mc.Msgs, "PE %d: one logged copy per multicast it rooted", pe)
		require.Equal(t, since*uint64(c.Pad), mc.Bytes, "PE %d", pe)
		require.Equal(t, since*(toRoot+copies), red.Msgs, "PE %d: only contributions to a root (and the root's copies) stay logged", pe)
	}
}
