// Package crosscore measures the host's cross-core round trip: two
// threads bouncing a counter through memory. It is the floor under every
// cross-PE figure (bench's floor-ns metric), and it tells which mode the
// host is in (this one's: about 110 ns fast, 500–1,000 ns slow), which
// the test suite prints first.
package crosscore

import (
	"runtime"
	"sync/atomic"
	"time"
)

// RoundTrips bounces a counter n times between two threads, each locked
// to an OS thread and spinning (no parking), and returns the time it
// took: with GOMAXPROCS ≥ 2 the two run on two cores.
func RoundTrips(n int) time.Duration {
	var ping, pong struct {
		v atomic.Int64
		_ [56]byte // each on a cache line of its own
	}
	done := make(chan struct{})
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		for i := int64(1); i <= int64(n); i++ {
			for ping.v.Load() != i {
			}
			pong.v.Store(i)
		}
		close(done)
	}()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	start := time.Now()
	for i := int64(1); i <= int64(n); i++ {
		ping.v.Store(i)
		for pong.v.Load() != i {
		}
	}
	took := time.Since(start)
	<-done
	return took
}
