package pe

import "golang.org/x/sys/unix"

// ThreadCPU is the CPU time the calling OS thread has used, in
// nanoseconds, or -1 where it cannot be read. It measures one PE only on
// a PE whose goroutine is locked to its thread (Config.LockThreads).
func ThreadCPU() int64 {
	var ts unix.Timespec
	if unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts) != nil {
		return -1
	}
	return ts.Nano()
}
