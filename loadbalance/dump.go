package loadbalance

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"

	"github.com/charmgo/charmgo/pe"
	"github.com/vmihailenco/msgpack/v5"
)

// The stats file (+LBDump FILE), version 1:
//
//	header  8 bytes "CGLBSTAT", then version as a big-endian uint16 (1)
//	        and two zero bytes
//	record  a big-endian uint32 length N, N bytes of msgpack, and the
//	        big-endian CRC-32 (IEEE) of those N bytes; one per balancing
//	        step, in step order, until the end of the file
//
// A record's msgpack is a Record, encoded by field name: {Coll, Stats: {Step,
// CPUTime, PEs: [{Wall, Busy, Idle, Background, Unavailable}], Objs:
// [{Coll, Index: {Dims, C: [6 ints]}, PE, Wall, CPU, Migratable, Bytes}],
// Comm: [{From, To, Msgs, Bytes}]}, Strategy, Options: {Tolerance, Seed},
// Moves: [{Obj, From, To}]}. Times are seconds as float64; From and To of
// Comm and Obj of Move index Objs. Readers ignore fields they do not know,
// so later versions may add fields; a change of meaning bumps the version.
const (
	dumpMagic   = "CGLBSTAT"
	DumpVersion = 1
	// maxRecord bounds one record's length (a 1,024-PE, 100,000-chare
	// step with its communication graph is about 20 MB).
	maxRecord = 1 << 30
)

// Record is one balancing step as dumped: the stats the strategy saw, the
// strategy and options that ran, and the moves it planned.
type Record struct {
	Coll     string // the collection balanced (its registered type name)
	Stats    Stats
	Strategy string
	Options  Options
	Moves    []Move
}

// DumpWriter writes a stats file.
type DumpWriter struct {
	w     io.Writer
	wrote bool
}

// NewDumpWriter starts a stats file on w (the header is written with the
// first record).
func NewDumpWriter(w io.Writer) *DumpWriter { return &DumpWriter{w: w} }

// Write appends one step's record.
func (d *DumpWriter) Write(r *Record) error {
	b, err := msgpack.Marshal(r)
	if err != nil {
		return fmt.Errorf("stats file: encode step %d: %w", r.Stats.Step, err)
	}
	if len(b) > maxRecord {
		return fmt.Errorf("stats file: step %d encodes to %d bytes, more than a record may hold", r.Stats.Step, len(b))
	}
	var out bytes.Buffer
	if !d.wrote {
		out.WriteString(dumpMagic)
		out.Write([]byte{0, DumpVersion, 0, 0})
	}
	var n [4]byte
	binary.BigEndian.PutUint32(n[:], uint32(len(b)))
	out.Write(n[:])
	out.Write(b)
	binary.BigEndian.PutUint32(n[:], crc32.ChecksumIEEE(b))
	out.Write(n[:])
	if _, err := d.w.Write(out.Bytes()); err != nil {
		return fmt.Errorf("stats file: write step %d: %w", r.Stats.Step, err)
	}
	d.wrote = true
	return nil
}

// ReadDump reads every record of a stats file. name is how errors call the
// file; each error names the byte offset where the file went wrong. The
// records read before a damaged one are returned with the error.
func ReadDump(r io.Reader, name string) ([]Record, error) {
	var hdr [12]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return nil, fmt.Errorf("%s: offset 0: not a stats file: %s", name, short(err))
	}
	if string(hdr[:8]) != dumpMagic {
		return nil, fmt.Errorf("%s: offset 0: not a stats file (no %q header)", name, dumpMagic)
	}
	if v := binary.BigEndian.Uint16(hdr[8:10]); v != DumpVersion {
		return nil, fmt.Errorf("%s: offset 8: stats file version %d; this build reads version %d", name, v, DumpVersion)
	}
	off := int64(len(hdr))
	var out []Record
	for {
		var n [4]byte
		k, err := io.ReadFull(r, n[:])
		if err == io.EOF {
			return out, nil
		}
		if err != nil {
			return out, fmt.Errorf("%s: offset %d: record length cut short after %d bytes", name, off, k)
		}
		size := binary.BigEndian.Uint32(n[:])
		if size > maxRecord {
			return out, fmt.Errorf("%s: offset %d: record of %d bytes is longer than %d", name, off, size, maxRecord)
		}
		var body bytes.Buffer
		if got, err := body.ReadFrom(io.LimitReader(r, int64(size)+4)); err != nil || got != int64(size)+4 {
			return out, fmt.Errorf("%s: offset %d: record of %d bytes cut short (%d bytes left in the file)", name, off, size, max(got-4, 0))
		}
		b := body.Bytes()
		if sum := binary.BigEndian.Uint32(b[size:]); sum != crc32.ChecksumIEEE(b[:size]) {
			return out, fmt.Errorf("%s: offset %d: record fails its checksum", name, off)
		}
		var rec Record
		if err := pe.UnmarshalMsgpack(b[:size], &rec); err != nil {
			return out, fmt.Errorf("%s: offset %d: record does not decode: %v", name, off, err)
		}
		if err := rec.Stats.Validate(); err != nil {
			return out, fmt.Errorf("%s: offset %d: %v", name, off, err)
		}
		if err := rec.Stats.CheckPlan(rec.Moves); err != nil {
			return out, fmt.Errorf("%s: offset %d: step %d: recorded %v", name, off, rec.Stats.Step, err)
		}
		out = append(out, rec)
		off += 4 + int64(size) + 4
	}
}

func short(err error) string {
	if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
		return "file too short"
	}
	return err.Error()
}
