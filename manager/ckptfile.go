package manager

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/charmgo/charmgo/internal/atomicfile"

	"github.com/charmgo/charmgo/pe"
	"github.com/vmihailenco/msgpack/v5"
)

// Checkpoint files. A checkpoint directory holds DIR/epoch-E/pe-N.ckpt,
// one PE's snapshot each, and DIR/LATEST, which names the last complete
// epoch and lists every one of its files' size and checksum. Each file is
// a fixed header and a payload:
//
//	offset  size  field
//	0       8     magic "CHGOCKPT"
//	8       2     format version (little endian), FileVersion
//	10      1     kind: 1 a PE's snapshot, 2 LATEST
//	11      1     zero
//	12      8     payload length in bytes
//	20      4     CRC-32C (Castagnoli) of the payload
//	24      4     CRC-32C of bytes 0..23
//	28            payload: a msgpack PESnapshot, or a msgpack Latest
//
// Every file is written to a temporary name, fsynced and renamed into
// place; PE 0 fsyncs the epoch's directory once every PE wrote its file,
// then writes LATEST the same way and fsyncs DIR, and only then removes the
// previous epoch. A reader checks the header, the length against the
// file's size and LATEST's record, and both checksums before it decodes a
// byte, so a flipped bit, a truncated, swapped or foreign file, or a LATEST
// with absurd counts is refused with the file's name and never decoded.

// FileVersion is the version of the checkpoint file format.
const FileVersion = 1

