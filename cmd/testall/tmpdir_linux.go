package main

import (
	"os"
	"syscall"
)

// memoryTempDir is a fresh directory on /dev/shm for the tests' temporary
// files, where /dev/shm is a tmpfs with room to spare (a container's
// default 64 MiB is not), or "" if not. The tests write checkpoints to
// disk, durably, thousands of times (ftsim's random failures under a
// checkpoint directory, LeanMD's restarts), and go test builds there: on a
// disk, opening and syncing those files took a quarter of the
// simulator's time.
func memoryTempDir() string {
	const tmpfsMagic = 0x01021994
	const room = 2 << 30 // the builds and binaries of a tier, with a margin
	var st syscall.Statfs_t
	if err := syscall.Statfs("/dev/shm", &st); err != nil || st.Type != tmpfsMagic || st.Bavail*uint64(st.Bsize) < room {
		return ""
	}
	dir, err := os.MkdirTemp("/dev/shm", "charmgo-testall-")
	if err != nil {
		return ""
	}
	return dir
}
