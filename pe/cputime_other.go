//go:build !linux

package pe

// ThreadCPU is -1: this platform's thread CPU clock is not read.
func ThreadCPU() int64 { return -1 }