const (
	fileMagic      = "CHGOCKPT"
	fileHeaderSize = 28
	kindSnapshot   = 1
	kindLatest     = 2
	// MaxCheckpointPEs bounds the PE count a LATEST may name (and so
	// what reading it may allocate).
	MaxCheckpointPEs = 1 << 16
	maxLatestSize    = fileHeaderSize + 64 + 16*MaxCheckpointPEs
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Checksum is the CRC-32C that checkpoint files carry for a payload.
func Checksum(payload []byte) uint32 { return crc32.Checksum(payload, castagnoli) }

// FileRecord is what LATEST says of one PE's file: its payload's length and
// checksum.
type FileRecord struct {
	Size uint64
	CRC  uint32
}

// Latest is DIR/LATEST: the last checkpoint every PE wrote, and its files.
type Latest struct {
	Epoch  uint64
	NumPEs int32
	Files  []FileRecord
}

// fileHeader builds the header of a file of kind holding payload.
func fileHeader(kind byte, payload []byte) []byte {
	h := make([]byte, fileHeaderSize)
	copy(h, fileMagic)
	binary.LittleEndian.PutUint16(h[8:], FileVersion)
	h[10] = kind
	binary.LittleEndian.PutUint64(h[12:], uint64(len(payload)))
	binary.LittleEndian.PutUint32(h[20:], Checksum(payload))
	binary.LittleEndian.PutUint32(h[24:], crc32.Checksum(h[:24], castagnoli))
	return h
}

// checkFile checks b, a whole file that should be of kind, and returns
// its payload; want, if set, is LATEST's record of it.
func checkFile(b []byte, kind byte, want *FileRecord) ([]byte, error) {
	if len(b) < fileHeaderSize {
		return nil, fmt.Errorf("%d bytes: shorter than a checkpoint file's %d-byte header (truncated?)", len(b), fileHeaderSize)
	}
	h := b[:fileHeaderSize]
	if string(h[:8]) != fileMagic {
		return nil, fmt.Errorf("not a charmgo checkpoint file (it does not start with %q)", fileMagic)
	}
	if got := crc32.Checksum(h[:24], castagnoli); got != binary.LittleEndian.Uint32(h[24:]) {
		return nil, fmt.Errorf("damaged: its header's checksum does not match (CRC-32C %#08x, recorded %#08x)", got, binary.LittleEndian.Uint32(h[24:]))
	}
	if v := binary.LittleEndian.Uint16(h[8:]); v != FileVersion {
		return nil, fmt.Errorf("checkpoint file format %d, this build reads %d", v, FileVersion)
	}
	if h[10] != kind || h[11] != 0 {
		return nil, fmt.Errorf("a checkpoint file of kind %d, want %d (a LATEST and a snapshot swapped?)", h[10], kind)
	}
	n := binary.LittleEndian.Uint64(h[12:])
	if n != uint64(len(b)-fileHeaderSize) {
		return nil, fmt.Errorf("%d bytes of payload, its header says %d (truncated?)", len(b)-fileHeaderSize, n)
	}
	sum := binary.LittleEndian.Uint32(h[20:])
	if want != nil && (want.Size != n || want.CRC != sum) {
		return nil, fmt.Errorf("not the file LATEST names (%d bytes with CRC-32C %#08x; LATEST lists %d bytes with %#08x): from another checkpoint or run?", n, sum, want.Size, want.CRC)
	}
	payload := b[fileHeaderSize:]
	if got := Checksum(payload); got != sum {
		return nil, fmt.Errorf("damaged: its payload's checksum does not match (CRC-32C %#08x, recorded %#08x)", got, sum)
	}
	return payload, nil
}

// readBounded reads file, refusing one larger than limit bytes before
// reading it, and anything that is not a regular file (a symbolic link
// is followed): a device would read for ever (/dev/zero) and a FIFO would
// block the open. It never reads more than the size the file had when
// opened.
func readBounded(file string, limit int64) ([]byte, error) {
	st, err := os.Stat(file)
	if err != nil {
		return nil, err
	}
	if err := regular(file, st, limit); err != nil {
		return nil, err
	}
	f, err := os.Open(file)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if st, err = f.Stat(); err != nil { // what was opened, if the name moved meanwhile
		return nil, err
	}
	if err := regular(file, st, limit); err != nil {
		return nil, err
	}
	b := make([]byte, st.Size())
	if _, err := io.ReadFull(f, b); err != nil {
		return nil, fmt.Errorf("%s: %d bytes when opened, shorter when read: %w", file, st.Size(), err)
	}
	return b, nil
}

// regular checks that st, file's, is of a regular file of limit bytes or
// fewer.
func regular(file string, st fs.FileInfo, limit int64) error {
	if !st.Mode().IsRegular() {
		return fmt.Errorf("%s is not a regular file (%v): a checkpoint file is read from a file only", file, st.Mode().Type())
	}
	if st.Size() > limit {
		return fmt.Errorf("%s: %d bytes, more than a checkpoint file of its kind can hold (%d)", file, st.Size(), limit)
	}
	return nil
}

func epochDir(dir string, epoch uint64) string {
	return filepath.Join(dir, fmt.Sprintf("epoch-%d", epoch))
}

// SnapshotFile is where PE p's snapshot of epoch e is written under dir.
func SnapshotFile(dir string, epoch uint64, p int) string {
	return filepath.Join(epochDir(dir, epoch), fmt.Sprintf("pe-%d.ckpt", p))
}

// writeSnapshot writes PE p's encoded snapshot of epoch to dir and returns
// LATEST's record of it.
func writeSnapshot(dir string, p int, epoch uint64, app []byte) (FileRecord, error) {
	if err := os.MkdirAll(epochDir(dir, epoch), 0o755); err != nil {
		return FileRecord{}, fmt.Errorf("checkpoint directory: %w", err)
	}
	if err := writeDurably(SnapshotFile(dir, epoch, p), kindSnapshot, app); err != nil {
		return FileRecord{}, err
	}
	return FileRecord{Size: uint64(len(app)), CRC: Checksum(app)}, nil
}

// commitLatest makes epoch, whose files are all written, the directory's
// last complete checkpoint: the epoch's directory is synced, LATEST
// written and the directory synced, and only then the previous epoch
// removed.
func commitLatest(dir string, epoch uint64, files []FileRecord) error {
	if err := syncDir(epochDir(dir, epoch)); err != nil {
		return err
	}
	b, err := msgpack.Marshal(&Latest{Epoch: epoch, NumPEs: int32(len(files)), Files: files})
	if err != nil {
		return err
	}
	if err := writeDurably(filepath.Join(dir, "LATEST"), kindLatest, b); err != nil {
		return err
	}
	if err := syncDir(dir); err != nil {
		return err
	}
	if err := os.RemoveAll(epochDir(dir, epoch-1)); err != nil {
		return fmt.Errorf("removing the previous checkpoint: %w", err)
	}
	return nil
}

// writeDurably writes a checkpoint file whole: a temporary file, synced,
// renamed into place.
func writeDurably(path string, kind byte, payload []byte) error {
	err := atomicfile.Write(path, 0o644, true, func(w io.Writer) error {
		if _, err := w.Write(fileHeader(kind, payload)); err != nil {
			return err
		}
		_, err := w.Write(payload)
		return err
	})
	if err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("syncing %s: %w", dir, err)
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("syncing %s: %w", dir, err)
	}
	return nil
}

// NoCheckpointError says that a directory holds no complete checkpoint:
// none was committed there yet.
type NoCheckpointError struct{ Dir string }

func (e NoCheckpointError) Error() string {
	return fmt.Sprintf("%s holds no complete checkpoint (no LATEST file)", e.Dir)
}

