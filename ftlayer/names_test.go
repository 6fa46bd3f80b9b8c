package ftlayer

import (
	"maps"
	"math/rand/v2"
	"testing"

	"github.com/charmgo/charmgo/pe"
	"github.com/stretchr/testify/require"
)

// ElementNames answers as the map it replaces would, whatever order the
// names come in: per source out of order, again with another first PE,
// several sources interleaved, each kind of name an element is given.
func TestElementNamesAnswerAsAMap(t *testing.T) {
	origin := func(coll uint32, i int32, k, num uint64) pe.MsgName {
		return elemKey(&pe.MsgName{Kind: pe.NameOrigin, Origin: pe.Origin{Coll: coll, Index: pe.Index{Dims: 1, C: [pe.MaxDims]int32{i}}, K: k}, Num: num})
	}
	result := func(group, num uint64) pe.MsgName {
		return elemKey(&pe.MsgName{Kind: pe.NameResult, Group: group, Num: num})
	}
	tests := []struct {
		name  string
		names []pe.MsgName
	}{
		{"one source in order", []pe.MsgName{origin(1, 0, 1, 0), origin(1, 0, 2, 0), origin(1, 0, 3, 0)}},
		{"one source out of order", []pe.MsgName{origin(1, 0, 5, 0), origin(1, 0, 2, 0), origin(1, 0, 9, 0), origin(1, 0, 3, 0)}},
		{"occurrences of one send", []pe.MsgName{origin(1, 0, 4, 1), origin(1, 0, 4, 0), origin(1, 0, 3, 2)}},
		{"sources interleaved", []pe.MsgName{origin(1, 0, 1, 0), result(7, 1), origin(2, 0, 1, 0), origin(1, 1, 1, 0), result(7, 2), origin(1, 0, 2, 0)}},
		{"the same name again", []pe.MsgName{origin(1, 0, 1, 0), origin(1, 0, 1, 0), result(3, 1), result(3, 1)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got ElementNames
			want := map[pe.MsgName]int32{}
			for i, n := range tt.names {
				_, had := got.First(n)
				_, wantHad := want[n]
				require.Equal(t, wantHad, had, "name %d before it is added", i)
				got.Add(n, int32(i))
				want[n] = int32(i)
				first, ok := got.First(n)
				require.True(t, ok)
				require.Equal(t, int32(i), first)
			}
			require.Equal(t, len(want), got.Len())
			require.Equal(t, want, maps.Collect(got.All()))
			_, ok := got.First(origin(9, 9, 1, 0))
			require.False(t, ok, "a source never heard from")
			_, ok = got.First(origin(1, 0, 1000, 0))
			require.False(t, ok, "a count never had from a known source")
		})
	}
}

// A long random run against a map: many sources, counts shuffled, names
// recorded unless had (Record) and replaced (Add) in turn.
func TestElementNamesRandomAgainstAMap(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 11))
	var got ElementNames
	want := map[pe.MsgName]int32{}
	for i := range 5000 {
		n := elemKey(&pe.MsgName{Kind: pe.NameOrigin, Origin: pe.Origin{Coll: 1, Index: pe.Index{Dims: 1, C: [pe.MaxDims]int32{rng.Int32N(20)}}, K: rng.Uint64N(300)}, Num: rng.Uint64N(2)})
		wantFirst, wantHad := want[n]
		if i%2 == 0 {
			// Record: kept if had, recorded if not
			first, had := got.Record(n, int32(i))
			require.Equal(t, wantHad, had)
			require.Equal(t, wantFirst, first)
			if !wantHad {
				want[n] = int32(i)
			}
			continue
		}
		first, had := got.First(n)
		require.Equal(t, wantHad, had)
		require.Equal(t, wantFirst, first)
		got.Add(n, int32(i))
		want[n] = int32(i)
	}
	require.Equal(t, len(want), got.Len())
	require.Equal(t, want, maps.Collect(got.All()))
}

// BenchmarkSPMDDeliverTo is spmd's cost per delivery to an element (the
// element-level recognition of copies, DeliverTo), as LeanMD's computes
// see it: 1,000 elements, each hearing from two sources in the order
// they send, from a teammate (inTeam) or from another team, with a
// checkpoint every 150 rounds (which starts the names again).
func BenchmarkSPMDDeliverTo(b *testing.B) {
	teams, err := BlockTeams(4, 2)
	require.NoError(b, err)
	for _, tc := range []struct {
		name string
		from int32
	}{{"inTeam", 1}, {"otherTeam", 2}} {
		b.Run(tc.name, func(b *testing.B) {
			const elements, rounds = 1000, 150
			s := NewSPMD(0, 4, teams)
			names := make([]ElementNames, elements)
			h := pe.FTHeader{Sender: tc.from, Recver: 0, SSN: 1}
			n := pe.MsgName{Kind: pe.NameOrigin, Origin: pe.Origin{Coll: 1, Index: pe.Index{Dims: 3}}, At: tc.from}
			h.Name = &n
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				e := i % elements
				round := i / elements
				if round%rounds == 0 && e == 0 && i > 0 {
					clear(names)
					s.got.reset()
				}
				n.Origin.Index.C[0] = int32(i % 2) // the element's two sources
				n.Origin.K = uint64(round*elements + e)
				if !s.DeliverTo(&names[e], &h) {
					b.Fatal("dropped")
				}
			}
		})
	}
}
