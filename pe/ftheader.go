package pe

import (
	"encoding/binary"
	"fmt"
	"reflect"
)

// Det is a determinant of message logging: the reception of message
// (Sender, SSN) was the RSN-th reception on Recver. A reduction
// contribution reaching a root under CAMEL is named by its group and
// reduction number instead (Group > 0, SSN = the reduction number).
type Det struct {
	Sender, Recver int32
	Group          uint64
	SSN, RSN       uint64
}

// Origin names an application message by the element that sent it and
// how many messages that element had sent until then (its K-th, from 1).
// An element that sends the same messages in the same order whatever
// order its own arrive in (send-deterministic, element by element: see
// docs/SPMD.md) gives each message the same Origin in every execution,
// a re-execution after a rollback included, which a protocol without
// determinants names messages by.
type Origin struct {
	Coll  uint32
	Index Index
	K     uint64
}

func (o Origin) String() string { return fmt.Sprintf("%d%v#%d", o.Coll, o.Index, o.K) }

// NameKind says what a MsgName names a message by.
type NameKind uint8

const (
	NameNone NameKind = iota
	// NameOrigin: an element's message (and each hop that passes it on),
	// by its Origin.
	NameOrigin
	// NamePartial: a reduction's partial result going up its tree, by its
	// group (Group), reduction number (Num) and sender (From).
	NamePartial
	// NameResult: a reduction's result going to its callback, by its group
	// and number.
	NameResult
	// NameContents: the runtime's own bookkeeping, by its sender (From),
	// the hash of its type and contents (Hash) and its occurrence among
	// the same on its channel (Num), or, for a measurement, by its sender,
	// type and number on its channel.
	NameContents
	// NameHint: runtime bookkeeping that a re-execution may send again or
	// not without harm (a location update), named as NameContents.
	NameHint
	numNameKinds
)

// MsgName is what message logging without determinants (docs/SPMD.md)
// names a message by: the same in every execution of a program whose
// elements send the same messages whatever order theirs arrive in, so a
// receiver that had it from a rolled-back sender's first execution
// recognises its copy from the re-execution, whatever way it came.
type MsgName struct {
	Kind       NameKind
	From       int32 // NamePartial, NameContents, NameHint
	Origin     Origin
	Group, Num uint64
	Hash       uint64
	// At (NameOrigin, NameResult): the PE the message left first, which
	// it came from whatever way it went; Crossed: on its way it went from
	// one team to another. Neither is part of the name (Key).
	// AtInc: the incarnation of PE At that sent it (a copy its
	// re-execution sends again comes from a later one)
	At      int32
	AtInc   uint32
	Crossed bool
}

// Key is n as a map key: without At, AtInc and Crossed.
func (n MsgName) Key() MsgName {
	n.At, n.AtInc, n.Crossed = 0, 0, false
	return n
}

// nameCrossed marks Crossed in the kind's byte on the wire.
const nameCrossed = 0x80

func (n MsgName) String() string {
	switch n.Kind {
	case NameOrigin:
		return "message " + n.Origin.String()
	case NamePartial:
		return fmt.Sprintf("PE %d's partial of reduction %d of group %#x", n.From, n.Num, n.Group)
	case NameResult:
		return fmt.Sprintf("result of reduction %d of group %#x", n.Num, n.Group)
	case NameContents:
		return fmt.Sprintf("PE %d's contents %#x (%d)", n.From, n.Hash, n.Num)
	case NameHint:
		return fmt.Sprintf("PE %d's hint %#x (%d)", n.From, n.Hash, n.Num)
	}
	return "unnamed"
}

// FTHeader is what a message-logging protocol stamps on an envelope. The
// PE layer carries it (and encodes it between processes) but never reads
// it: only the fault-tolerance hook does.
type FTHeader struct {
	Group          uint64 // multicasts and reductions: the group (> 0)
	Sender, Recver int32  // Recver -1: a CAMEL multicast, logged once for its whole group
	SSN            uint64 // (spmd: the sender's phase)
	CSN            uint64 // sequence number on the (Sender, Recver) channel
	Num            uint64 // multicasts: number in the group; reductions: reduction number
	Inc            uint32 // the sender's incarnation
	// Safe (team-based logging): every reception of the sender's up to
	// this rsn has its determinant held in another team; its teammates
	// stop passing those on. (Pessimist logging: how far the sender's
	// deliveries went, all from the receiver since its last commit,
	// which the receiver holds for it instead of a commit.)
	Safe uint64
	Dets []Det // determinants piggybacked on the message
	// Acks are determinants of the receiver's own receptions that the
	// sender stored: the receiver need not piggyback them any more (an
	// acknowledgement riding on a message that went to their owner
	// anyway, instead of a packet of its own).
	Acks []Det
	// Name (spmd): what the message is named by (see MsgName); nil for
	// the messages such a protocol need not name, and under the others.
	Name *MsgName
}

