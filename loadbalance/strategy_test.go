package loadbalance

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"math"
	"testing"

	"github.com/charmgo/charmgo/pe"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/vmihailenco/msgpack/v5"
)

var allStrategies = []string{"greedy", "refine", "greedyrefine", "graph", "random", "rotate", "dummy"}

// instance builds stats with the given object loads and PEs, every fourth
// object non-migratable when pinned is set.
func instance(pes int, loads []float64, onPE func(i int) int, pinned bool) *Stats {
	st := &Stats{Step: 3, PEs: make([]PEStats, pes)}
	for i, l := range loads {
		st.Objs = append(st.Objs, Obj{Coll: 1, Index: pe.Idx(i), PE: int32(onPE(i)), Wall: l, Migratable: !pinned || i%4 != 0, Bytes: 100})
	}
	for i := range loads {
		if i+1 < len(loads) {
			st.Comm = append(st.Comm, Comm{From: int32(i), To: int32(i + 1), Msgs: 2, Bytes: 1000})
		}
	}
	return st
}

func skewed(n int) []float64 {
	out := make([]float64, n)
	for i := range out {
		out[i] = 1 + float64((i*37)%11)
	}
	return out
}

func TestStrategiesKeepTheirContract(t *testing.T) {
	cases := []struct {
		name string
		st   *Stats
	}{
		{"all on PE 0", instance(4, skewed(40), func(int) int { return 0 }, false)},
		{"blocks, pinned objects", instance(5, skewed(53), func(i int) int { return i * 5 / 53 }, true)},
		{"one PE", instance(1, skewed(7), func(int) int { return 0 }, false)},
		{"more PEs than objects", instance(16, skewed(5), func(i int) int { return i }, false)},
		{"no objects", instance(3, nil, func(int) int { return 0 }, false)},
		{"unavailable PE 1", func() *Stats {
			st := instance(4, skewed(30), func(i int) int { return i % 4 }, false)
			st.PEs[1].Unavailable = true
			return st
		}()},
	}
	for _, name := range allStrategies {
		for _, tc := range cases {
			t.Run(name+"/"+tc.name, func(t *testing.T) {
				s, err := New(name, Options{Seed: 1})
				require.NoError(t, err)
				before := tc.st.Loads(nil)
				moves, err := Run(s, tc.st)
				require.NoError(t, err) // CheckPlan: placed once, migratable, existing PEs
				after := tc.st.Loads(moves)
				assert.InDelta(t, sum(before), sum(after), 1e-9, "load conserved")
				for _, m := range moves {
					assert.True(t, tc.st.Objs[m.Obj].Migratable)
				}
				if tc.st.PEs[min(1, len(tc.st.PEs)-1)].Unavailable && name != "dummy" {
					assert.Zero(t, after[1], "unavailable PE emptied of migratable work")
				}
			})
		}
	}
}

func sum(x []float64) float64 {
	s := 0.0
	for _, v := range x {
		s += v
	}
	return s
}

func TestBalancingStrategiesBalance(t *testing.T) {
	st := instance(8, skewed(400), func(i int) int { return i % 3 }, false) // everything on 3 of 8 PEs
	for _, tc := range []struct {
		name   string
		maxAvg float64
	}{{"greedy", 1.02}, {"refine", 1.04}, {"greedyrefine", 1.05}, {"graph", 1.06}} {
		s, _ := New(tc.name, Options{Seed: 1})
		moves, err := Run(s, st)
		require.NoError(t, err)
		assert.LessOrEqual(t, st.MaxAvg(st.Loads(moves)), tc.maxAvg, tc.name)
	}
}

func TestRefineLeavesBalancedInputAlone(t *testing.T) {
	st := instance(4, []float64{5, 5, 5, 5, 3, 3, 3, 3, 2, 2, 2, 2}, func(i int) int { return i % 4 }, false)
	for _, name := range []string{"refine", "greedyrefine", "dummy"} {
		s, _ := New(name, Options{})
		moves, err := Run(s, st)
		require.NoError(t, err)
		assert.Empty(t, moves, name)
	}
}

func TestGreedyRefineMovesLessThanGreedy(t *testing.T) {
	st := instance(8, skewed(400), func(i int) int { return i * 8 / 400 }, false)
	st.Objs[0].Wall = 30 // one hot spot
	g, _ := New("greedy", Options{})
	gr, _ := New("greedyrefine", Options{})
	gm, _ := Run(g, st)
	grm, _ := Run(gr, st)
	assert.Less(t, len(grm), len(gm)/4, "greedyrefine %d moves, greedy %d", len(grm), len(gm))
	assert.LessOrEqual(t, st.MaxAvg(st.Loads(grm)), st.MaxAvg(st.Loads(gm))*1.031)
}

