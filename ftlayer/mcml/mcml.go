// Package mcml owns the decisions of memory-constrained message logging
// (MCML, seed paper 002, §IV, Algorithms 1–2): which channel a PE whose
// message log passed its limit stops logging on, and which PEs a failure
// then rolls back. A PE that stops logging its messages to Y cannot
// replay them to Y: when Y fails it must roll back with Y and send them
// again by re-executing, and the PEs that stopped logging to it must too,
// and so on (the rollback chain, Fig. 5).
//
// Channel choice is a Strategy: Heaviest (the channel holding the most
// logged bytes, the paper's default) or Cluster (the nearest cluster of a
// dendrogram built from the communication between PEs first, Table V).
// Everything here is a pure function of its input: no goroutines, clocks
// or I/O.
package mcml

import (
	"fmt"
	"slices"
	"strings"
)

// Channels is one PE's outgoing channels as MCML sees them: per
// destination PE, the bytes its log holds for it and whether logging to
// it is off.
type Channels struct {
	Me     int
	Logged []uint64
	Off    []bool
}

// NewChannels is PE me's channels to n PEs, all logged, nothing held.
func NewChannels(me, n int) *Channels {
	return &Channels{Me: me, Logged: make([]uint64, n), Off: make([]bool, n)}
}

// candidate reports whether logging to dst may be turned off: another
// PE, logged now, holding something (turning off an empty channel frees
// nothing and only widens rollbacks).
func (c *Channels) candidate(dst int) bool {
	return dst != c.Me && !c.Off[dst] && c.Logged[dst] > 0
}

// Strategy chooses the channel to stop logging on.
type Strategy interface {
	// Name is the strategy's name (--log-limit-strategy).
	Name() string
	// Choose returns the destination whose channel to turn off, or false
	// when no channel holds anything.
	Choose(c *Channels) (dst int, ok bool)
}

// Heaviest chooses the channel whose logged messages take the most
// bytes (the lowest PE of equals): the most memory back per PE that may
// have to roll back.
type Heaviest struct{}

func (Heaviest) Name() string { return "heaviest" }

func (Heaviest) Choose(c *Channels) (int, bool) { return heaviestOf(c, nil) }

// heaviestOf is the heaviest candidate among dsts (every PE: nil).
func heaviestOf(c *Channels, dsts []int) (int, bool) {
	best, found := -1, false
	try := func(d int) {
		if c.candidate(d) && (!found || c.Logged[d] > c.Logged[best] || c.Logged[d] == c.Logged[best] && d < best) {
			best, found = d, true
		}
	}
	if dsts == nil {
		for d := range c.Logged {
			try(d)
		}
	} else {
		for _, d := range dsts {
			try(d)
		}
	}
	return best, found
}

// Cluster chooses among the PEs of the smallest cluster of a dendrogram
// that holds this PE and a candidate channel, the heaviest: a failure
// then rolls back PEs that talk to each other most, which tends to keep
// the rollback chain inside one cluster (Table V: an average rollback set
// of 3% of the PEs against 18% at θ = 50 on FLASH). Levels is the
// dendrogram as one PE sees it (Dendrogram.Levels): a PE keeps its own
// levels, at most n PEs, not the whole tree.
type Cluster struct {
	Levels [][]int
}

// ClusterOf is PE me's Cluster over d.
func ClusterOf(d *Dendrogram, me int) Cluster { return Cluster{Levels: d.Levels(me)} }

func (Cluster) Name() string { return "cluster" }

func (s Cluster) Choose(c *Channels) (int, bool) {
	for _, level := range s.Levels {
		if d, ok := heaviestOf(c, level); ok {
			return d, true
		}
	}
	return heaviestOf(c, nil) // PEs outside the dendrogram
}

// Names lists the strategies.
func Names() []string { return []string{"heaviest", "cluster"} }

// ValidName checks a strategy's name (--log-limit-strategy).
func ValidName(name string) error {
	if !slices.Contains(Names(), name) {
		return fmt.Errorf("unknown strategy %q (want %s)", name, strings.Join(Names(), " or "))
	}
	return nil
}

// RollbackSet is the PEs a failure of the PEs failed rolls back: the
// failed ones, and every PE z whose channel to a PE of the set is off
// (off(z, y)), until no more join (Algorithm 1's FAILURE and ROLLBACK,
// taken to their closure). The PEs, 0..n-1, come back in order.
func RollbackSet(n int, failed []int, off func(z, y int) bool) []int {
	set, _ := Rollback(n, failed, off)
	return set
}

// Rollback is RollbackSet and the rollback chain's length: the most
// channels turned off between a PE of the set and a failed one (the
// paper's "rollback chain size": 2 in Fig. 5; 0 when the failed PEs roll
// back alone).
func Rollback(n int, failed []int, off func(z, y int) bool) (set []int, chain int) {
	depth := make([]int, n) // -1: not in the set
	for p := range depth {
		depth[p] = -1
	}
	queue := []int{}
	for _, f := range failed {
		if f >= 0 && f < n && depth[f] < 0 {
			depth[f] = 0
			queue = append(queue, f)
		}
	}
	for len(queue) > 0 {
		y := queue[0]
		queue = queue[1:]
		for z := range n {
			if depth[z] < 0 && off(z, y) {
				depth[z] = depth[y] + 1
				chain = max(chain, depth[z])
				queue = append(queue, z)
			}
		}
	}
	for p, d := range depth {
		if d >= 0 {
			set = append(set, p)
		}
	}
	return set, chain
}
