//go:build race

package ftsim

// raceOn: the race detector slows the simulations about tenfold, and a
// deterministic run has one goroutine to check; under it the sweeps take
// every few events (the README's test command runs them whole, without
// -race).
const raceOn = true
