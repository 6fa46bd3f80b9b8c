package pe

import (
	"encoding/binary"
	"fmt"
	"io"
	"slices"
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
	var d FrameDecoder
	return d.Decode(body, count, lo, hi, off, deliver)
}

// FrameDecoder is DecodeFrameBody with the room for a frame's entries
// kept from one frame to the next (a connection's reader decodes frame
// after frame without allocating for them). Its zero value is ready.
type FrameDecoder struct {
	envs []Envelope
	dsts []int32
}

// Decode is DecodeFrameBody. The envelopes it delivers are its own until
// the next call: deliver copies what it keeps.
func (d *FrameDecoder) Decode(body []byte, count, lo, hi int, off int64, deliver func(dst int, env *Envelope)) error {
	envs, dsts := d.envs[:0], d.dsts[:0]
	defer func() {
		clear(envs) // payloads are the receivers' now
		d.envs, d.dsts = envs[:0], dsts[:0]
	}()
	if count > len(body)/(4+headerSize) { // (FrameHeader checks this too; here before room is made)
		return fmt.Errorf("frame: byte %d: %d entries cannot fit in %d bytes", off, count, len(body))
	}
	envs, dsts = slices.Grow(envs, count), slices.Grow(dsts, count)
	at := 0
	for i := 0; i < count; i++ {
		if len(body)-at < 4 {
			return fmt.Errorf("frame: byte %d: entry %d of %d cut short", off+int64(at), i, count)
		}
		dst := int32(binary.LittleEndian.Uint32(body[at:]))
		if (int(dst) < lo || int(dst) >= hi) && dst != ServiceDst {
			return fmt.Errorf("frame: byte %d: entry %d is for PE %d, not one of this process's (%d to %d)", off+int64(at), i, dst, lo, hi-1)
		}
		env, used, err := DecodeEnvelope(body[at+4:])
		if err != nil {
			return fmt.Errorf("frame: entry %d at byte %d: %w", i, off+int64(at+4), err)
		}
		envs, dsts = append(envs, env), append(dsts, dst)
		at += 4 + used
	}
	if at != len(body) {
		return fmt.Errorf("frame: byte %d: %d bytes left over after %d entries", off+int64(at), len(body)-at, count)
	}
	for i := range envs {
		deliver(int(dsts[i]), &envs[i])
	}
	return nil
}

// FrameReader reads frames from a stream into a buffer of its own, which
// it reuses: a frame's bytes are read once, from the kernel into the
// buffer, and decoded where they lie (message types' decoders copy what
// they keep: TypeInfo.Decode). Only the bytes of a frame that one read
// cut short are moved, to the buffer's front, before the rest is read.
type FrameReader struct {
	r          io.Reader
	buf        []byte
	start, end int   // buf[start:end] is read and not yet returned
	off        int64 // the stream offset of buf[start]
	small      int   // frames in a row that fit in frameReadSize
}

// frameReadSize is a FrameReader's buffer to begin with, and the least
// it asks the stream for: many small frames come in one read.
const frameReadSize = 64 << 10

// frameShrinkAfter is how many frames in a row that fit in
// frameReadSize a FrameReader reads before it lets the room a large one
// needed go: a link that carries large frames (a busy stream gathers up
// to several MB a frame) keeps room for them, one that had a burst of
// them does not keep it for ever (a process has a link to each process
// it talks to).
const frameShrinkAfter = 64

// NewFrameReader reads frames from r.
func NewFrameReader(r io.Reader) *FrameReader {
	return &FrameReader{r: r, buf: make([]byte, frameReadSize)}
}

// Next returns the next frame: its generation, entry count, body (valid
// until the next call) and the body's offset in the stream. At the
// stream's end between frames it returns io.EOF; errors name the byte.
func (f *FrameReader) Next() (gen uint64, count int, body []byte, off int64, err error) {
	if err := f.fill(FrameHeaderSize); err != nil {
		if err == io.EOF && f.end > f.start {
			return 0, 0, nil, 0, fmt.Errorf("byte %d: the stream ends inside a frame header", f.off)
		}
		return 0, 0, nil, 0, err
	}
	gen, count, size, err := FrameHeader(f.buf[f.start:f.end])
	if err != nil {
		return 0, 0, nil, 0, fmt.Errorf("byte %d: %w", f.off, err)
	}
	if err := f.fill(FrameHeaderSize + size); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return 0, 0, nil, 0, fmt.Errorf("byte %d: the stream ends inside a frame of %d bytes: %w", f.off+FrameHeaderSize, size, err)
	}
	body = f.buf[f.start+FrameHeaderSize : f.start+FrameHeaderSize+size]
	off = f.off + FrameHeaderSize
	f.start += FrameHeaderSize + size
	f.off += int64(FrameHeaderSize + size)
	if FrameHeaderSize+size <= frameReadSize {
		f.small++
	} else {
		f.small = 0
	}
	if f.start == f.end {
		f.start, f.end = 0, 0 // (the next read begins at the front, moving nothing)
		if len(f.buf) > frameReadSize && f.small >= frameShrinkAfter {
			f.buf = make([]byte, frameReadSize) // large frames stopped coming
		}
	}
	return gen, count, body, off, nil
}

// fill reads until n bytes from start are in the buffer, moving what was
// read of them to the front (or growing the buffer) where they would not
// fit behind it.
func (f *FrameReader) fill(n int) error {
	if f.end-f.start >= n {
		return nil
	}
	if f.start+n > len(f.buf) {
		if n > len(f.buf) {
			grown := make([]byte, max(n, 2*len(f.buf)))
			f.end = copy(grown, f.buf[f.start:f.end])
			f.buf = grown
		} else {
			f.end = copy(f.buf, f.buf[f.start:f.end])
		}
		f.start = 0
	}
	for f.end-f.start < n {
		k, err := f.r.Read(f.buf[f.end:])
		f.end += k
		if f.end-f.start >= n {
			return nil
		}
		if err != nil {
			return err
		}
		if k == 0 {
			return io.ErrNoProgress
		}
	}
	return nil
}
