package atomicfile

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// A write replaces the file whole; a failed one leaves the old file and
// no temporary file behind.
func TestWriteIsWholeOrNothing(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "f")
	for _, durable := range []bool{false, true} {
		require.NoError(t, WriteBytes(path, 0o644, durable, []byte("first")))
		b, err := os.ReadFile(path)
		require.NoError(t, err)
		require.Equal(t, "first", string(b))

		err = Write(path, 0o644, durable, func(w io.Writer) error {
			w.Write([]byte("half of the se"))
			return errors.New("the writer failed")
		})
		require.EqualError(t, err, "the writer failed")
		b, err = os.ReadFile(path)
		require.NoError(t, err)
		require.Equal(t, "first", string(b), "the old file is left whole")
		_, err = os.Stat(path + ".tmp")
		require.ErrorIs(t, err, os.ErrNotExist)
	}
	require.Error(t, WriteBytes(filepath.Join(dir, "no such dir", "f"), 0o644, false, nil))
}
