package manager

import (
	"errors"
	"fmt"
	"slices"

	"github.com/charmgo/charmgo/ftlayer"
	"github.com/charmgo/charmgo/pe"
)

// Global rollback: every PE goes back to the last checkpoint (under FT
// none at every failure; under the logging protocols when a PE fails while
// a checkpoint is being taken). It is agreed by messages alone, so that it
// serves PEs in other processes unchanged:
//
//   - the launcher stops every PE of the run at a message boundary and
//     discards what was in flight (pe.Node.RollBack), starts each again
//     with a new manager that keeps only its own checkpoint memory (none
//     for the PEs that failed), and hands each a RollbackMsg;
//   - every PE tells the coordinator, PE 0, which snapshots it holds
//     (RollbackOfferMsg);
//   - the coordinator chooses the checkpoint and, for every PE, the PE
//     that sends its snapshot (PlanRollback), or the checkpoint directory,
//     the checkpoint the run was restarted from, or the start of the run;
//     or it ends the run saying which snapshot no copy of survives. It
//     tells every PE (RollbackPlanMsg);
//   - each holder sends the snapshots it was chosen for to their owner and
//     to the owner's buddy (SnapshotCopyMsg); a PE that has its own and
//     its neighbour's restores as a restarted run does (RestoreMsg) and
//     handles what reached it meanwhile. The program resumes once every
//     PE restored.
//
// Every message of it is control: not logged, stamped or counted by
// quiescence detection, which starts again from zero with the rollback.

// RollbackMsg starts a global rollback on one PE.
type RollbackMsg struct {
	// Failed lists the PEs that failed: their memory is gone.
	Failed []int32
	// Committed is the last checkpoint the launcher saw committed: a
	// coordinator that failed may have committed one nobody else heard of.
	Committed uint64
	// Restart is the checkpoint the run was restarted from (0: none), in
	// RestartDir.
	Restart    uint64 `msgpack:",omitempty"`
	RestartDir string `msgpack:",omitempty"`
	// What says what was lost, for the error when no copy of a snapshot
	// survives it ("" names the PEs of Failed).
	What string `msgpack:",omitempty"`
}

// HeldSnapshot names a snapshot a PE holds in memory.
type HeldSnapshot struct {
	Owner int32
	Epoch uint64
}

// RollbackOfferMsg tells the coordinator what one PE holds.
type RollbackOfferMsg struct {
	PE        int32
	Committed uint64 // the last checkpoint it committed
	Held      []HeldSnapshot
}

// RollbackSource is where a rollback finds the snapshots.
type RollbackSource uint8

const (
	// FromMemory: each PE's snapshot from a PE that holds it.
	FromMemory RollbackSource = iota
	// FromDirectory: the coordinator read them from the checkpoint
	// directory and sends them.
	FromDirectory
	// FromRestart: each PE restores the snapshot the run was restarted
	// with.
	FromRestart
	// FromStart: each PE starts the run again from its arguments.
	FromStart
)

// RollbackPlanMsg is the coordinator's decision.
type RollbackPlanMsg struct {
	Epoch  uint64
	Source RollbackSource
	// Holder names, per PE, the PE that sends its snapshot.
	Holder []int32 `msgpack:",omitempty"`
	// From says where the snapshots are, for notices and errors.
	From string
}

// SnapshotCopyMsg carries Owner's snapshot of checkpoint Epoch to Owner
// (its own) or to Owner's buddy (the copy it holds).
type SnapshotCopyMsg struct {
	Owner int32
	Epoch uint64
	App   []byte
}

var tRollback, tRollbackOffer, tRollbackPlan, tSnapshotCopy uint32

func init() {
	tRollback = RegisterMsgpackType[*RollbackMsg]("mgr.rollback")
	tRollbackOffer = RegisterMsgpackType[*RollbackOfferMsg]("mgr.rollbackOffer")
	tRollbackPlan = RegisterMsgpackType[*RollbackPlanMsg]("mgr.rollbackPlan")
	tSnapshotCopy = RegisterMsgpackType[*SnapshotCopyMsg]("mgr.snapshotCopy")
}

// RollbackType is the message type of RollbackMsg.
func RollbackType() uint32 { return tRollback }

