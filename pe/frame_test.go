package pe

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
)

// testBytesType carries a []byte as it is (the fast path of a real
// payload codec).
var testBytesType = RegisterType(TypeInfo{
	Name:   "pe.bytes",
	Encode: func(v any) ([]byte, error) { return v.([]byte), nil },
	Decode: func(b []byte) (any, error) { return append([]byte(nil), b...), nil },
})

func frameOf(t testing.TB, gen uint64, dsts []int, envs []Envelope) []byte {
	f := AppendFrameHeader(nil)
	var err error
	for i := range envs {
		f, err = AppendFrameEntry(f, dsts[i], &envs[i])
		require.NoError(t, err)
	}
	require.NoError(t, FinishFrame(f, gen, len(envs)))
	return f
}

func TestFramesRoundTrip(t *testing.T) {
	envs := []Envelope{
		{Type: testBytesType, Kind: KindP2P, Index: Idx(1, 2), Seq: 9, Payload: []byte("abc")},
		{Type: testBytesType, Kind: KindSystem, Flags: FlagAppLane, Src: 3, Payload: nil},
		{Type: testBytesType, Kind: KindReduction, FT: &FTHeader{Sender: 3, Recver: 4, SSN: 7, Dets: []Det{{Sender: 1, Recver: 3, SSN: 2, RSN: 5}}}, Payload: []byte{}},
	}
	f := frameOf(t, 12, []int{4, 5, 4}, envs)
	gen, count, body, err := FrameHeader(f)
	require.NoError(t, err)
	require.Equal(t, uint64(12), gen)
	require.Equal(t, 3, count)
	require.Equal(t, len(f)-FrameHeaderSize, body)
	var got []Envelope
	var to []int
	require.NoError(t, DecodeFrameBody(f[FrameHeaderSize:], count, 4, 6, FrameHeaderSize, func(dst int, env *Envelope) {
		to, got = append(to, dst), append(got, *env)
	}))
	require.Equal(t, []int{4, 5, 4}, to)
	require.Len(t, got, 3)
	require.Equal(t, envs[0].Payload, got[0].Payload)
	require.Equal(t, envs[0].Index, got[0].Index)
	require.Equal(t, FlagAppLane, got[1].Flags)
	require.Equal(t, envs[2].FT.Dets, got[2].FT.Dets)

	for _, c := range []struct {
		name string
		mut  func([]byte) []byte
		lo   int
		err  string
	}{
		{"not a frame", func(b []byte) []byte { b[0] = 'X'; return b }, 4, "bytes 0-2"},
		{"another version", func(b []byte) []byte { b[3] = 9; return b }, 4, "byte 3: version 9"},
		{"too many entries for its length", func(b []byte) []byte { b[12] = 200; return b }, 4, "bytes 12-15: 200 entries cannot fit"},
		{"another process's PE", func(b []byte) []byte { return b }, 5, "entry 0 is for PE 4, not one of this process's (5 to 5)"},
		{"cut short", func(b []byte) []byte { return b[:len(b)-2] }, 4, "entry 2 at byte"},
	} {
		b := c.mut(append([]byte(nil), f...))
		gen, count, _, err := FrameHeader(b)
		if err == nil {
			delivered := 0
			err = DecodeFrameBody(b[FrameHeaderSize:], count, c.lo, 6, FrameHeaderSize, func(int, *Envelope) { delivered++ })
			require.Zero(t, delivered, "%s: a bad frame delivers nothing", c.name)
			_ = gen
		}
		require.ErrorContains(t, err, c.err, c.name)
	}
}

// FuzzDecodeFrame: frames come from other processes; any bytes decode to
// envelopes for this process's PEs or to an error, never a panic, and a
// frame with an error delivers nothing.
// Rate here (go test -fuzz, 2 workers, 10 s): about 45,000 inputs a second.
func FuzzDecodeFrame(f *testing.F) {
	f.Add(frameOf(f, 1, []int{0, 1}, []Envelope{{Type: testBytesType, Kind: KindP2P, Payload: []byte("x")}, {Type: testBytesType, Kind: KindSystem}}))
	f.Add([]byte("CGF\x01"))
	f.Fuzz(func(t *testing.T, b []byte) {
		_, count, body, err := FrameHeader(b)
		if err != nil || len(b) < FrameHeaderSize+body {
			return
		}
		delivered := 0
		err = DecodeFrameBody(b[FrameHeaderSize:FrameHeaderSize+body], count, 0, 2, FrameHeaderSize, func(dst int, env *Envelope) {
			require.True(t, dst >= 0 && dst < 2)
			delivered++
		})
		if err != nil {
			require.Zero(t, delivered)
		} else {
			require.Equal(t, count, delivered)
		}
	})
}