const (
	flagFT      = 0x40 // wire-only: an FT header follows the envelope header
	ftFixedSize = 8 + 4 + 4 + 8 + 8 + 8 + 4 + 8 + 4
	detSize     = 4 + 4 + 8 + 8 + 8
	maxWireDets = 1 << 20
)

// The FT header's wire forms, by its first byte: the full one (every
// field fixed-size, then the determinants and acknowledgements), and the
// named one of a protocol without determinants (varints: sender,
// receiver, channel number, incarnation, phase; then the name, if any).
const (
	ftFull  = 0
	ftNamed = 1
)

func appendFT(dst []byte, h *FTHeader) []byte {
	if h.Name != nil || (len(h.Dets) == 0 && len(h.Acks) == 0 && h.Group == 0 && h.Num == 0 && h.Safe == 0 && h.Sender >= 0 && h.Recver >= 0) {
		return appendNamedFT(dst, h)
	}
	dst = append(dst, ftFull)
	var b [ftFixedSize]byte
	binary.LittleEndian.PutUint64(b[0:], h.Group)
	binary.LittleEndian.PutUint32(b[8:], uint32(h.Sender))
	binary.LittleEndian.PutUint32(b[12:], uint32(h.Recver))
	binary.LittleEndian.PutUint64(b[16:], h.SSN)
	binary.LittleEndian.PutUint64(b[24:], h.CSN)
	binary.LittleEndian.PutUint64(b[32:], h.Num)
	binary.LittleEndian.PutUint32(b[40:], h.Inc)
	binary.LittleEndian.PutUint64(b[44:], h.Safe)
	binary.LittleEndian.PutUint32(b[52:], uint32(len(h.Dets)))
	dst = append(dst, b[:]...)
	dst = appendDets(dst, h.Dets)
	dst = binary.LittleEndian.AppendUint32(dst, uint32(len(h.Acks)))
	return appendDets(dst, h.Acks)
}

func appendDets(dst []byte, dets []Det) []byte {
	for _, d := range dets {
		var x [detSize]byte
		binary.LittleEndian.PutUint32(x[0:], uint32(d.Sender))
		binary.LittleEndian.PutUint32(x[4:], uint32(d.Recver))
		binary.LittleEndian.PutUint64(x[8:], d.Group)
		binary.LittleEndian.PutUint64(x[16:], d.SSN)
		binary.LittleEndian.PutUint64(x[24:], d.RSN)
		dst = append(dst, x[:]...)
	}
	return dst
}

// AppendFT appends h's wire form to dst (what a header adds to a message
// that crosses a process: the statistics' bytes per message).
func AppendFT(dst []byte, h *FTHeader) []byte { return appendFT(dst, h) }

// appendNamedFT appends h in the named form (which a header without
// determinants, acknowledgements, group, number or safe mark takes too:
// it says all it holds in fewer bytes).
func appendNamedFT(dst []byte, h *FTHeader) []byte {
	dst = append(dst, ftNamed)
	dst = binary.AppendUvarint(dst, uint64(uint32(h.Sender)))
	dst = binary.AppendUvarint(dst, uint64(uint32(h.Recver)))
	dst = binary.AppendUvarint(dst, h.CSN)
	dst = binary.AppendUvarint(dst, uint64(h.Inc))
	dst = binary.AppendUvarint(dst, h.SSN)
	n := h.Name
	if n == nil {
		return append(dst, byte(NameNone))
	}
	kb := byte(n.Kind)
	if n.Crossed {
		kb |= nameCrossed
	}
	dst = append(dst, kb)
	switch n.Kind {
	case NameOrigin:
		dst = binary.AppendUvarint(dst, uint64(n.Origin.Coll))
		dst = append(dst, n.Origin.Index.Dims)
		for _, c := range n.Origin.Index.C[:min(int(n.Origin.Index.Dims), MaxDims)] {
			dst = binary.AppendVarint(dst, int64(c))
		}
		dst = binary.AppendUvarint(dst, n.Origin.K)
		dst = binary.AppendUvarint(dst, n.Num)
		dst = binary.AppendUvarint(dst, uint64(uint32(n.At)))
		dst = binary.AppendUvarint(dst, uint64(n.AtInc))
	case NamePartial:
		dst = binary.AppendUvarint(dst, uint64(uint32(n.From)))
		dst = binary.AppendUvarint(dst, n.Group)
		dst = binary.AppendUvarint(dst, n.Num)
	case NameResult:
		dst = binary.AppendUvarint(dst, n.Group)
		dst = binary.AppendUvarint(dst, n.Num)
		dst = binary.AppendUvarint(dst, uint64(uint32(n.At)))
		dst = binary.AppendUvarint(dst, uint64(n.AtInc))
	case NameContents, NameHint:
		dst = binary.AppendUvarint(dst, uint64(uint32(n.From)))
		dst = binary.LittleEndian.AppendUint64(dst, n.Hash)
		dst = binary.AppendUvarint(dst, n.Num)
	}
	return dst
}

