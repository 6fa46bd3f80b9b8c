package recovery

import (
	"slices"
	"sync"

	"github.com/charmgo/charmgo/ftlayer"
	"github.com/charmgo/charmgo/ftlayer/mcml"
)

// channelGate is the supervisor's record of the channels each PE stopped
// logging on since its last checkpoint (a log limit: MCML), from which a
// failure's rollback set is computed. Its own lock, held for nothing but
// its fields: a PE asks it from its goroutine in the middle of a send,
// and the supervisor's lock is held while PEs are being stopped.
type channelGate struct {
	mu sync.Mutex
	// n: the job's PEs; off[z][y]: PE z stopped logging its messages to
	// y (a row only for a PE that stopped logging on a channel: the gate
	// costs nothing for the PEs of a large job that log everything)
	n   int
	off map[int]map[int]bool
	// frozen: a failure's rollback set is being recovered; no channel
	// may stop logging until it caught up (the set was computed from the
	// channels as they were)
	frozen bool
	// granted counts the channels PEs were let stop logging on
	granted uint64
}

// StopLogging implements ftlayer.ChannelGate.
func (g *channelGate) StopLogging(me, dst int) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.frozen || me < 0 || me >= g.n || dst < 0 || dst >= g.n {
		return false
	}
	row := g.off[me]
	if row == nil {
		row = map[int]bool{}
		g.off[me] = row
	}
	row[dst] = true
	g.granted++
	return true
}

// LoggingOn implements ftlayer.ChannelGate.
func (g *channelGate) LoggingOn(me int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	delete(g.off, me)
}

func (g *channelGate) begin(n int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.n != n || g.off == nil {
		g.n, g.off = n, map[int]map[int]bool{}
	}
}

// freeze computes the rollback set of a failure of the PEs failed (a PE,
// or a team): the failed, and every PE that stopped logging to one of the
// set or is in a team with one, to the closure; its chain's length; and
// the channels not logged it was computed from. No channel stops logging
// from now until thaw; the set's own rows are cleared (they log every
// channel again from the checkpoint they go back to).
func (g *channelGate) freeze(failed []int32, teams ftlayer.Teams) ([]int32, int, [][]int32) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.frozen = true
	n := g.n
	off := g.offLocked()
	fs := make([]int, len(failed))
	for i, p := range failed {
		fs[i] = int(p)
	}
	set, chain := mcml.Rollback(n, fs, func(z, y int) bool {
		return g.off[z][y] || teams.Same(int32(z), int32(y))
	})
	out := make([]int32, len(set))
	for i, p := range set {
		out[i] = int32(p)
		delete(g.off, p)
	}
	return out, chain, off
}

// thaw: the rollback set caught up; channels may stop logging again.
func (g *channelGate) thaw() {
	g.mu.Lock()
	g.frozen = false
	g.mu.Unlock()
}

// reset: every PE rolled back (a global rollback): every channel logs.
func (g *channelGate) reset() {
	g.mu.Lock()
	defer g.mu.Unlock()
	clear(g.off)
	g.frozen = false
}

// offChannels lists, for the summary and tests, each PE's channels not
// logged now.
func (g *channelGate) offChannels() [][]int32 {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.offLocked()
}

func (g *channelGate) offLocked() [][]int32 {
	out := make([][]int32, g.n)
	for z := range g.off {
		out[z] = g.rowLocked(z)
	}
	return out
}

// rowLocked lists the PEs z stopped logging to, in order.
func (g *channelGate) rowLocked(z int) []int32 {
	var ys []int32
	for y, off := range g.off[z] {
		if off {
			ys = append(ys, int32(y))
		}
	}
	slices.Sort(ys)
	return ys
}

// grants is how many times PEs were let stop logging on a channel.
func (g *channelGate) grants() uint64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.granted
}

// ExpectedRollback is what a failure would have rolled back under a log
// limit, sampled at every step the program began: for each PE, the
// rollback set a failure of it (with its team) would have had then.
type ExpectedRollback struct {
	Samples   int     // PE-steps sampled
	MeanSet   float64 // PEs in a rollback set, on average
	MeanChain float64 // its chain's length, on average
	MaxSet    int
}

// sample adds, for each PE, the rollback set its failure would have now.
func (g *channelGate) sample(teams ftlayer.Teams, into *ExpectedRollback) {
	g.mu.Lock()
	defer g.mu.Unlock()
	n := g.n
	if n == 0 || n > maxSampled {
		return
	}
	off := func(z, y int) bool { return g.off[z][y] || teams.Same(int32(z), int32(y)) }
	total, chains := into.MeanSet*float64(into.Samples), into.MeanChain*float64(into.Samples)
	for y := range n {
		var failed []int
		for _, p := range teams.Members(int32(y)) {
			failed = append(failed, int(p))
		}
		set, chain := mcml.Rollback(n, failed, off)
		total += float64(len(set))
		chains += float64(chain)
		into.MaxSet = max(into.MaxSet, len(set))
		into.Samples++
	}
	into.MeanSet, into.MeanChain = total/float64(into.Samples), chains/float64(into.Samples)
}

// maxSampled bounds the PEs sample computes sets for at each step (n
// closures of n² each).
const maxSampled = 128

// freezeRows freezes the gate (a recovery under a log limit, several
// processes) and returns the channels not logged of its PEs first..
// first+count-1, by PE: what they stopped logging on since their last
// checkpoint, which from now on stays so until thaw.
func (g *channelGate) freezeRows(first, count int) map[int32][]int32 {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.frozen = true
	out := map[int32][]int32{}
	for z := first; z < first+count && z < g.n; z++ {
		if ys := g.rowLocked(z); len(ys) > 0 {
			out[int32(z)] = ys
		}
	}
	return out
}

// closure is freeze for a job of several processes: the rollback set of a
// failure of failed, from every process's rows (rows[z]: the PEs z stopped
// logging to), its chain, and the rows by PE. The set's own rows here are
// cleared (they log every channel again from their checkpoint).
func (g *channelGate) closure(failed []int32, teams ftlayer.Teams, rows map[int32][]int32) ([]int32, int, [][]int32) {
	g.mu.Lock()
	defer g.mu.Unlock()
	n := g.n
	off := map[int]map[int]bool{}
	byPE := make([][]int32, n)
	for z32, ys := range rows {
		z := int(z32)
		if z < 0 || z >= n {
			continue
		}
		for _, y := range ys {
			if y >= 0 && int(y) < n {
				if off[z] == nil {
					off[z] = map[int]bool{}
				}
				off[z][int(y)] = true
				byPE[z] = append(byPE[z], y)
			}
		}
	}
	fs := make([]int, len(failed))
	for i, p := range failed {
		fs[i] = int(p)
	}
	set, chain := mcml.Rollback(n, fs, func(z, y int) bool { return off[z][y] || teams.Same(int32(z), int32(y)) })
	out := make([]int32, len(set))
	for i, p := range set {
		out[i] = int32(p)
		delete(g.off, p)
	}
	return out, chain, byPE
}
