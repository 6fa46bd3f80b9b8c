// Package syncio owns the writer that several goroutines share: one
// write at a time reaches the stream beneath.
package syncio

import (
	"io"
	"sync"
)

// Writer lets several goroutines write W a write at a time. It has only
// Write: io.Copy into it writes as it reads, where a bytes.Buffer's own
// ReadFrom would keep its length across the copy and drop what another
// goroutine wrote meanwhile.
type Writer struct {
	mu sync.Mutex
	W  io.Writer
}

func (w *Writer) Write(b []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.W.Write(b)
}
