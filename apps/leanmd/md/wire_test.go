package md

import (
	"math"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/vmihailenco/msgpack/v5"
)

// Positions cross the wire bitwise, 24 bytes an atom and a few for the
// rest; nil and empty stay what they were.
func TestPositionsCrossTheWireBitwise(t *testing.T) {
	empty, err := msgpack.Marshal(PositionsMsg{Cell: [3]int32{1, -2, 3}})
	require.NoError(t, err)
	for _, pos := range [][]Vec3{nil, {}, {{1, 2, 3}}, {{math.Inf(-1), math.Copysign(0, -1), math.SmallestNonzeroFloat64}, {math.NaN(), -7.25, 1e300}}} {
		m := PositionsMsg{Cell: [3]int32{1, -2, 3}, Pos: pos}
		b, err := msgpack.Marshal(m)
		require.NoError(t, err)
		require.LessOrEqual(t, len(b), len(empty)+24*len(pos)+5, "24 bytes an atom, and the length")
		var back PositionsMsg
		require.NoError(t, msgpack.Unmarshal(b, &back))
		require.Equal(t, m.Cell, back.Cell)
		require.Equal(t, pos == nil, back.Pos == nil)
		require.Len(t, back.Pos, len(pos))
		for i, p := range pos {
			q := back.Pos[i]
			require.Equal(t, []uint64{math.Float64bits(p.X), math.Float64bits(p.Y), math.Float64bits(p.Z)},
				[]uint64{math.Float64bits(q.X), math.Float64bits(q.Y), math.Float64bits(q.Z)})
		}
	}
}

// The map form msgpack wrote before (a checkpoint's pending positions)
// still decodes; what is neither form is refused.
func TestPositionsInTheFormerFormDecode(t *testing.T) {
	type fields PositionsMsg
	old, err := msgpack.Marshal(fields{Cell: [3]int32{4, 5, 6}, Pos: []Vec3{{1, 2, 3}}})
	require.NoError(t, err)
	var m PositionsMsg
	require.NoError(t, msgpack.Unmarshal(old, &m))
	require.Equal(t, [3]int32{4, 5, 6}, m.Cell)
	require.Equal(t, []Vec3{{1, 2, 3}}, m.Pos)

	good, err := msgpack.Marshal(PositionsMsg{Pos: []Vec3{{1, 2, 3}}})
	require.NoError(t, err)
	for _, bad := range [][]byte{
		{0x93, 0x93, 0, 0, 0, 0xc4, 0, 0xc0}, // three fields
		{0x94, 0x93, 0, 0, 0, 0xc4, 1, 0xff}, // one byte of positions
		good[:len(good)-1],
		{0xa1, 'x'},
	} {
		require.Error(t, msgpack.Unmarshal(bad, &m), "% x", bad)
	}
}

// Whatever the bytes, decoding positions ends with an error or a message
// that encodes back to a message equal to it.
func FuzzDecodePositions(f *testing.F) {
	b, _ := msgpack.Marshal(PositionsMsg{Cell: [3]int32{1, 2, 3}, Pos: []Vec3{{1, 2, 3}, {4, 5, 6}}})
	f.Add(b)
	type fields PositionsMsg
	b, _ = msgpack.Marshal(fields{Pos: []Vec3{{1, 2, 3}}})
	f.Add(b)
	f.Fuzz(func(t *testing.T, in []byte) {
		var m PositionsMsg
		if msgpack.Unmarshal(in, &m) != nil {
			return
		}
		out, err := msgpack.Marshal(m)
		require.NoError(t, err)
		var again PositionsMsg
		require.NoError(t, msgpack.Unmarshal(out, &again))
		out2, err := msgpack.Marshal(again)
		require.NoError(t, err)
		require.Equal(t, out, out2)
	})
}