func TestGraphCutsLessThanGreedy(t *testing.T) {
	st, err := Generate(Synthetic{PEs: 8, Objs: 800, Skew: 0.3, Pattern: "mesh", Placement: "random", Seed: 4})
	require.NoError(t, err)
	g, _ := New("graph", Options{Seed: 1})
	gr, _ := New("greedy", Options{})
	gm, err := Run(g, st)
	require.NoError(t, err)
	grm, _ := Run(gr, st)
	sg, sgr := st.Summarize("graph", gm), st.Summarize("greedy", grm)
	assert.Less(t, sg.CrossBytesAfter*3, sgr.CrossBytesAfter, "graph %d cross bytes, greedy %d", sg.CrossBytesAfter, sgr.CrossBytesAfter)
	assert.LessOrEqual(t, sg.MaxAvgAfter, 1.07)
}

func TestRotateAndRandom(t *testing.T) {
	st := instance(3, skewed(6), func(i int) int { return i % 3 }, false)
	s, _ := New("RotateLB", Options{})
	moves, err := Run(s, st)
	require.NoError(t, err)
	for _, m := range moves {
		assert.Equal(t, (m.From+1)%3, m.To)
	}
	assert.Len(t, moves, 6)
	r, _ := New("RandCentLB", Options{Seed: 9})
	a, _ := Run(r, st)
	b, _ := Run(r, st)
	assert.Equal(t, a, b, "seeded: a replay draws the same")
}

func TestNamesAndChains(t *testing.T) {
	for alias, name := range map[string]string{"GreedyLB": "greedy", "refinelb": "refine", "GreedyRefineLB": "greedyrefine",
		"MetisLB": "graph", "RotateLB": "rotate", "RandCentLB": "random", "DummyLB": "dummy", "graph": "graph"} {
		s, err := New(alias, Options{})
		require.NoError(t, err, alias)
		assert.Equal(t, name, s.Name())
	}
	_, err := New("HybridLB", Options{})
	assert.ErrorContains(t, err, `"HybridLB"`)
	c, err := NewChain([]string{"GreedyLB", "RefineLB"}, Options{})
	require.NoError(t, err)
	assert.Equal(t, "greedy", c.At(1).Name())
	assert.Equal(t, "refine", c.At(2).Name())
	assert.Equal(t, "refine", c.At(9).Name())
	assert.Nil(t, Chain(nil).At(1))

	// a program's own strategy, by its name, beside the built-ins
	own := fixed(nil)
	c, err = NewChain([]string{"refine", own.Name()}, Options{}, own)
	require.NoError(t, err)
	assert.Equal(t, "refine", c.At(1).Name())
	assert.Equal(t, own.Name(), c.At(2).Name())
	_, err = NewChain([]string{"mine"}, Options{}, own)
	assert.ErrorContains(t, err, `"mine"`)
	assert.ErrorContains(t, err, "or the program's: "+own.Name())
}

func TestStrategyThatBreaksItsContractIsRefused(t *testing.T) {
	st := instance(2, skewed(8), func(int) int { return 0 }, true)
	for _, tc := range []struct {
		moves []Move
		want  string
	}{
		{[]Move{{Obj: 0, From: 0, To: 1}}, "not migratable"},
		{[]Move{{Obj: 1, From: 0, To: 2}}, "PEs 0..1"},
		{[]Move{{Obj: 1, From: 1, To: 0}}, "it is on PE 0"},
		{[]Move{{Obj: 1, From: 0, To: 1}, {Obj: 1, From: 0, To: 1}}, "twice"},
		{[]Move{{Obj: 99, From: 0, To: 1}}, "object 99"},
	} {
		_, err := Run(fixed(tc.moves), st)
		assert.ErrorContains(t, err, tc.want)
	}
}

type fixed []Move

func (fixed) Name() string         { return "fixed" }
func (f fixed) Plan(*Stats) []Move { return f }

func TestDumpRoundTripAndReplay(t *testing.T) {
	var buf bytes.Buffer
	w := NewDumpWriter(&buf)
	var want []Record
	for step := 1; step <= 3; step++ {
		st, err := Generate(Synthetic{PEs: 4, Objs: 50, Skew: 0.5, Pattern: "random", Degree: 2, Hot: 1, Seed: uint64(step)})
		require.NoError(t, err)
		st.Step = step
		s, _ := New("greedyrefine", Options{})
		moves, err := Run(s, st)
		require.NoError(t, err)
		rec := Record{Stats: *st, Strategy: s.Name(), Options: Options{Tolerance: 0.03}, Moves: moves}
		require.NoError(t, w.Write(&rec))
		want = append(want, rec)
	}
	got, err := ReadDump(bytes.NewReader(buf.Bytes()), "lb.dump")
	require.NoError(t, err)
	require.Len(t, got, 3)
	for i := range got {
		s, err := New(got[i].Strategy, got[i].Options)
		require.NoError(t, err)
		moves, err := Run(s, &got[i].Stats)
		require.NoError(t, err)
		assert.Equal(t, want[i].Moves, moves, "replay plans what the live step planned")
	}
}