// rollbackState is a PE's side of a global rollback, from its new
// manager's start until it restored.
type rollbackState struct {
	memory  *ftlayer.Checkpointer // what this PE held before (nil: it failed)
	initial []pe.Envelope         // what the run started this PE with
	start   *RollbackMsg
	offers  []*RollbackOfferMsg // coordinator: by PE
	got     int
	read    [][]byte // coordinator: snapshots read from the directory
	plan    *RollbackPlanMsg
	own     []byte
	prev    []byte
	stash   []pe.Envelope // what arrived before this PE restored
}

// RollBack makes this (new) manager take part in a global rollback: memory
// is the checkpoint memory this PE held before it (nil if the PE failed),
// initial what the run started it with. Until it restored, it keeps what
// reaches it. Call it before the PE's goroutine starts.
func (m *Manager) RollBack(memory *ftlayer.Checkpointer, initial []pe.Envelope) {
	m.rb = &rollbackState{memory: memory, initial: initial}
}

// Memory is the checkpoint memory this PE holds: its own snapshots and
// its neighbour's (while it rolls back, what it held before).
func (m *Manager) Memory() *ftlayer.Checkpointer {
	if m.rb != nil {
		return m.rb.memory
	}
	return m.checkpointer()
}

// handleRollback handles a message reaching a PE that is rolling back.
func (m *Manager) handleRollback(env *pe.Envelope) {
	switch env.Type {
	case tRollback:
		m.onRollback(env.Payload.(*RollbackMsg))
	case tRollbackOffer:
		m.onRollbackOffer(env.Payload.(*RollbackOfferMsg))
	case tRollbackPlan:
		m.onRollbackPlan(env.Payload.(*RollbackPlanMsg))
	case tSnapshotCopy:
		m.onSnapshotCopy(env.Payload.(*SnapshotCopyMsg))
	default:
		m.rb.stash = append(m.rb.stash, *env)
	}
}

func (m *Manager) onRollback(msg *RollbackMsg) {
	m.PE.RecordInstant(fmt.Sprintf("failure of %s: every PE rolls back", peNames(msg.Failed)))
	m.PE.RecordPhase("rollback", true)
	rb := m.rb
	rb.start = msg
	offer := &RollbackOfferMsg{PE: int32(m.Me())}
	if ck := rb.memory; ck != nil {
		offer.Committed = ck.LastCommitted()
		me := int32(m.Me())
		for _, owner := range []int32{me, m.Buddies().Held(me)} {
			for _, s := range []*ftlayer.Snapshot{ck.Committed(owner), ck.Tentative(owner)} {
				if s != nil && s.App != nil && !slices.Contains(offer.Held, HeldSnapshot{owner, s.Epoch}) {
					offer.Held = append(offer.Held, HeldSnapshot{owner, s.Epoch})
				}
			}
		}
	}
	m.sendCtl(0, tRollbackOffer, offer)
}

func (m *Manager) onRollbackOffer(msg *RollbackOfferMsg) {
	rb, n := m.rb, m.NumPEs()
	if m.Me() != 0 || msg.PE < 0 || int(msg.PE) >= n {
		m.failf("PE %d: a rollback offer from PE %d reached a PE that does not coordinate", m.Me(), msg.PE)
		return
	}
	if rb.offers == nil {
		rb.offers = make([]*RollbackOfferMsg, n)
	}
	if rb.offers[msg.PE] == nil {
		rb.got++
	}
	rb.offers[msg.PE] = msg
	if rb.got < n || rb.start == nil {
		return
	}
	plan, err := PlanRollback(n, rb.start, rb.offers, m.opt.CheckpointDir)
	if err == nil && plan.Source == FromDirectory {
		// the last checkpoint complete there: the one memory lacks, or
		// the one before if the failure came while it was being written
		var epoch uint64
		rb.read, epoch, err = ReadCheckpoint(m.opt.CheckpointDir, n)
		switch {
		case err == nil:
			if epoch != plan.Epoch {
				plan.From += fmt.Sprintf(" (checkpoint %d was not complete there)", plan.Epoch)
			}
			plan.Epoch = epoch
		case errors.As(err, new(NoCheckpointError)):
			plan, err = beforeAnyCheckpoint(rb.start), nil
		default:
			err = fmt.Errorf("%s failed and no PE holds every snapshot of checkpoint %d; reading it from --ckpt-dir: %w", peNames(rb.start.Failed), plan.Epoch, err)
		}
	}
	if err != nil {
		m.Fail(err)
		return
	}
	m.host.RollingBack(m, plan.Epoch, plan.From)
	for p := 0; p < n; p++ {
		m.sendCtl(p, tRollbackPlan, plan)
	}
}

