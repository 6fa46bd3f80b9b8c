package chare_test

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"hash/crc32"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/charmgo/charmgo/chare"
	"github.com/charmgo/charmgo/manager"
	"github.com/stretchr/testify/require"
	"github.com/vmihailenco/msgpack/v5"
)

// qtCheckpoint runs the quiet program on pes PEs with a checkpoint after
// step 2 written to a new directory, and returns it with the run's results.
func qtCheckpoint(t *testing.T, pes int) (string, []int64) {
	t.Helper()
	dir := t.TempDir()
	_, want := qtRun(t, chare.Config{PEs: pes, Args: []string{"2"}, CheckpointDir: dir})
	return dir, want
}

// checkpointFiles lists a checkpoint directory's files: LATEST first.
func checkpointFiles(t *testing.T, dir string) []string {
	t.Helper()
	latest, err := manager.ReadLatest(dir)
	require.NoError(t, err)
	files := []string{filepath.Join(dir, "LATEST")}
	for p := 0; p < int(latest.NumPEs); p++ {
		files = append(files, manager.SnapshotFile(dir, latest.Epoch, p))
	}
	return files
}

// refused checks that a restart from dir is refused before it runs,
// with exit 2 and one line naming file.
func refused(t *testing.T, dir, file, why string) {
	t.Helper()
	qtResults = nil
	res := chare.Run(qtMain, chare.Config{PEs: 2, Restart: dir})
	require.Equal(t, 2, res.Code, "%s: %v", why, res.Err)
	require.ErrorAs(t, res.Err, new(chare.InputError), why)
	require.Contains(t, res.Err.Error(), file, why)
	require.NotContains(t, res.Err.Error(), "\n", why)
	require.Nil(t, qtResults, "%s: nothing ran", why)
}

// Every single-bit flip anywhere in a checkpoint directory's files — the
// headers, the checksums, LATEST, the snapshots — is refused before the
// run starts, naming the file: none leads to another result or a hang.
func TestEveryBitFlipInACheckpointIsRefused(t *testing.T) {
	dir, want := qtCheckpoint(t, 2)
	_, got := qtRun(t, chare.Config{PEs: 2, Restart: dir})
	require.Equal(t, want, got, "the intact checkpoint restarts")
	flips := 0
	for _, file := range checkpointFiles(t, dir) {
		orig, err := os.ReadFile(file)
		require.NoError(t, err)
		for off := range orig {
			b := append([]byte(nil), orig...)
			b[off] ^= 1 << (off % 8)
			require.NoError(t, os.WriteFile(file, b, 0o644))
			refused(t, dir, file, filepath.Base(file)+" bit flipped at offset "+strconv.Itoa(off))
			flips++
		}
		require.NoError(t, os.WriteFile(file, orig, 0o644))
	}
	t.Logf("%d single-bit flips, every one refused", flips)
	_, got = qtRun(t, chare.Config{PEs: 2, Restart: dir})
	require.Equal(t, want, got)
}

// rewriteLatest writes LATEST anew, with valid checksums, from l.
func rewriteLatest(t *testing.T, dir string, l any) {
	t.Helper()
	payload, err := msgpack.Marshal(l)
	require.NoError(t, err)
	writeCheckpointFile(t, filepath.Join(dir, "LATEST"), 2, payload)
}

// writeCheckpointFile writes payload as a checkpoint file of kind with a
// valid header (what a crafted file, not a damaged one, looks like).
// kinds are the file kinds of LATEST and of the two snapshots.
var kinds = [3]byte{2, 1, 1}

// overwriteCheckpointFile is writeCheckpointFile over an existing file,
// in place: never truncated to nothing first.
func overwriteCheckpointFile(t *testing.T, path string, kind byte, payload []byte) {
	t.Helper()
	file, err := os.OpenFile(path, os.O_WRONLY, 0)
	require.NoError(t, err)
	defer file.Close()
	b := checkpointFileBytes(kind, payload)
	_, err = file.WriteAt(b, 0)
	require.NoError(t, err)
	require.NoError(t, file.Truncate(int64(len(b))))
}