// BenchmarkFrame64 encodes and decodes frames of 64 small point-to-point
// envelopes (16-byte payload), reported per envelope.
func BenchmarkFrame64(b *testing.B) {
	envs := make([]Envelope, 64)
	dsts := make([]int, 64)
	for i := range envs {
		envs[i] = Envelope{Type: testBytesType, Kind: KindP2P, Index: Idx(i), Payload: make([]byte, 16)}
		dsts[i] = i % 2
	}
	buf := make([]byte, 0, 8192)
	b.ReportAllocs()
	for i := 0; i < b.N; i += 64 {
		f := AppendFrameHeader(buf[:0])
		for j := range envs {
			f, _ = AppendFrameEntry(f, dsts[j], &envs[j])
		}
		_ = FinishFrame(f, 1, 64)
		_, count, _, _ := FrameHeader(f)
		if err := DecodeFrameBody(f[FrameHeaderSize:], count, 0, 2, FrameHeaderSize, func(int, *Envelope) {}); err != nil {
			b.Fatal(err)
		}
	}
}

// chunked reads at most n bytes a call, the way a connection hands over
// what has come so far.
type chunked struct {
	b []byte
	n int
}

func (c *chunked) Read(p []byte) (int, error) {
	if len(c.b) == 0 {
		return 0, io.EOF
	}
	k := min(len(p), c.n, len(c.b))
	copy(p, c.b[:k])
	c.b = c.b[k:]
	return k, nil
}

// TestFrameReaderReadsAStream: frames of every size, cut at every read
// size (a frame larger than the reader's buffer among them), come out
// whole and in order, each body decodable; the stream's end between
// frames is io.EOF, inside one an error naming the byte.
func TestFrameReaderReadsAStream(t *testing.T) {
	var stream []byte
	var want []int
	for i, size := range []int{0, 1, 3, 200, 70 << 10, 5, 130 << 10, 2} {
		f := frameOf(t, uint64(i), []int{1}, []Envelope{{Type: testBytesType, Kind: KindP2P, Seq: uint64(i), Payload: bytes.Repeat([]byte{byte(i)}, size+1)}})
		stream = append(stream, f...)
		want = append(want, size+1)
	}
	for _, chunk := range []int{1, 7, 20, 21, 4096, 1 << 20} {
		t.Run(fmt.Sprint(chunk), func(t *testing.T) {
			r := NewFrameReader(&chunked{b: stream, n: chunk})
			var off int64
			var dec FrameDecoder
			for i, size := range want {
				gen, count, body, bodyAt, err := r.Next()
				require.NoError(t, err)
				require.Equal(t, uint64(i), gen)
				require.Equal(t, off+FrameHeaderSize, bodyAt)
				require.NoError(t, dec.Decode(body, count, 0, 2, bodyAt, func(dst int, env *Envelope) {
					require.Equal(t, 1, dst)
					require.Equal(t, uint64(i), env.Seq)
					require.Equal(t, bytes.Repeat([]byte{byte(i)}, size), env.Payload)
				}))
				off = bodyAt + int64(len(body))
			}
			_, _, _, _, err := r.Next()
			require.ErrorIs(t, err, io.EOF)
		})
	}
	r := NewFrameReader(&chunked{b: stream[:len(stream)-3], n: 100})
	var err error
	for err == nil {
		_, _, _, _, err = r.Next()
	}
	require.ErrorContains(t, err, "the stream ends inside a frame of")
	require.ErrorIs(t, err, io.ErrUnexpectedEOF)
	r = NewFrameReader(&chunked{b: stream[:5], n: 100})
	_, _, _, _, err = r.Next()
	require.EqualError(t, err, "byte 0: the stream ends inside a frame header")
}

