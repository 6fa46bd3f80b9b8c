package cluster

import "time"

// The processes of a job watch each other, and pass heartbeats, the job's
// progress and the end of a run, along a tree over the processes that are
// live, not between every pair: a process has at most treeFanout + 1
// neighbours, so what it sends, receives and holds open for these grows
// as the log of the job's size, not with the size.
//
// The tree is the live ranks in order, the one at index i the child of the
// one at index (i-1)/treeFanout: every process computes it from its own
// view of which processes are lost, so two processes whose views differ
// for a moment (one noticed a loss, the other not yet) may disagree on an
// edge. Nothing breaks: a heartbeat from a process this one does not take
// for a neighbour is still taken as a sign of life, and a process that
// becomes a neighbour is given a whole heartbeat timeout from then.

// treeFanout is how many children a process has in the tree.
const treeFanout = 8

// treeNeighbours gives the parent of process rank (-1 for the root) and
// its children in the tree over the live processes of a job of procs,
// lost saying which are lost (rank itself never is).
func treeNeighbours(procs, rank int, lost func(int) bool) (parent int, children []int) {
	live := make([]int, 0, procs)
	at := -1
	for r := range procs {
		if r == rank {
			at = len(live)
		} else if lost(r) {
			continue
		}
		live = append(live, r)
	}
	if at < 0 {
		return -1, nil
	}
	return neighboursAt(live, at)
}

// neighboursAt gives the parent (-1 for the root) and children of the
// process at index at of live, the live ranks in order.
func neighboursAt(live []int, at int) (parent int, children []int) {
	parent = -1
	if at > 0 {
		parent = live[(at-1)/treeFanout]
	}
	for i := at*treeFanout + 1; i <= at*treeFanout+treeFanout && i < len(live); i++ {
		children = append(children, live[i])
	}
	return parent, children
}

// beatPeriod is how often a process sends its neighbours heartbeats, for
// a heartbeat timeout: ten a timeout, at most maxBeatEvery apart.
func beatPeriod(timeout time.Duration) time.Duration {
	return min(timeout/10, maxBeatEvery)
}

// silent reports whether a neighbour last heard from at last is hung
// at now: silent for longer than the heartbeat timeout.
func silent(now, last time.Time, timeout time.Duration) bool {
	return now.Sub(last) > timeout
}
