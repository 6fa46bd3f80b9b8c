//go:build race

package chare_test

// raceOn: the test binary, and so every process the tests of several
// processes start from it, is built with the race detector, which slows
// them several times (tenfold on a slow host): those tests run the
// layouts that show the concurrency (processes of several PEs), and the
// chaos tier, which builds without it, runs every layout.
const raceOn = true
