//go:build !linux

package chare

import "os"

// isTerminal reports whether f is a terminal (only known on Linux here:
// elsewhere the progress line is shown with --progress-line on).
func isTerminal(*os.File) bool { return false }