// namedReader reads the varints of a named FT header, remembering the
// first problem with the byte it was at.
type namedReader struct {
	b   []byte
	at  int
	off int // b's offset in the envelope
	err error
}

// next reads one varint with dec.
func (r *namedReader) next(what string, dec func([]byte) (uint64, int)) uint64 {
	if r.err != nil {
		return 0
	}
	v, n := dec(r.b[r.at:])
	if n <= 0 {
		r.err = fmt.Errorf("decode envelope: byte %d: FT header's %s is not a varint", r.off+r.at, what)
		return 0
	}
	r.at += n
	return v
}

func (r *namedReader) uvarint(what string) uint64 { return r.next(what, binary.Uvarint) }

func (r *namedReader) varint(what string) int64 {
	return int64(r.next(what, func(b []byte) (uint64, int) {
		v, n := binary.Varint(b)
		return uint64(v), n
	}))
}

func (r *namedReader) u32(what string) uint32 {
	at := r.at
	v := r.uvarint(what)
	if r.err == nil && v > 1<<32-1 {
		r.err = fmt.Errorf("decode envelope: byte %d: FT header's %s %d does not fit 32 bits", r.off+at, what, v)
	}
	return uint32(v)
}

func (r *namedReader) byte(what string) byte {
	if r.err != nil {
		return 0
	}
	if r.at >= len(r.b) {
		r.err = fmt.Errorf("decode envelope: byte %d: FT header's %s is missing", r.off+r.at, what)
		return 0
	}
	c := r.b[r.at]
	r.at++
	return c
}

// decodeNamedFT reads a named FT header from b (after its form byte),
// which starts at byte off of the envelope.
func decodeNamedFT(b []byte, off int) (*FTHeader, int, error) {
	r := &namedReader{b: b, off: off}
	h := &FTHeader{Sender: int32(r.u32("sender")), Recver: int32(r.u32("receiver"))}
	h.CSN = r.uvarint("channel number")
	h.Inc = r.u32("incarnation")
	h.SSN = r.uvarint("phase")
	kb := r.byte("name kind")
	kind := NameKind(kb &^ nameCrossed)
	if r.err == nil && kind >= numNameKinds {
		r.err = fmt.Errorf("decode envelope: byte %d: FT header's name kind %d is unknown", off+r.at-1, kind)
	}
	if r.err == nil && kind != NameNone {
		n := &MsgName{Kind: kind, Crossed: kb&nameCrossed != 0}
		switch kind {
		case NameOrigin:
			n.Origin.Coll = r.u32("origin's collection")
			dims := r.byte("origin's dimensions")
			if r.err == nil && (dims == 0 || dims > MaxDims) {
				r.err = fmt.Errorf("decode envelope: byte %d: FT header's origin has %d dimensions (1 to %d)", off+r.at-1, dims, MaxDims)
			}
			n.Origin.Index.Dims = dims
			for i := 0; i < int(dims) && r.err == nil; i++ {
				c := r.varint("origin's index")
				if r.err == nil && (c < -1<<31 || c > 1<<31-1) {
					r.err = fmt.Errorf("decode envelope: byte %d: FT header's origin index %d does not fit 32 bits", off+r.at, c)
				}
				n.Origin.Index.C[i] = int32(c)
			}
			n.Origin.K = r.uvarint("origin's count")
			n.Num = r.uvarint("occurrence")
			n.At = int32(r.u32("first PE"))
			n.AtInc = r.u32("first PE's incarnation")
		case NamePartial:
			n.From = int32(r.u32("partial's sender"))
			n.Group = r.uvarint("group")
			n.Num = r.uvarint("reduction number")
		case NameResult:
			n.Group = r.uvarint("group")
			n.Num = r.uvarint("reduction number")
			n.At = int32(r.u32("first PE"))
			n.AtInc = r.u32("first PE's incarnation")
		case NameContents, NameHint:
			n.From = int32(r.u32("sender"))
			if r.err == nil && len(b)-r.at < 8 {
				r.err = fmt.Errorf("decode envelope: byte %d: FT header's contents hash needs 8 bytes, %d left", off+r.at, len(b)-r.at)
			} else if r.err == nil {
				n.Hash = binary.LittleEndian.Uint64(b[r.at:])
				r.at += 8
			}
			n.Num = r.uvarint("occurrence")
		}
		h.Name = n
	}
	if r.err != nil {
		return nil, 0, r.err
	}
	return h, r.at, nil
}