// checkpointFileBytes is a checkpoint file of kind holding payload.
func checkpointFileBytes(kind byte, payload []byte) []byte {
	c := crc32.MakeTable(crc32.Castagnoli)
	h := make([]byte, 28)
	copy(h, "CHGOCKPT")
	binary.LittleEndian.PutUint16(h[8:], manager.FileVersion)
	h[10] = kind
	binary.LittleEndian.PutUint64(h[12:], uint64(len(payload)))
	binary.LittleEndian.PutUint32(h[20:], crc32.Checksum(payload, c))
	binary.LittleEndian.PutUint32(h[24:], crc32.Checksum(h[:24], c))
	return append(h, payload...)
}

func writeCheckpointFile(t *testing.T, path string, kind byte, payload []byte) {
	t.Helper()
	require.NoError(t, os.WriteFile(path, checkpointFileBytes(kind, payload), 0o644))
}

// Truncated, swapped and foreign files, and LATEST files with absurd or
// inconsistent counts (a PE count of 2^30 used to allocate tens of GB
// before anything was checked), are refused by name; a directory that
// does not exist, or is a file, says so; an epoch directory a killed run
// left half-written is ignored.
func TestDamagedCheckpointsAreRefusedByName(t *testing.T) {
	dir, want := qtCheckpoint(t, 2)
	files := checkpointFiles(t, dir)
	latest, pe0, pe1 := files[0], files[1], files[2]
	keep := map[string][]byte{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		keep[f] = b
	}
	restore := func() {
		for f, b := range keep {
			require.NoError(t, os.WriteFile(f, b, 0o644))
		}
	}
	for _, n := range []int{0, 10, 27, 28, 40, len(keep[pe1]) - 1} {
		require.NoError(t, os.WriteFile(pe1, keep[pe1][:n], 0o644))
		refused(t, dir, pe1, "truncated to "+strconv.Itoa(n))
	}
	restore()
	require.NoError(t, os.WriteFile(pe0, keep[pe1], 0o644))
	require.NoError(t, os.WriteFile(pe1, keep[pe0], 0o644))
	refused(t, dir, pe0, "swapped")
	restore()
	require.NoError(t, os.WriteFile(latest, keep[pe0], 0o644))
	refused(t, dir, latest, "a snapshot where LATEST should be")
	restore()

	// PE 1's file of another run's checkpoint 1 (taken after step 3)
	foreign := t.TempDir()
	qtRun(t, chare.Config{PEs: 2, Args: []string{"3"}, CheckpointDir: foreign})
	fb, err := os.ReadFile(manager.SnapshotFile(foreign, 1, 1))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(pe1, fb, 0o644))
	refused(t, dir, pe1, "a file of another run")
	restore()

	good, err := manager.ReadLatest(dir)
	require.NoError(t, err)
	for _, bad := range []struct {
		l          any
		file, want string
	}{
		{manager.Latest{Epoch: good.Epoch, NumPEs: 1 << 30, Files: good.Files}, latest, "names a checkpoint of 1073741824 PEs"},
		{manager.Latest{Epoch: good.Epoch, NumPEs: 3, Files: good.Files}, latest, "lists 2 files for 3 PEs"},
		{manager.Latest{Epoch: 0, NumPEs: 2, Files: good.Files}, latest, "names checkpoint 0"},
		{manager.Latest{Epoch: good.Epoch + 1, NumPEs: 2, Files: good.Files}, manager.SnapshotFile(dir, good.Epoch+1, 0), "is missing: LATEST names checkpoint 2 of 2 PEs"},
		{map[string]any{"Epoch": good.Epoch, "NumPEs": 2, "Files": good.Files, "Extra": 1}, latest, "not a checkpoint marker"},
		{"not a marker", latest, "not a checkpoint marker"},
	} {
		rewriteLatest(t, dir, bad.l)
		refused(t, dir, bad.file, bad.want)
		res := chare.Run(qtMain, chare.Config{PEs: 2, Restart: dir})
		require.ErrorContains(t, res.Err, bad.want)
	}
	restore()

	// a run killed while it wrote its next checkpoint leaves a partial
	// epoch directory that LATEST does not name
	partial := filepath.Dir(manager.SnapshotFile(dir, good.Epoch+1, 0))
	require.NoError(t, os.MkdirAll(partial, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(partial, "pe-0.ckpt.tmp"), keep[pe0][:100], 0o644))
	_, got := qtRun(t, chare.Config{PEs: 2, Restart: dir})
	require.Equal(t, want, got)

	empty := t.TempDir()
	for _, c := range []struct{ dir, want string }{
		{filepath.Join(dir, "nowhere"), filepath.Join(dir, "nowhere") + " does not exist"},
		{latest, latest + " is not a directory"},
		{empty, empty + " holds no complete checkpoint (no LATEST file)"},
	} {
		res := chare.Run(qtMain, chare.Config{PEs: 2, Restart: c.dir})
		require.Equal(t, 2, res.Code)
		require.EqualError(t, errors.Unwrap(res.Err), "flag --restart: "+c.want)
	}
}