// TestAppendEncodesAsEncode: a type's Append and its Encode put the same
// bytes on the wire, and an Append's error leaves the frame as it was.
func TestAppendEncodesAsEncode(t *testing.T) {
	appendType := RegisterType(TypeInfo{
		Name:   "pe.bytes.append",
		Encode: func(v any) ([]byte, error) { return v.([]byte), nil },
		Append: func(dst []byte, v any) ([]byte, error) {
			b, ok := v.([]byte)
			if !ok {
				return dst, fmt.Errorf("not bytes: %T", v)
			}
			return append(dst, b...), nil
		},
		Decode: func(b []byte) (any, error) { return bytes.Clone(b), nil },
	})
	for _, env := range []Envelope{
		{Kind: KindP2P, Index: Idx(3), Seq: 1, Payload: []byte("payload")},
		{Kind: KindP2P, Payload: []byte{}},
		{Kind: KindSystem, Aux: 7},
		{Kind: KindP2P, Payload: bytes.Repeat([]byte{1}, 1000), FT: &FTHeader{Sender: 1, SSN: 4}},
	} {
		a, e := env, env
		a.Type, e.Type = appendType, testBytesType
		viaAppend, err := EncodeEnvelope([]byte("prefix"), &a)
		require.NoError(t, err)
		viaEncode, err := EncodeEnvelope([]byte("prefix"), &e)
		require.NoError(t, err)
		binary.LittleEndian.PutUint32(viaEncode[6+4:], appendType) // the type ids differ, nothing else
		require.Equal(t, viaEncode, viaAppend)
		back, used, err := DecodeEnvelope(viaAppend[6:])
		require.NoError(t, err)
		require.Equal(t, len(viaAppend)-6, used)
		require.Equal(t, a.Payload, back.Payload)
	}
	bad := Envelope{Type: appendType, Kind: KindP2P, Payload: 5}
	out, err := EncodeEnvelope([]byte("prefix"), &bad)
	require.ErrorContains(t, err, "not bytes: int")
	require.Equal(t, []byte("prefix"), out)
}

// FuzzFrameReader: a connection's bytes, read in pieces of any size, give
// frames whose headers check out or an error, never a panic; the frames
// it returns are the stream's, back to back.
func FuzzFrameReader(f *testing.F) {
	f.Add(frameOf(f, 1, []int{0}, []Envelope{{Type: testBytesType, Kind: KindP2P, Payload: []byte("x")}}), uint8(3))
	f.Add([]byte("CGF\x01\x00"), uint8(1))
	f.Fuzz(func(t *testing.T, b []byte, chunk uint8) {
		r := NewFrameReader(&chunked{b: b, n: int(chunk) + 1})
		var at int64
		for {
			_, _, body, off, err := r.Next()
			if err != nil {
				return
			}
			require.Equal(t, at+FrameHeaderSize, off)
			require.Equal(t, b[off:off+int64(len(body))], body)
			at = off + int64(len(body))
		}
	})
}

// framewise hands over one frame a read.
type framewise struct{ frames [][]byte }

func (f *framewise) Read(p []byte) (int, error) {
	if len(f.frames) == 0 {
		return 0, io.EOF
	}
	n := copy(p, f.frames[0])
	if f.frames[0] = f.frames[0][n:]; len(f.frames[0]) == 0 {
		f.frames = f.frames[1:]
	}
	return n, nil
}

// A reader keeps the room a large frame needed while large frames come,
// and lets it go once frameShrinkAfter small ones in a row came.
func TestFrameReaderLetsALargeFramesRoomGo(t *testing.T) {
	big := frameOf(t, 1, []int{0}, []Envelope{{Type: testBytesType, Kind: KindP2P, Payload: make([]byte, 3*frameReadSize)}})
	small := frameOf(t, 1, []int{0}, []Envelope{{Type: testBytesType, Kind: KindP2P, Payload: []byte("s")}})
	src := &framewise{frames: [][]byte{big, big}}
	for range frameShrinkAfter {
		src.frames = append(src.frames, slices.Clone(small))
	}
	r := NewFrameReader(src)
	for range 2 {
		_, _, _, _, err := r.Next()
		require.NoError(t, err)
		require.Greater(t, len(r.buf), frameReadSize, "room for the large frames")
	}
	for i := range frameShrinkAfter {
		_, _, _, _, err := r.Next()
		require.NoError(t, err)
		if i < frameShrinkAfter-1 {
			require.Greater(t, len(r.buf), frameReadSize, "after %d small frames", i+1)
		}
	}
	require.Equal(t, frameReadSize, len(r.buf), "after %d small frames in a row", frameShrinkAfter)
}
