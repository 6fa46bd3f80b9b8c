package md

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/vmihailenco/msgpack/v5"
	"github.com/vmihailenco/msgpack/v5/msgpcode"
)

// A cell's positions cross a process boundary every step, to every PE
// with one of its computes there. msgpack encodes a []Vec3 as a map per
// atom (34 bytes, decoded by reflection: 30 µs for 171 atoms); a
// PositionsMsg goes as an array of its four fields with the positions as
// one run of little-endian float64s (24 bytes an atom, decoded in a
// loop). The decoder also takes the map form msgpack wrote before, which
// a checkpoint may hold (a compute's Pending).

// EncodeMsgpack implements msgpack.CustomEncoder.
func (m PositionsMsg) EncodeMsgpack(enc *msgpack.Encoder) error {
	if err := enc.EncodeArrayLen(4); err != nil {
		return err
	}
	if err := enc.Encode(m.Cell); err != nil {
		return err
	}
	var pos []byte
	if m.Pos != nil {
		pos = make([]byte, 24*len(m.Pos))
		for i, p := range m.Pos {
			b := pos[24*i:]
			binary.LittleEndian.PutUint64(b, math.Float64bits(p.X))
			binary.LittleEndian.PutUint64(b[8:], math.Float64bits(p.Y))
			binary.LittleEndian.PutUint64(b[16:], math.Float64bits(p.Z))
		}
	}
	if err := enc.EncodeBytes(pos); err != nil {
		return err
	}
	if err := enc.Encode(m.Sec); err != nil {
		return err
	}
	return enc.Encode(m.CB)
}

// DecodeMsgpack implements msgpack.CustomDecoder.
func (m *PositionsMsg) DecodeMsgpack(dec *msgpack.Decoder) error {
	c, err := dec.PeekCode()
	if err != nil {
		return err
	}
	if msgpcode.IsFixedMap(c) || c == msgpcode.Map16 || c == msgpcode.Map32 {
		type fields PositionsMsg // the map form, without these methods
		return dec.Decode((*fields)(m))
	}
	n, err := dec.DecodeArrayLen()
	if err != nil {
		return err
	}
	if n != 4 {
		return fmt.Errorf("positions: an array of %d fields, not 4", n)
	}
	if err := dec.Decode(&m.Cell); err != nil {
		return err
	}
	pos, err := dec.DecodeBytes()
	if err != nil {
		return err
	}
	if len(pos)%24 != 0 {
		return fmt.Errorf("positions: %d bytes, not 24 an atom", len(pos))
	}
	m.Pos = nil
	if pos != nil {
		m.Pos = make([]Vec3, len(pos)/24)
		for i := range m.Pos {
			b := pos[24*i:]
			m.Pos[i] = Vec3{
				X: math.Float64frombits(binary.LittleEndian.Uint64(b)),
				Y: math.Float64frombits(binary.LittleEndian.Uint64(b[8:])),
				Z: math.Float64frombits(binary.LittleEndian.Uint64(b[16:])),
			}
		}
	}
	if err := dec.Decode(&m.Sec); err != nil {
		return err
	}
	return dec.Decode(&m.CB)
}
