package ftlayer

import (
	"math/rand/v2"
	"testing"

	"github.com/charmgo/charmgo/pe"
	"github.com/stretchr/testify/require"
)

// The got log answers as the map it stands for would, whenever its index
// is built: puts of the same name in a row and apart, migrations noted
// before and after the index, a reset.
func TestGotLogAnswersAsAMap(t *testing.T) {
	for seed := range uint64(20) {
		rng := rand.New(rand.NewPCG(seed, 3))
		// odd seeds ask as they go (the index is built early); even ones
		// only at the end (the log alone, notes of migrations in it)
		asks := 97
		if seed%2 == 0 {
			asks = 80
		}
		var l gotLog
		want := map[pe.MsgName]gotName{}
		name := func() pe.MsgName {
			return pe.MsgName{Kind: pe.NameOrigin, Origin: pe.Origin{Coll: 1, K: rng.Uint64N(40)}, Crossed: true}
		}
		for op := range 400 {
			switch r := rng.IntN(100); {
			case r < 60:
				k := name()
				g := gotName{from: rng.Int32N(4), phase: rng.Uint64N(9), elem: rng.IntN(2) == 0, leftTo: -1}
				l.put(&k, g)
				want[k] = g
				if rng.IntN(3) == 0 { // the same again, at once (a multicast's next member)
					g.phase++
					l.put(&k, g)
					want[k] = g
				}
			case r < 80:
				k := name()
				to := rng.Int32N(4)
				l.leftTo(&k, to)
				if g, ok := want[k]; ok && g.elem {
					g.leftTo = to
					want[k] = g
				}
			case r < asks:
				k := name()
				g, ok := l.get(&k)
				wg, wok := want[k]
				require.Equal(t, wok, ok, "seed %d op %d", seed, op)
				require.Equal(t, wg, g, "seed %d op %d", seed, op)
			case r >= 97:
				l.reset()
				clear(want)
			}
		}
		got := map[pe.MsgName]gotName{}
		for k, g := range l.all() {
			got[k] = *g
		}
		require.Equal(t, want, got, "seed %d", seed)
		require.Equal(t, len(want), l.len())
	}
}