// PlanRollback is the coordinator's choice, from every PE's offer: the
// last checkpoint anyone saw committed (or the launcher did, or the run
// was restarted from), and for each PE one that holds its snapshot of it,
// itself first. When no PE holds some snapshot, the checkpoint directory
// (if the run has one: the coordinator then takes the last checkpoint
// complete there, or goes back to before any checkpoint if none is),
// else the checkpoint the run was restarted from; a run that took no
// checkpoint and was not restarted starts again. Else the error names
// the snapshot that no copy of survives.
func PlanRollback(n int, start *RollbackMsg, offers []*RollbackOfferMsg, dir string) (*RollbackPlanMsg, error) {
	epoch := max(start.Committed, start.Restart)
	for _, o := range offers {
		epoch = max(epoch, o.Committed)
	}
	if epoch == 0 {
		return &RollbackPlanMsg{Source: FromStart, From: "the start of the run"}, nil
	}
	holder := make([]int32, n)
	missing := -1
	for q := 0; q < n && missing < 0; q++ {
		holder[q] = -1
		want := HeldSnapshot{int32(q), epoch}
		if slices.Contains(offers[q].Held, want) {
			holder[q] = int32(q)
			continue
		}
		for p, o := range offers {
			if slices.Contains(o.Held, want) {
				holder[q] = int32(p)
				break
			}
		}
		if holder[q] < 0 {
			missing = q
		}
	}
	switch {
	case missing < 0:
		return &RollbackPlanMsg{Epoch: epoch, Source: FromMemory, Holder: holder, From: "from the PEs' memory"}, nil
	case dir != "":
		return &RollbackPlanMsg{Epoch: epoch, Source: FromDirectory, From: "from " + dir}, nil
	case start.Restart > 0:
		return beforeAnyCheckpoint(start), nil
	}
	what := peNames(start.Failed) + " failed"
	if start.What != "" {
		what = start.What
	}
	return nil, fmt.Errorf("%s, and no copy of PE %d's snapshot of checkpoint %d survives (each PE's snapshot is held by it and its buddy); give --ckpt-dir to keep one on disk", what, missing, epoch)
}

// beforeAnyCheckpoint is where a run goes back to when no checkpoint of
// its own is complete anywhere: the one it was restarted from, or its
// start.
func beforeAnyCheckpoint(start *RollbackMsg) *RollbackPlanMsg {
	if start.Restart > 0 {
		return &RollbackPlanMsg{Epoch: start.Restart, Source: FromRestart, From: "the one the run was restarted from, in " + start.RestartDir}
	}
	return &RollbackPlanMsg{Source: FromStart, From: "the start of the run"}
}

