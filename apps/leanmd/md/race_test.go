//go:build race

package md

// raceOn: the race detector slows LeanMD down about tenfold; the longest
// tests run fewer cases under it (CI runs every package with -race).
const raceOn = true
