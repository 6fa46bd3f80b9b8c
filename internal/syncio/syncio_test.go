package syncio

import (
	"bytes"
	"io"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

// Writes from several goroutines, and a copy from a reader at the same
// time, all reach the buffer whole.
func TestWritesFromSeveralGoroutinesAllArrive(t *testing.T) {
	var buf bytes.Buffer
	w := &Writer{W: &buf}
	pr, pw := io.Pipe()
	var wg sync.WaitGroup
	wg.Go(func() { io.Copy(w, pr) })
	for range 8 {
		wg.Go(func() {
			for range 100 {
				w.Write([]byte("line\n"))
			}
		})
	}
	pw.Write([]byte("copied\n"))
	pw.Close()
	wg.Wait()
	require.Equal(t, 800, strings.Count(buf.String(), "line\n"))
	require.Contains(t, buf.String(), "copied\n")
}
