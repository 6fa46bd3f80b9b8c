// Package atomicfile writes files whole or not at all: through a
// temporary file beside the target, renamed over it once written, so a
// reader (another process, a restart after a crash) sees the old file or
// the new one, never part of one. It owns no state.
package atomicfile

import (
	"io"
	"os"
)

// Write writes path with write, through path+".tmp" renamed over path
// once write returned nil; with durable, the data is on the disk (fsync)
// before the rename. On any error the temporary file is removed and path
// is left as it was.
func Write(path string, perm os.FileMode, durable bool, write func(io.Writer) error) error {
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, perm)
	if err != nil {
		return err
	}
	err = write(f)
	if err == nil && durable {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
	}
	return err
}

// WriteBytes is Write of b.
func WriteBytes(path string, perm os.FileMode, durable bool, b []byte) error {
	return Write(path, perm, durable, func(w io.Writer) error {
		_, err := w.Write(b)
		return err
	})
}
