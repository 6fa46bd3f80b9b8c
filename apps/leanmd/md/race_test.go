//go:build race

package md

// raceOn: the race detector slows LeanMD down about tenfold. Under it
// this package runs the cases that exercise the runtime's concurrency —
// recovery, migration, checkpoints, two runs at once — on few PEs
// (notUnderRace); the README's test command runs every test of the
// package whole without it too (its plain tier).
const raceOn = true