// What is not a regular file where a checkpoint's file should be is
// refused by name at once: a symbolic link to /dev/zero used to be read
// without end (1 GB after 8 s), and LATEST as a link to /dev/urandom, or a
// snapshot that is a FIFO, hung the restart. A link to a regular file is
// followed.
func TestRestartRefusesWhatIsNotARegularFile(t *testing.T) {
	dir, want := qtCheckpoint(t, 2)
	files := checkpointFiles(t, dir)
	latest, pe1 := files[0], files[2]
	keep := map[string][]byte{}
	for _, f := range files[:3] {
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		keep[f] = b
	}
	put := func(file string, make func(string) error) {
		require.NoError(t, os.Remove(file))
		require.NoError(t, make(file))
	}
	restore := func(file string) {
		require.NoError(t, os.Remove(file))
		require.NoError(t, os.WriteFile(file, keep[file], 0o644))
	}
	for _, c := range []struct {
		file, why, want string
		make            func(string) error
	}{
		{pe1, "a link to /dev/zero", "is not a regular file", func(f string) error { return os.Symlink("/dev/zero", f) }},
		{latest, "a link to /dev/urandom", "is not a regular file", func(f string) error { return os.Symlink("/dev/urandom", f) }},
		{pe1, "a FIFO", "is not a regular file", func(f string) error { return syscall.Mkfifo(f, 0o644) }},
		{latest, "a directory", "is not a regular file", func(f string) error { return os.Mkdir(f, 0o755) }},
	} {
		put(c.file, c.make)
		done := make(chan struct{})
		go func() {
			defer close(done)
			refused(t, dir, c.file, c.why)
			res := chare.Run(qtMain, chare.Config{PEs: 2, Restart: dir})
			require.ErrorContains(t, res.Err, c.want, c.why)
		}()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: the restart did not end within 10s", c.why)
		}
		restore(c.file)
	}
	// a link to the real file is read through
	moved := filepath.Join(t.TempDir(), "pe-1.ckpt")
	require.NoError(t, os.Rename(pe1, moved))
	require.NoError(t, os.Symlink(moved, pe1))
	_, got := qtRun(t, chare.Config{PEs: 2, Restart: dir})
	require.Equal(t, want, got)
}