// decodeFT reads an FT header from b, which starts at byte off of the
// envelope (for error messages).
func decodeFT(b []byte, off int) (*FTHeader, int, error) {
	if len(b) < 1 {
		return nil, 0, fmt.Errorf("decode envelope: byte %d: FT header's form is missing", off)
	}
	switch b[0] {
	case ftNamed:
		h, used, err := decodeNamedFT(b[1:], off+1)
		return h, used + 1, err
	case ftFull:
		h, used, err := decodeFullFT(b[1:], off+1)
		return h, used + 1, err
	}
	return nil, 0, fmt.Errorf("decode envelope: byte %d: FT header's form %d is unknown", off, b[0])
}

// decodeFullFT reads an FT header in the full form.
func decodeFullFT(b []byte, off int) (*FTHeader, int, error) {
	if len(b) < ftFixedSize {
		return nil, 0, fmt.Errorf("decode envelope: byte %d: FT header needs %d bytes, %d left", off, ftFixedSize, len(b))
	}
	h := &FTHeader{
		Group:  binary.LittleEndian.Uint64(b[0:]),
		Sender: int32(binary.LittleEndian.Uint32(b[8:])),
		Recver: int32(binary.LittleEndian.Uint32(b[12:])),
		SSN:    binary.LittleEndian.Uint64(b[16:]),
		CSN:    binary.LittleEndian.Uint64(b[24:]),
		Num:    binary.LittleEndian.Uint64(b[32:]),
		Inc:    binary.LittleEndian.Uint32(b[40:]),
		Safe:   binary.LittleEndian.Uint64(b[44:]),
	}
	used := ftFixedSize
	var err error
	if h.Dets, used, err = decodeDets(b, used, off, 52, "determinants"); err != nil {
		return nil, 0, err
	}
	if len(b)-used < 4 {
		return nil, 0, fmt.Errorf("decode envelope: byte %d: FT header's count of acknowledgements needs 4 bytes, %d left", off+used, len(b)-used)
	}
	count := used
	used += 4
	if h.Acks, used, err = decodeDets(b, used, off, count, "acknowledgements"); err != nil {
		return nil, 0, err
	}
	return h, used, nil
}

// decodeDets reads the list of determinants at b[at:] whose count is the
// uint32 at b[countAt:]; off is b's offset in the envelope.
func decodeDets(b []byte, at, off, countAt int, what string) ([]Det, int, error) {
	n := binary.LittleEndian.Uint32(b[countAt:])
	if n > maxWireDets || uint64(n)*detSize > uint64(len(b)-at) {
		return nil, 0, fmt.Errorf("decode envelope: byte %d: FT header claims %d %s, %d bytes follow", off+countAt, n, what, len(b)-at)
	}
	if n == 0 {
		return nil, at, nil
	}
	dets := make([]Det, n)
	for i := range dets {
		x := b[at+i*detSize:]
		dets[i] = Det{
			Sender: int32(binary.LittleEndian.Uint32(x[0:])),
			Recver: int32(binary.LittleEndian.Uint32(x[4:])),
			Group:  binary.LittleEndian.Uint64(x[8:]),
			SSN:    binary.LittleEndian.Uint64(x[16:]),
			RSN:    binary.LittleEndian.Uint64(x[24:]),
		}
	}
	return dets, at + int(n)*detSize, nil
}

func (d Det) String() string {
	if d.Group > 0 {
		return fmt.Sprintf("<%d→%d group %d reduction %d rsn %d>", d.Sender, d.Recver, d.Group, d.SSN, d.RSN)
	}
	return fmt.Sprintf("<%d→%d ssn %d rsn %d>", d.Sender, d.Recver, d.SSN, d.RSN)
}

// Sizer is implemented by payloads that know their size on the wire. A
// payload that does not implement it is sized by DataSize, which walks
// it: implement Sizer where a message type is sent often and its size is
// cheap to say (a slice's length times its element's size).
type Sizer interface{ WireSize() int }

// PayloadSize is a payload's size on the wire: its own (Sizer), or its
// data's (DataSize); -1 for a payload that has no size (a channel or a
// function inside it).
func PayloadSize(v any) int {
	switch x := v.(type) {
	case nil:
		return 0
	case Sizer:
		return x.WireSize()
	case []float64:
		return 8 * len(x)
	case []int64:
		return 8 * len(x)
	case []byte:
		return len(x)
	case string:
		return len(x)
	case float64, int64, int, uint64:
		return 8
	case int32, uint32, float32:
		return 4
	case bool:
		return 1
	case struct{}:
		return 0
	}
	return DataSize(reflect.ValueOf(v))
}
