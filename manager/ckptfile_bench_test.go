package manager

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
)

// BenchmarkCheckpointWrite writes one PE's snapshot file the way
// checkpoints do (header, CRC-32C, fsync of the file and of its
// directory, rename) against a plain write and rename without either
// (what --ckpt-dir did before files carried checksums), at the size of a
// LeanMD 3x3x3 snapshot on 2 PEs (about 1 MB each).
func BenchmarkCheckpointWrite(b *testing.B) {
	payload := make([]byte, 1<<20)
	rng := rand.New(rand.NewPCG(1, 1))
	for i := range payload {
		payload[i] = byte(rng.Uint32())
	}
	dir := b.TempDir()
	b.Run("ChecksummedFsynced", func(b *testing.B) {
		b.SetBytes(int64(len(payload)))
		for i := 0; i < b.N; i++ {
			if _, err := writeSnapshot(dir, 0, uint64(i%4+1), payload); err != nil {
				b.Fatal(err)
			}
			if err := syncDir(epochDir(dir, uint64(i%4+1))); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("Plain", func(b *testing.B) {
		b.SetBytes(int64(len(payload)))
		for i := 0; i < b.N; i++ {
			d := epochDir(dir, uint64(i%4+1))
			if err := os.MkdirAll(d, 0o755); err != nil {
				b.Fatal(err)
			}
			path := filepath.Join(d, fmt.Sprintf("plain-%d.ckpt", 0))
			if err := os.WriteFile(path+".tmp", payload, 0o644); err != nil {
				b.Fatal(err)
			}
			if err := os.Rename(path+".tmp", path); err != nil {
				b.Fatal(err)
			}
		}
	})
}