// ReadLatest reads and checks DIR/LATEST. Errors name the directory or
// the file and say what is wrong.
func ReadLatest(dir string) (Latest, error) {
	var l Latest
	st, err := os.Stat(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return l, fmt.Errorf("%s does not exist", dir)
	case err != nil:
		return l, err
	case !st.IsDir():
		return l, fmt.Errorf("%s is not a directory", dir)
	}
	file := filepath.Join(dir, "LATEST")
	b, err := readBounded(file, maxLatestSize)
	if errors.Is(err, fs.ErrNotExist) {
		return l, NoCheckpointError{Dir: dir}
	}
	if err != nil {
		return l, err
	}
	payload, err := checkFile(b, kindLatest, nil)
	if err != nil {
		return l, fmt.Errorf("%s: %w", file, err)
	}
	if err := strictUnmarshal(payload, &l); err != nil {
		return l, fmt.Errorf("%s: not a checkpoint marker: %w", file, err)
	}
	switch {
	case l.Epoch == 0:
		return l, fmt.Errorf("%s names checkpoint 0 (the first is 1)", file)
	case l.NumPEs < 1 || l.NumPEs > MaxCheckpointPEs:
		return l, fmt.Errorf("%s names a checkpoint of %d PEs (1 to %d)", file, l.NumPEs, MaxCheckpointPEs)
	case len(l.Files) != int(l.NumPEs):
		return l, fmt.Errorf("%s lists %d files for %d PEs", file, len(l.Files), l.NumPEs)
	}
	return l, nil
}

// ReadSnapshotFile reads PE p's file of the checkpoint latest names in dir,
// checks it against latest's record, decodes and checks its snapshot.
// It returns the snapshot's encoding (the file's payload) and the
// snapshot; errors name the file.
func ReadSnapshotFile(dir string, latest Latest, p int) ([]byte, *PESnapshot, error) {
	file := SnapshotFile(dir, latest.Epoch, p)
	want := latest.Files[p]
	b, err := readBounded(file, fileHeaderSize+int64(min(want.Size, 1<<62)))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil, fmt.Errorf("%s is missing: LATEST names checkpoint %d of %d PEs", file, latest.Epoch, latest.NumPEs)
	}
	if err != nil {
		return nil, nil, err
	}
	payload, err := checkFile(b, kindSnapshot, &want)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", file, err)
	}
	s, err := DecodeSnapshot(payload)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", file, err)
	}
	if int(s.PE) != p || s.Epoch != latest.Epoch || s.NumPEs != latest.NumPEs {
		return nil, nil, fmt.Errorf("%s holds PE %d of %d, epoch %d: want PE %d of %d, epoch %d", file, s.PE, s.NumPEs, s.Epoch, p, latest.NumPEs, latest.Epoch)
	}
	return payload, s, nil
}

// strictUnmarshal decodes b into v and refuses fields v does not have
// and bytes left over.
func strictUnmarshal(b []byte, v any) error {
	if err := pe.CheckMsgpack(b); err != nil {
		return err
	}
	r := bytes.NewReader(b)
	dec := msgpack.NewDecoder(r)
	dec.DisallowUnknownFields(true)
	if err := dec.Decode(v); err != nil {
		return err
	}
	if r.Len() > 0 {
		return fmt.Errorf("%d bytes left over after the value", r.Len())
	}
	return nil
}

// ReadCheckpoint reads the last complete checkpoint in dir, of a run of n
// PEs, checked whole: a rollback finds there what no surviving PE holds.
// It returns each PE's snapshot and the checkpoint's epoch.
func ReadCheckpoint(dir string, n int) ([][]byte, uint64, error) {
	latest, err := ReadLatest(dir)
	if err != nil {
		return nil, 0, err
	}
	if int(latest.NumPEs) != n {
		return nil, 0, fmt.Errorf("%s holds checkpoint %d of %d PEs, not of %d", dir, latest.Epoch, latest.NumPEs, n)
	}
	snaps, decoded, err := ReadSnapshots(dir, latest)
	if err != nil {
		return nil, 0, err
	}
	if err := CheckCheckpoint(decoded); err != nil {
		return nil, 0, fmt.Errorf("checkpoint %d in %s: %w", latest.Epoch, dir, err)
	}
	return snaps, latest.Epoch, nil
}

// ReadSnapshots reads and checks the snapshot files of the checkpoint
// latest names in dir.
func ReadSnapshots(dir string, latest Latest) ([][]byte, []*PESnapshot, error) {
	snaps := make([][]byte, latest.NumPEs)
	decoded := make([]*PESnapshot, latest.NumPEs)
	for p := range snaps {
		b, s, err := ReadSnapshotFile(dir, latest, p)
		if err != nil {
			return nil, nil, err
		}
		snaps[p], decoded[p] = b, s
	}
	return snaps, decoded, nil
}
