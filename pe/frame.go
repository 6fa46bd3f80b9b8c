package pe

import (
	"encoding/binary"
	"fmt"
)

// A frame is the unit that carries envelopes between processes: one
// writer per peer process gathers what its PEs hand over for that
// process's PEs into a frame, and the reader there hands each envelope to
// its PE. A frame is a fixed header and its entries, each the destination
// PE (4 bytes) and the envelope's wire form (EncodeEnvelope: its own
// fixed header, FT header and payload), so a frame needs no reflection
// beyond the payloads':
//
//	bytes 0–3    magic "CGF" and the frame version
//	bytes 4–11   generation: a job rolled back since drops frames of an
//	             older one (messages sent before the rollback)
//	bytes 12–15  number of entries
//	bytes 16–19  length of the entries that follow
//
// Bytes from another process are never trusted: every error names the
// byte offset and what is wrong there.
const (
	frameVersion    = 1
	FrameHeaderSize = 20
	// MaxFrameBody bounds a frame's entries: a larger length is refused
	// before anything is read (a writer splits batches above it).
	MaxFrameBody = 64 << 20
)

// ServiceDst is the destination of a frame entry for the receiving
// process itself, not one of its PEs: a service of the layer above (the
// pessimist protocol's event logger), which the reader hands the entry to
// at once, whatever the frame's generation and while PEs are being
// replaced.
const ServiceDst = -1

// AppendFrameHeader reserves a frame header at the end of dst; FinishFrame
// fills it in once the entries are appended.
func AppendFrameHeader(dst []byte) []byte {
	return append(dst, make([]byte, FrameHeaderSize)...)
}

// AppendFrameEntry appends one entry (env, for PE dst) to a frame being
// built.
func AppendFrameEntry(frame []byte, dst int, env *Envelope) ([]byte, error) {
	frame = binary.LittleEndian.AppendUint32(frame, uint32(dst))
	return EncodeEnvelope(frame, env)
}

// FinishFrame fills in the header of the frame that starts at frame[0]
// and holds count entries.
func FinishFrame(frame []byte, gen uint64, count int) error {
	if len(frame) < FrameHeaderSize {
		return fmt.Errorf("frame: %d bytes, shorter than its header", len(frame))
	}
	body := len(frame) - FrameHeaderSize
	if body > MaxFrameBody {
		return fmt.Errorf("frame: %d bytes of entries, at most %d", body, MaxFrameBody)
	}
	copy(frame[0:4], []byte{'C', 'G', 'F', frameVersion})
	binary.LittleEndian.PutUint64(frame[4:], gen)
	binary.LittleEndian.PutUint32(frame[12:], uint32(count))
	binary.LittleEndian.PutUint32(frame[16:], uint32(body))
	return nil
}

// FrameHeader reads a frame's header: its generation, its number of
// entries and the length of the entries that follow (a reader of a stream
// reads that many bytes next).
func FrameHeader(b []byte) (gen uint64, count, body int, err error) {
	if len(b) < FrameHeaderSize {
		return 0, 0, 0, fmt.Errorf("frame: %d bytes, a header needs %d", len(b), FrameHeaderSize)
	}
	if b[0] != 'C' || b[1] != 'G' || b[2] != 'F' {
		return 0, 0, 0, fmt.Errorf("frame: bytes 0-2: %q is not a charmgo frame", b[0:3])
	}
	if b[3] != frameVersion {
		return 0, 0, 0, fmt.Errorf("frame: byte 3: version %d, this build reads %d", b[3], frameVersion)
	}
	gen = binary.LittleEndian.Uint64(b[4:])
	c := binary.LittleEndian.Uint32(b[12:])
	n := binary.LittleEndian.Uint32(b[16:])
	if n > MaxFrameBody {
		return 0, 0, 0, fmt.Errorf("frame: bytes 16-19: %d bytes of entries, at most %d", n, MaxFrameBody)
	}
	// an entry takes at least its destination and an envelope header
	if uint64(c)*uint64(4+headerSize) > uint64(n) {
		return 0, 0, 0, fmt.Errorf("frame: bytes 12-15: %d entries cannot fit in %d bytes", c, n)
	}
	return gen, int(c), int(n), nil
}

// DecodeFrameBody decodes a frame's count entries from body (the bytes
// after its header) for a process whose PEs are lo..hi-1, calling deliver
// with each. It decodes every entry before it delivers any: a frame with a
// bad entry delivers nothing. off is body's offset in the stream, for
// errors.
func DecodeFrameBody(body []byte, count, lo, hi int, off int64, deliver func(dst int, env *Envelope)) error {
	envs := make([]Envelope, count)
	dsts := make([]int, count)
	at := 0
	for i := range envs {
		if len(body)-at < 4 {
			return fmt.Errorf("frame: byte %d: entry %d of %d cut short", off+int64(at), i, count)
		}
		d := int32(binary.LittleEndian.Uint32(body[at:]))
		if (int(d) < lo || int(d) >= hi) && d != ServiceDst {
			return fmt.Errorf("frame: byte %d: entry %d is for PE %d, not one of this process's (%d to %d)", off+int64(at), i, d, lo, hi-1)
		}
		env, used, err := DecodeEnvelope(body[at+4:])
		if err != nil {
			return fmt.Errorf("frame: entry %d at byte %d: %w", i, off+int64(at+4), err)
		}
		envs[i], dsts[i] = env, int(d)
		at += 4 + used
	}
	if at != len(body) {
		return fmt.Errorf("frame: byte %d: %d bytes left over after %d entries", off+int64(at), len(body)-at, count)
	}
	for i := range envs {
		deliver(dsts[i], &envs[i])
	}
	return nil
}
