package pe

import (
	"encoding/binary"
	"fmt"
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

// FTHeader is what a message-logging protocol stamps on an envelope. The
// PE layer carries it (and encodes it between processes) but never reads
// it: only the fault-tolerance hook does.
type FTHeader struct {
	Group          uint64 // multicasts and reductions: the group (> 0)
	Sender, Recver int32  // Recver -1: a CAMEL multicast, logged once for its whole group
	SSN            uint64
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
}

const (
	flagFT      = 0x40 // wire-only: an FT header follows the envelope header
	ftFixedSize = 8 + 4 + 4 + 8 + 8 + 8 + 4 + 8 + 4
	detSize     = 4 + 4 + 8 + 8 + 8
	maxWireDets = 1 << 20
)

func appendFT(dst []byte, h *FTHeader) []byte {
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

// decodeFT reads an FT header from b, which starts at byte off of the
// envelope (for error messages).
func decodeFT(b []byte, off int) (*FTHeader, int, error) {
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

// Sizer is implemented by payloads that know their size on the wire.
type Sizer interface{ WireSize() int }

// PayloadSize is the wire size of a payload when it can be known cheaply, or
// -1.
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
	return -1
}
