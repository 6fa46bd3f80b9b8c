//go:build !linux

package main

// memoryTempDir is "" off Linux: the tests' temporary files go where
// TMPDIR says.
func memoryTempDir() string { return "" }
