package manager

// What a PE waits for: its description for dumps (the watchdog, SIGQUIT,
// a run that went quiet with work unfinished) and the list of its
// unfinished work.

import (
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/charmgo/charmgo/internal/textlist"
	"github.com/charmgo/charmgo/pe"
)

// DumpMsg asks a PE for its description, sent back on Reply: the
// watchdog's and SIGQUIT's dumps. It is injected in the process
// (Node.InjectControl), never sent between PEs.
type DumpMsg struct{ Reply chan<- PEDump }

// PEDump is one PE's answer to a DumpMsg.
type PEDump struct {
	PE      int
	Text    string   // Describe
	Pending []string // Pending
}

var tDump = RegisterMsgpackType[*DumpMsg]("mgr.dump")

// DumpType is the message type of DumpMsg.
func DumpType() uint32 { return tDump }

func (m *Manager) onDump(msg *DumpMsg) {
	var b strings.Builder
	m.Describe(&b)
	msg.Reply <- PEDump{PE: m.Me(), Text: b.String(), Pending: m.Pending()}
}

// Describe writes this PE's state for a dump of a run that stalled (the
// watchdog, SIGQUIT) or went quiet with work unfinished: its queues, the
// work it has begun and not finished (Pending), quiescence detection,
// checkpoints and recovery, the fault-tolerance hook's state, and what
// its elements wait for (AtSync, the chare layer's Gathers). Call it on
// the PE's goroutine.
func (m *Manager) Describe(w io.Writer) {
	sys, app := m.PE.QueueLens()
	fmt.Fprintf(w, "PE %d: %d system and %d application messages queued; sent %d, processed %d (quiescence counts)\n", m.Me(), sys, app, m.Sent, m.Processed)
	if m.Me() == 0 {
		q := &m.qd.root
		if q.running || len(q.waiters) > 0 {
			tags := make([]string, len(q.waiters))
			for i, x := range q.waiters {
				tags[i] = qdTagName(x.tag, x.pe)
			}
			fmt.Fprintf(w, "  quiescence detection: wave %d (in a wave: %v, %d PEs counted), waiting: %s\n", q.wave, q.inWave, q.replies, strings.Join(tags, ", "))
		}
	}
	for _, tag := range m.qdAsked {
		fmt.Fprintf(w, "  asked for %s\n", qdTagName(tag, m.Me()))
	}
	if c := &m.ckpt; c.epoch != 0 || len(c.queued) > 0 || len(c.pending) > 0 {
		fmt.Fprintf(w, "  checkpoint %d in progress: %d more asked for; %d packets of a later epoch held\n", c.epoch, len(c.queued), len(c.pending))
	}
	if g := &m.ckpt.up; g.in.own || g.in.kids > 0 {
		fmt.Fprintf(w, "  checkpoint %d's commits: this PE's %v, %d of %d tree children's subtrees\n", g.epoch, g.in.own, g.in.kids, len(m.everyPE().Children(m.Me(), nil)))
	}
	if rb := m.rb; rb != nil {
		fmt.Fprintf(w, "  rolling back: told %v, offers in %d, plan %v, own snapshot %v, neighbour's %v; %d messages kept until it restored\n",
			rb.start != nil, rb.got, rb.plan != nil, rb.own != nil, rb.prev != nil, len(rb.stash))
	}
	if r := &m.rec; r.reviving || r.recovering {
		fmt.Fprintf(w, "  a new incarnation (%d): waiting for its snapshot %v, replaying %v; %d messages kept until its snapshot is in\n", r.inc, r.reviving, r.recovering, len(r.stash))
	}
	m.ft.Describe(w)
	for _, line := range m.Waits() {
		fmt.Fprintf(w, "  %s\n", line)
	}
	for _, line := range m.Pending() {
		fmt.Fprintf(w, "  %s\n", line)
	}
}

// qdTagName says what a quiescence detection is for.
func qdTagName(tag uint64, p int) string {
	switch {
	case tag == EndQDTag:
		return "the end of the run (main returned)"
	case tag&ckptQDTag != 0:
		return fmt.Sprintf("checkpoint %d", tag&^ckptQDTag)
	}
	return fmt.Sprintf("the program's detection %d on PE %d", tag, p)
}