func TestDumpDamageIsNamed(t *testing.T) {
	var buf bytes.Buffer
	st, _ := Generate(Synthetic{PEs: 2, Objs: 4, Seed: 1})
	require.NoError(t, NewDumpWriter(&buf).Write(&Record{Stats: *st, Strategy: "dummy"}))
	good := buf.Bytes()
	for _, tc := range []struct {
		name string
		b    []byte
		want string
	}{
		{"empty", nil, "offset 0: not a stats file"},
		{"other file", []byte("hello, world, this is text"), "offset 0: not a stats file"},
		{"future version", append([]byte("CGLBSTAT\x00\x09\x00\x00"), good[12:]...), "offset 8: stats file version 9"},
		{"cut record", good[:len(good)-7], "offset 12: record of"},
		{"flipped byte", flip(good, 30), "offset 12: record fails its checksum"},
		{"cut length", append(append([]byte{}, good...), 0, 0), "offset " + fmt.Sprint(len(good)) + ": record length cut short"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			recs, err := ReadDump(bytes.NewReader(tc.b), "lb.dump")
			assert.ErrorContains(t, err, "lb.dump: "+tc.want)
			if tc.name == "cut length" {
				assert.Len(t, recs, 1, "records before the damage are kept")
			}
		})
	}
}

func flip(b []byte, i int) []byte {
	c := append([]byte{}, b...)
	c[i] ^= 0x40
	return c
}

// FuzzReadDump: any bytes are read as a stats file without a panic, and
// what is accepted is stats every strategy plans from without a NaN. With
// frame set the bytes are one record's msgpack, framed with the header,
// its length and a right checksum, so that edits reach the decoder and the
// checks after it (raw bytes almost never pass the checksum); unset, they
// are the whole file. The seed is a small step (2 PEs, 3 chares): the
// fuzzer minimizes what it finds in time quadratic in its size, and a
// 500-byte seed kept it minimizing for the whole run (900 inputs a
// second). Rate here (go test -fuzz, 2 workers, 20 s): about 30,000 inputs
// a second.
func FuzzReadDump(f *testing.F) {
	st, _ := Generate(Synthetic{PEs: 2, Objs: 3, Pattern: "ring", Seed: 1})
	rec, _ := msgpack.Marshal(&Record{Stats: *st, Strategy: "refine", Moves: []Move{{Obj: 0, From: 0, To: 1}}})
	f.Add(rec, true)
	f.Add([]byte("CGLBSTAT\x00\x01\x00\x00\x00\x00\x00\x01\x90\x00\x00\x00\x00"), false)
	f.Fuzz(func(t *testing.T, b []byte, frame bool) {
		if frame {
			file := append([]byte(dumpMagic), 0, DumpVersion, 0, 0)
			file = binary.BigEndian.AppendUint32(file, uint32(len(b)))
			file = append(file, b...)
			b = binary.BigEndian.AppendUint32(file, crc32.ChecksumIEEE(b))
		}
		recs, err := ReadDump(bytes.NewReader(b), "fuzz")
		for i := range recs {
			st := &recs[i].Stats
			require.NoError(t, st.Validate())
			for _, name := range []string{"greedy", "refine", "greedyrefine", "graph"} {
				s, _ := New(name, Options{})
				moves, err := Run(s, st)
				require.NoError(t, err)
				l := st.Loads(moves)
				require.False(t, math.IsNaN(sum(l)))
			}
		}
		_ = err
	})
}

func TestGenerate(t *testing.T) {
	st, err := Generate(Synthetic{PEs: 4, Objs: 100, Skew: 1, Pattern: "mesh", Hot: 1, Seed: 2})
	require.NoError(t, err)
	require.NoError(t, st.Validate())
	assert.Greater(t, st.MaxAvg(st.Loads(nil)), 1.3)
	assert.NotEmpty(t, st.Comm)
	_, err = Generate(Synthetic{PEs: 4, Objs: 10, Pattern: "torus"})
	assert.ErrorContains(t, err, `"torus"`)
}

// The graph strategy places chares next to the non-migratable chares they
// talk to (which the partition itself does not see), within the balance.
func TestGraphFollowsFixedPartners(t *testing.T) {
	st := &Stats{Step: 1, PEs: make([]PEStats, 2)}
	st.Objs = append(st.Objs, Obj{Coll: 1, Index: pe.Idx(0), PE: 0}, Obj{Coll: 1, Index: pe.Idx(1), PE: 1}) // fixed, no load
	for i := range 20 {
		st.Objs = append(st.Objs, Obj{Coll: 2, Index: pe.Idx(i), PE: int32(1 - i%2), Wall: 1, Migratable: true}) // on the wrong side
		st.Comm = append(st.Comm, Comm{From: int32(2 + i), To: int32(i % 2), Msgs: 10, Bytes: 10000})
	}
	s, _ := New("MetisLB", Options{Seed: 1})
	moves, err := Run(s, st)
	require.NoError(t, err)
	sm := st.Summarize("graph", moves)
	assert.Zero(t, sm.CrossBytesAfter, "every chare next to its partner")
	assert.LessOrEqual(t, sm.MaxAvgAfter, 1.0+1e-9)
}
