package manager

import (
	"math"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/vmihailenco/msgpack/v5"
)

// The float-slice codec writes msgpack's bytes for every length class of
// array header and every kind of float, and reads them back bitwise.
func TestFloat64sAreMsgpacksBytes(t *testing.T) {
	c := MsgpackCodec[[]float64]()
	for _, v := range [][]float64{
		nil, {}, {1.5}, make([]float64, 15), make([]float64, 16), make([]float64, 70000),
		{math.Inf(1), math.Inf(-1), math.Copysign(0, -1), math.SmallestNonzeroFloat64, math.MaxFloat64, math.NaN()},
	} {
		want, err := msgpack.Marshal(v)
		require.NoError(t, err)
		got, err := c.Encode(v)
		require.NoError(t, err)
		require.Equal(t, want, got, "%d elements", len(v))
		back, err := c.Decode(got)
		require.NoError(t, err)
		require.Equal(t, v == nil, back.([]float64) == nil)
		require.Len(t, back, len(v))
		for i := range v {
			require.Equal(t, math.Float64bits(v[i]), math.Float64bits(back.([]float64)[i]))
		}
	}
}

// What another encoder may send for a []float64 (float32s, integers)
// decodes as msgpack decodes it; what is not a []float64 is refused.
func TestFloat64sFromOtherEncoders(t *testing.T) {
	c := MsgpackCodec[[]float64]()
	b, err := msgpack.Marshal([]any{float32(0.5), 3, -2, 1.25})
	require.NoError(t, err)
	v, err := c.Decode(b)
	require.NoError(t, err)
	require.Equal(t, []float64{0.5, 3, -2, 1.25}, v)
	for _, bad := range [][]byte{{}, {0x92, 0xcb}, {0xdc, 0x00}, {0xa3, 'a', 'b', 'c'}} {
		_, err := c.Decode(bad)
		require.Error(t, err, "% x", bad)
	}
}

// Whatever the bytes, the fast decoder and msgpack agree: both refuse,
// or both give the same floats.
func FuzzDecodeFloat64s(f *testing.F) {
	for _, v := range [][]float64{nil, {}, {1, 2, 3}, make([]float64, 20)} {
		b, _ := msgpack.Marshal(v)
		f.Add(b)
	}
	f.Add([]byte{0x93, 0xcb, 0, 0, 0, 0, 0, 0, 0, 0, 0x01, 0xca, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		fast, ok := decodeFloat64s(b)
		if !ok {
			return // msgpack decides (MsgpackCodec's fallback)
		}
		var slow []float64
		require.NoError(t, msgpack.Unmarshal(b, &slow))
		require.Equal(t, len(slow), len(fast))
		require.Equal(t, slow == nil, fast == nil)
		for i := range slow {
			require.Equal(t, math.Float64bits(slow[i]), math.Float64bits(fast[i]))
		}
	})
}

// TestCodecAppendIsEncode: a codec's Append writes what its Encode
// returns, behind what the buffer held, for values of every shape (the
// pooled encoders left as Marshal would find them, also after an error).
func TestCodecAppendIsEncode(t *testing.T) {
	type inner struct {
		A []int32
		S string
	}
	type msg struct {
		X   float64
		In  inner
		M   map[string]int
		Ptr *inner
		Any any
	}
	check := func(c Codec, vals ...any) {
		t.Helper()
		for _, v := range vals {
			want, err := c.Encode(v)
			require.NoError(t, err)
			got, err := c.Append([]byte("head"), v)
			require.NoError(t, err)
			require.Equal(t, append([]byte("head"), want...), got)
			back, err := c.Decode(got[4:])
			require.NoError(t, err)
			require.Equal(t, v, back)
		}
	}
	mc := MsgpackCodec[msg]()
	check(mc, msg{}, msg{X: 1.5, In: inner{A: []int32{1, 2}, S: "s"}, M: map[string]int{"a": 1}, Ptr: &inner{S: "p"}, Any: "x"})
	_, err := mc.Append(nil, 3)
	require.ErrorContains(t, err, "a int, want manager.msg")
	_, err = mc.Append([]byte("x"), msg{Any: make(chan int)}) // msgpack cannot encode a channel
	require.Error(t, err)
	check(mc, msg{X: 2}) // the encoder that failed is as good as new
	check(MsgpackCodec[[]float64](), []float64{}, []float64{1, math.Inf(1), -0.5})
	check(MsgpackCodec[int](), 0, 1<<40)
	check(MsgpackCodec[string](), "", "hello")
}