// FuzzRestartFromCheckpoint: a checkpoint directory whose files are a
// good checkpoint's with one edit — any bytes written over or inserted at
// any place of LATEST or of either snapshot, and the file cut anywhere —
// and checksums made right again (so that the edit reaches the decoders; a
// snapshot's record in LATEST follows it) is restored by the real restart
// path (LATEST, the files, the snapshots' decoding and checks,
// redistribution onto 1 to 4 PEs, every PE's restore and the run after
// it): the run ends, well or with an error, never with a crash, a hang or
// a panic inside a PE. An input is an edit, not whole files, so that the
// fuzzer's minimizing of what it finds takes moments (whole files of 1 KB
// kept it minimizing for minutes: 5 inputs in 30 s), and the run is
// deterministic (every PE on the fuzzing goroutine: the coverage an input
// reaches is its own, and a stall ends it after 100,000 events, without a
// watchdog's sleep). Rate here (go test -fuzz, 2 workers, 10 to 30 s):
// 3,000 to 5,700 inputs a second.
func FuzzRestartFromCheckpoint(f *testing.F) {
	dir := f.TempDir()
	qtResults = nil
	if res := chare.Run(qtMain, chare.Config{PEs: 2, Args: []string{"2"}, CheckpointDir: dir}); res.Err != nil {
		f.Fatal(res.Err)
	}
	l, err := manager.ReadLatest(dir)
	if err != nil {
		f.Fatal(err)
	}
	var good [3][]byte // the payloads of LATEST and the two snapshots
	for i, file := range []string{filepath.Join(dir, "LATEST"), manager.SnapshotFile(dir, l.Epoch, 0), manager.SnapshotFile(dir, l.Epoch, 1)} {
		b, err := os.ReadFile(file)
		if err != nil {
			f.Fatal(err)
		}
		good[i] = b[28:]
	}
	f.Add(uint8(0), uint16(0), []byte{}, false, uint16(0), uint8(2))
	f.Add(uint8(1), uint16(40), []byte{0xff}, false, uint16(0), uint8(3))
	f.Add(uint8(2), uint16(7), []byte{0xc0, 0x00}, true, uint16(0), uint8(1))
	f.Add(uint8(1), uint16(0), []byte{}, false, uint16(100), uint8(4))
	// LATEST naming a snapshot of 2^54 bytes (found by the fuzzer when
	// its inputs were whole files: it was read before it was checked)
	if at := bytes.Index(good[0], []byte("\xa4Size\xcf")); at >= 0 {
		f.Add(uint8(0), uint16(at+6), []byte{0x00, 0x37, 0, 0, 0, 0, 0, 0x05}, false, uint16(0), uint8(2))
	}
	// One directory for every input: only what an input changes is
	// written, in place (ext4 flushes a file truncated to nothing on
	// close: writing the three files anew cost 0.5 ms an input).
	paths := [3]string{filepath.Join(dir, "LATEST"), manager.SnapshotFile(dir, l.Epoch, 0), manager.SnapshotFile(dir, l.Epoch, 1)}
	onDisk := good
	f.Fuzz(func(t *testing.T, file uint8, at uint16, edit []byte, insert bool, cut uint16, pes uint8) {
		var files [3][]byte
		for i := range good {
			files[i] = good[i]
		}
		i := int(file % 3)
		b := slices.Clone(good[i])
		p := int(at) % (len(b) + 1)
		if insert {
			b = slices.Insert(b, p, edit...)
		} else {
			b = append(b[:p], append(slices.Clone(edit), b[min(p+len(edit), len(b)):]...)...)
		}
		if cut > 0 {
			b = b[:int(cut)%(len(b)+1)]
		}
		files[i] = b
		if i > 0 {
			// LATEST's records follow the edited snapshot
			var l manager.Latest
			require.NoError(t, msgpack.Unmarshal(files[0], &l))
			l.Files[i-1] = manager.FileRecord{Size: uint64(len(b)), CRC: manager.Checksum(b)}
			files[0], _ = msgpack.Marshal(&l)
		}
		for k := range files {
			if !bytes.Equal(files[k], onDisk[k]) {
				overwriteCheckpointFile(t, paths[k], kinds[k], files[k])
				onDisk[k] = files[k]
			}
		}
		qtResults = nil
		res := chare.Run(qtMain, chare.Config{PEs: 1 + int(pes%4), Restart: dir, Deterministic: true, Seed: 1, MaxEvents: 100_000})
		if res.Err != nil {
			require.NotContains(t, res.Err.Error(), "panic", "a crafted checkpoint is refused with an error, never a panic")
		}
	})
}

// A restart says, in one line from the job's first process, that the
// program's flags and arguments given with it are not used (the run
// resumes from its checkpoint, main chare and all); the summary records
// them with the program's other words. Without any, it says nothing.
func TestARestartSaysTheProgramsFlagsAreNotUsed(t *testing.T) {
	dir, want := qtCheckpoint(t, 2)
	var notices bytes.Buffer
	sum := filepath.Join(t.TempDir(), "sum.json")
	res, got := qtRun(t, chare.Config{PEs: 2, Restart: dir, Args: []string{"5"}, ProgramFlags: []string{"-iters", "10"}, Notices: &notices, SummaryJSON: sum})
	require.NoError(t, res.Err)
	require.Equal(t, want, got)
	require.Equal(t, "charmgo: --restart "+dir+": the run resumes from its checkpoint, main chare and all: the program's flags and arguments given with it (-iters 10 5) are not used\n", notices.String())
	b, err := os.ReadFile(sum)
	require.NoError(t, err)
	var s chare.Summary
	require.NoError(t, json.Unmarshal(b, &s))
	require.Equal(t, []string{"-iters", "10", "5"}, s.Args)

	notices.Reset()
	_, got = qtRun(t, chare.Config{PEs: 2, Restart: dir, Notices: &notices})
	require.Equal(t, want, got)
	require.Empty(t, notices.String())
}
