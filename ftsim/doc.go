// Package ftsim simulates charmgo runs with failures, through the runtime
// itself: a program runs deterministically (chare.Config.Deterministic:
// every PE on one goroutine, one event at a time, the interleaving chosen
// by a seed), with the chare layer, the recovery supervisor, the managers
// (trees, reductions, multicasts, checkpoints, recovery and rollback by
// messages), the fault-tolerance hook of the protocol (hops, kept
// results, batched acknowledgements, keepers) and the PEs' queues and
// lanes all as in any run. A failure can be injected before any event
// (chare.Kill.Event); Sweep fails each PE before each event in turn and
// compares every run's result with the failure-free one.
//
// Nothing here is a model of the runtime: a simulated run and a real one
// differ only in who runs the PEs and when messages cross between them.
package ftsim
