//go:build race

package main

// raceOn: under the race detector this package runs the cases that look
// at concurrency it can see: the launcher run in the test binary (bad
// input, flags, a job of one process) and one job whose processes,
// charmrun's and LeanMD's, are built with the detector too, with a
// process killed and replaced (raceBuilt). The README's test command
// runs every case without it (its plain tier): the processes the other
// cases start are built without it either way.
const raceOn = true