// Pending lists the work this PE has begun and not finished: messages
// waiting for a collection, a section or an element that does not exist
// here (yet), sections being set up, broadcasts held, reductions that some
// contributions reached (naming the contributors still missing), and the
// chare layer's own (futures waited on). A run that went quiet with any
// of it will never finish it. Call it on the PE's goroutine.
func (m *Manager) Pending() []string {
	var out []string
	for _, id := range sortedKeys(m.colls) {
		c := m.colls[id]
		ixs := make([]pe.Index, 0, len(c.homeBuf))
		for ix, buf := range c.homeBuf {
			if len(buf) > 0 {
				ixs = append(ixs, ix)
			}
		}
		slices.SortFunc(ixs, pe.Index.Compare)
		for _, ix := range ixs {
			buf := c.homeBuf[ix]
			if _, known := c.getLoc(ix); known {
				out = append(out, fmt.Sprintf("%d messages for %s%v wait at its home, PE %d", len(buf), c.Name, ix, m.Me()))
			} else if buf[0].Type == tLocQuery {
				out = append(out, fmt.Sprintf("section of %s: member %v does not exist", c.Name, ix))
			} else {
				out = append(out, fmt.Sprintf("message %s to %s%v: no such element (never inserted)", pe.TypeName(buf[0].Type), c.Name, ix))
			}
		}
	}
	for _, id := range sortedKeys(m.pendingColl) {
		buf := m.pendingColl[id]
		out = append(out, fmt.Sprintf("%d messages wait on PE %d for collection %d, which never reached it (first: %s from PE %d)", len(buf), m.Me(), id, pe.TypeName(buf[0].Type), buf[0].Src))
	}
	for _, id := range sortedKeys(m.pendingSec) {
		out = append(out, fmt.Sprintf("%d messages wait on PE %d for section %d, which was never set up here", len(m.pendingSec[id]), m.Me(), id))
	}
	for _, id := range sortedKeys(m.building) {
		out = append(out, fmt.Sprintf("section %d: being set up on PE %d, waiting for %d member locations", id, m.Me(), m.building[id].missing))
	}
	for _, id := range sortedKeys(m.colls) {
		c := m.colls[id]
		if len(c.bcastHeld) > 0 {
			out = append(out, fmt.Sprintf("%d broadcasts to %s held on PE %d until its insertions are all in (DoneInserting)", len(c.bcastHeld), c.Name, m.Me()))
		}
		out = m.pendingRounds(out, c.red, c.Name, func(r uint32) []string {
			var miss []string
			for _, e := range c.Locals() {
				if int(e.RedHome) == m.Me() && e.RedNo <= r {
					miss = append(miss, fmt.Sprintf("%s%v", c.Name, e.Index))
				}
			}
			return miss
		})
	}
	for _, id := range sortedKeys(m.secs) {
		s := m.secs[id]
		c := s.coll(m)
		if c == nil {
			// (a stall's description must not stop at it: ftsim found
			// one, a section a recovering PE knew of a collection it did
			// not)
			out = append(out, fmt.Sprintf("section %d of collection %d, which PE %d does not know", id, s.Coll, m.Me()))
			continue
		}
		out = m.pendingRounds(out, s.red, fmt.Sprintf("section %d of %s", id, c.Name), func(r uint32) []string {
			var miss []string
			for _, ix := range slices.Compact(slices.Clone(s.Members)) {
				e := c.get(ix)
				if e == nil {
					miss = append(miss, fmt.Sprintf("%s%v (not on this PE)", c.Name, ix))
					continue
				}
				if ms := e.Secs[id]; ms == nil || ms.RedNo <= r {
					miss = append(miss, fmt.Sprintf("%s%v", c.Name, ix))
				}
			}
			return miss
		})
	}
	return append(out, m.host.Pending(m)...)
}

// MostTelling picks, of the unfinished work several PEs listed (Pending),
// the line that best says what went wrong: one naming a contributor that
// is missing, else the first.
func MostTelling(pending []string) string {
	for _, p := range pending {
		if strings.Contains(p, "; missing: ") {
			return p
		}
	}
	if len(pending) == 0 {
		return ""
	}
	return pending[0]
}

// pendingRounds adds a line for every round of red that has begun on this
// PE and not completed: how many contributions it has of how many, who is
// missing (missing lists this PE's contributors that have not contributed
// to round r) and which tree children have not reported.
func (m *Manager) pendingRounds(out []string, red *Reduction, what string, missing func(r uint32) []string) []string {
	if red == nil {
		return out
	}
	for _, r := range sortedKeys(red.rounds) {
		rd := red.rounds[r]
		line := fmt.Sprintf("reduction %d over %s waits on PE %d: %d of %d contributions made here", r, what, m.Me(), rd.got, red.local.at(r))
		if rd.have {
			line += fmt.Sprintf(" (reducer %s)", reducerName(rd.p.Reducer))
		}
		if miss := missing(r); len(miss) > 0 {
			if len(miss) > 8 {
				miss = append(miss[:8], fmt.Sprintf("and %d more", len(miss)-8))
			}
			line += "; missing: " + strings.Join(miss, ", ")
		}
		var kids []string
		for i, in := range rd.children {
			if !in && red.childCount[i].at(r) > 0 {
				kids = append(kids, fmt.Sprint(red.Children[i]))
			}
		}
		if len(kids) > 0 {
			line += "; no partial yet from tree children " + strings.Join(kids, ", ")
		}
		out = append(out, line)
	}
	return out
}

// Waits lists what this PE's elements wait for: the load-balancing step
// of those at AtSync, and the chare layer's (Host.Waits). A program may
// end with elements waiting, so it is not unfinished work (Pending); a
// run that went quiet before the program ended it names the first.
func (m *Manager) Waits() []string { return append(m.atSyncWaits(), m.host.Waits(m)...) }

// atSyncWaits describes, for each array with elements on this PE at
// AtSync, which of them wait there and which have not reached it: a
// load-balancing step waits for every element of the array.
func (m *Manager) atSyncWaits() []string {
	var out []string
	for _, id := range sortedKeys(m.colls) {
		c := m.colls[id]
		if c.sync.atSync == 0 && len(c.sync.reported) == 0 {
			continue
		}
		var at, not []string
		for _, e := range c.Locals() {
			if e.AtSync {
				at = append(at, fmt.Sprintf("%s%v", c.Name, e.Index))
			} else {
				not = append(not, fmt.Sprintf("%s%v", c.Name, e.Index))
			}
		}
		if len(at) == 0 {
			continue
		}
		line := fmt.Sprintf("%d of the %d elements of %s here wait at AtSync for the array's load-balancing step: %s", len(at), len(at)+len(not), c.Name, textlist.Elide(at, 8))
		if len(not) > 0 {
			line += "; not there yet: " + textlist.Elide(not, 8)
		}
		out = append(out, line)
	}
	return out
}
