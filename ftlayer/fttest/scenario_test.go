package fttest

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/charmgo/charmgo/ftlayer"
	"github.com/stretchr/testify/require"
)

// scenario is a scripted run from testdata/*.scn (named after the items of
// shared/specs/ft-scenarios.md).
type scenario struct {
	program   Program
	n         int
	protocols []ftlayer.Factory
	seeds     []uint64
	crashes   []Crash
	sweep     bool
	expect    string
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
			c := Crash{PE: int32(num("pe")), When: kv["when"], Optional: slicesContains(f, "optional")}
			if kv["at"] != "" {
				c.At = num("at")
			}
			if c.When != "" {
				c.Of = int32(num("of"))
			}
			sc.crashes = append(sc.crashes, c)
		case "sweep":
			sc.sweep = true
		case "expect":
			sc.expect = f[1]
		default:
			return sc, fmt.Errorf("%s:%d: unknown line %q", path, ln+1, f[0])
		}
	}
	return sc, err
}

func slicesContains(f []string, s string) bool {
	for _, x := range f {
		if x == s {
			return true
		}
	}
	return false
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
				for _, seed := range sc.seeds {
					free := Sim{N: sc.n, Seed: seed, Program: sc.program, Protocol: proto}.Run()
					require.NoError(t, free.Err)
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
						if sc.expect == "unsupported" {
							require.True(t, errors.Is(got.Err, ftlayer.ErrConcurrentFailure), "%s seed %d: %v", proto.Name(), seed, got.Err)
							continue
						}
						require.NoError(t, Check(free, got), "%s seed %d crashes %+v", proto.Name(), seed, crashes)
						for _, i := range got.Crashed {
							happened[i] = true
						}
					}
				}
			}
			if !sc.sweep && sc.expect != "unsupported" {
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