func (m *Manager) onRollbackPlan(plan *RollbackPlanMsg) {
	rb, me, n := m.rb, int32(m.Me()), int32(m.NumPEs())
	if err := checkPlan(plan, int(n)); err != nil {
		m.failf("PE %d: %v", me, err)
		return
	}
	rb.plan = plan
	switch plan.Source {
	case FromStart:
		// handled in place, not counted: quiescence detection starts
		// from zero and nothing sent these in this run
		initial := rb.initial
		m.finishRollback()
		for i := range initial {
			m.handleSys(&initial[i])
		}
		m.sendCtl(0, tRestored, &RestoredMsg{Start: true})
		m.releaseRollbackStash()
		return
	case FromRestart:
		for i := range rb.initial {
			if rb.initial[i].Type == tRestore {
				msg := rb.initial[i].Payload.(*RestoreMsg)
				m.finishRollback()
				m.onRestore(msg)
				m.releaseRollbackStash()
				return
			}
		}
		m.failf("PE %d: told to roll back to the checkpoint the run was restarted from, but it was not", me)
		return
	case FromDirectory:
		if me == 0 {
			for q := int32(0); q < n; q++ {
				m.sendSnapshot(q, plan.Epoch, rb.read[q])
			}
			rb.read = nil
		}
	case FromMemory:
		for q, h := range plan.Holder {
			if h != me {
				continue
			}
			s := rb.memory.Committed(int32(q))
			if s == nil || s.Epoch != plan.Epoch {
				s = rb.memory.Tentative(int32(q))
			}
			if s == nil || s.Epoch != plan.Epoch {
				m.failf("PE %d: chosen to send PE %d's snapshot of checkpoint %d, which it does not hold", me, q, plan.Epoch)
				return
			}
			m.sendSnapshot(int32(q), plan.Epoch, s.App)
		}
	}
	m.tryRestoreRollback()
}

// checkPlan refuses a plan this run cannot carry out (bytes from another
// process are checked before they are used).
func checkPlan(plan *RollbackPlanMsg, n int) error {
	if plan.Source > FromStart {
		return fmt.Errorf("rollback plan: unknown source %d", plan.Source)
	}
	if plan.Source != FromMemory {
		return nil
	}
	if len(plan.Holder) != n {
		return fmt.Errorf("rollback plan: %d holders for %d PEs", len(plan.Holder), n)
	}
	for q, h := range plan.Holder {
		if h < 0 || int(h) >= n {
			return fmt.Errorf("rollback plan: PE %d's snapshot held by PE %d (PEs are 0..%d)", q, h, n-1)
		}
	}
	return nil
}

// sendSnapshot sends owner's snapshot to owner and to its buddy, which
// holds the second copy.
func (m *Manager) sendSnapshot(owner int32, epoch uint64, app []byte) {
	msg := &SnapshotCopyMsg{Owner: owner, Epoch: epoch, App: app}
	m.sendCtl(int(owner), tSnapshotCopy, msg)
	if b := m.Buddies().Of(owner); b != owner {
		m.sendCtl(int(b), tSnapshotCopy, msg)
	}
}

func (m *Manager) onSnapshotCopy(msg *SnapshotCopyMsg) {
	rb, me := m.rb, int32(m.Me())
	switch {
	case msg.Owner == me:
		rb.own = msg.App
	case msg.Owner == m.Buddies().Held(me):
		rb.prev = msg.App
	default:
		m.failf("PE %d: given PE %d's snapshot, which it neither owns nor holds", me, msg.Owner)
		return
	}
	m.tryRestoreRollback()
}

// tryRestoreRollback restores once the plan and both snapshots are in.
func (m *Manager) tryRestoreRollback() {
	rb := m.rb
	if rb == nil || rb.plan == nil || rb.own == nil || (rb.prev == nil && m.NumPEs() > 1) {
		return
	}
	from := fmt.Sprintf("PE %d's snapshot of checkpoint %d, %s", m.Me(), rb.plan.Epoch, rb.plan.From)
	own, prev := rb.own, rb.prev
	m.finishRollback()
	m.onRestore(&RestoreMsg{Own: own, Prev: prev, From: from})
	m.releaseRollbackStash()
}

func (m *Manager) finishRollback() {
	m.PE.RecordPhase("rollback", false)
	m.rbStash, m.rb = m.rb.stash, nil
}

// releaseRollbackStash handles what reached this PE while it rolled back.
func (m *Manager) releaseRollbackStash() {
	stash := m.rbStash
	m.rbStash = nil
	for i := range stash {
		m.Handle(m.PE, &stash[i])
	}
}

// peNames names PEs: "PE 3", "PEs 0 and 1", "PEs 0, 1 and 2".
func peNames(ps []int32) string {
	if len(ps) == 1 {
		return fmt.Sprintf("PE %d", ps[0])
	}
	s := "PEs "
	for i, p := range ps {
		switch {
		case i == 0:
		case i == len(ps)-1:
			s += " and "
		default:
			s += ", "
		}
		s += fmt.Sprint(p)
	}
	return s
}
