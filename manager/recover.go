package manager

import (
	"fmt"

	"github.com/charmgo/charmgo/ftlayer"
	"github.com/charmgo/charmgo/pe"
)

// Local recovery (message logging): a failed PE comes back alone while the
// others go on. The launcher fails the PE (pe.Node.FailPE), starts its new
// incarnation with a manager that Revive made, and tells every other PE
// (PEFailedMsg). Then:
//
//   - the PE holding the failed PE's copy of the last checkpoint sends it
//     (RecoverMsg); the one whose copy the failed PE held sends that again
//     (HeldCopyMsg), so the checkpoint is double again;
//   - every survivor's hook sends the failed PE what its recovery needs:
//     determinants, then its logged messages again;
//   - the new incarnation keeps everything that reaches it until its
//     snapshot is in, restores it (without the global restart's
//     handshake), makes its hook a restarted one and handles what it
//     kept. Its hook replays the receptions in their recorded order; the
//     PE's own sends, made again, are dropped as duplicates where they
//     arrived before.
//   - Once the hook is done, the PE tells the others (PeerRecoveredMsg)
//     and the launcher (Host.LocalRecovered).
//
// Quiescence detection survives this because the counts it sums are
// restored with the snapshot and re-sent copies are counted on neither
// side: a replayed message is not counted as sent, a dropped duplicate not
// as processed, and the runtime's control messages (checkpoints, the
// hooks' packets, these) are not counted at all.

// PEFailedMsg tells a PE that PE PE failed, or rolls back with one that
// did, and runs again as incarnation Inc (the launcher injects it).
// Recovered lists the PEs that recovered before: their own notice may
// still be on its way. Set is every PE rolling back with it (the
// failure's rollback set); Keeps says PE did not fail: it restores its
// own copy of its snapshot, and nobody sends it one. Again says it was
// recovering still, keeping the memory of an incarnation that came back
// empty: the copy it held of a neighbour's snapshot may not be back yet,
// and its owner sends it again.
type PEFailedMsg struct {
	PE        int32
	Inc       uint32
	Recovered []int32 `msgpack:",omitempty"`
	Set       []int32 `msgpack:",omitempty"`
	Keeps     bool    `msgpack:",omitempty"`
	Again     bool    `msgpack:",omitempty"`
}

// RecoverMsg hands a failed PE its snapshot of checkpoint Epoch. Base
// says the snapshot is the one this run was restarted or rolled back to:
// its protocol state is not this run's, so the PE restores its state and
// its protocol starts from zero, as every PE's did then. Own is nil when
// the PE starts again from the start of the run (no checkpoint yet).
// MissingFrom (+1) names the PE that should have held the copy and does
// not: it restarted since the checkpoint, and the failed PE was lost
// before it had given the copy back (HeldCopyMsg). The PE cannot recover
// then; starting again from the start of the run would be wrong.
//
// For is the incarnation it restores (0: the one it reaches): a PE that
// restarts again before its snapshot came (spmd: its team recovering
// still when another fails) drops the one sent to the incarnation
// before.
type RecoverMsg struct {
	Epoch       uint64
	Own         []byte
	Base        bool   `msgpack:",omitempty"`
	MissingFrom int32  `msgpack:",omitempty"`
	For         uint32 `msgpack:",omitempty"`
}

// HeldCopyMsg gives a restarted PE back the copy of its neighbour's
// snapshot it held.
type HeldCopyMsg struct {
	Epoch uint64
	Owner int32
	Snap  []byte
}

// PeerRecoveredMsg: PE PE finished recovering.
type PeerRecoveredMsg struct{ PE int32 }

var tPEFailed, tRecover, tHeldCopy, tPeerRecovered uint32

func init() {
	tPEFailed = RegisterMsgpackType[*PEFailedMsg]("mgr.peFailed")
	tRecover = RegisterMsgpackType[*RecoverMsg]("mgr.recover")
	tHeldCopy = RegisterMsgpackType[*HeldCopyMsg]("mgr.heldCopy")
	tPeerRecovered = RegisterMsgpackType[*PeerRecoveredMsg]("mgr.peerRecovered")
}

// PEFailedType is the message type of PEFailedMsg.
func PEFailedType() uint32 { return tPEFailed }

// recoverState is a PE's side of local recoveries.
type recoverState struct {
	reviving   bool // a new incarnation waiting for its snapshot
	recovering bool // restored; the hook is replaying
	inc        uint32
	initial    []pe.Envelope // what the run started this PE with
	// counted: restoring the run's base (its start, or the checkpoint it
	// was restarted from) counts as processing a message the launcher
	// injected; not after a global rollback, whose restoring is not
	// counted
	counted  bool
	stash    []pe.Envelope // what arrived before the snapshot
	complete map[uint64]uint64
	// base is the checkpoint this run was restarted from (0: none):
	// snapshots of it carry another run's protocol state.
	base uint64
	// mates: the PEs that roll back with this one (see Revive), and the
	// rollback as its hook sees it
	mates []Incarnation
	rb    ftlayer.Rollback
}

// control reports the runtime's control messages, which quiescence
// detection does not count: they are not replayed, so a failed PE's count
// of them could not be made again.
func control(typ uint32) bool {
	switch typ {
	case tCkptTake, tCkptPacket, tCkptDone, tRestored, tFTPacket, tPEFailed, tRecover, tHeldCopy, tPeerRecovered,
		tRollback, tRollbackOffer, tRollbackPlan, tSnapshotCopy:
		return true
	}
	return false
}

// sendCtl sends a control message: not stamped, logged or counted.
func (m *Manager) sendCtl(dst int, typ uint32, payload any) {
	m.PE.Send(dst, &pe.Envelope{Type: typ, Kind: pe.KindSystem, Payload: payload})
}

// Incarnation names a PE's incarnation.
type Incarnation struct {
	PE  int32
	Inc uint32
}

// Revive makes this manager the new incarnation inc of a failed PE: it
// keeps what arrives until its snapshot does. initial is what the run
// started the PE with (handled again when it recovers from the start);
// rolledBack says the run rolled every PE back since (quiescence
// detection's counts started again from zero then); mates lists the PEs
// that roll back with it, this one included (its team under team-based
// logging, the rollback set under a log limit), and their new
// incarnations: their old ones' messages are dropped from the moment it
// restores; rb is the rollback as the hook sees it. Call it before the
// PE's goroutine starts.
func (m *Manager) Revive(inc uint32, initial []pe.Envelope, rolledBack bool, mates []Incarnation, rb ftlayer.Rollback) {
	m.rec.reviving, m.rec.inc, m.rec.initial, m.rec.counted = true, inc, initial, !rolledBack
	m.rec.mates, m.rec.rb = mates, rb
}

// ReviveKeeping is Revive for a PE that rolls back with a failed one
// without having failed (a log limit's rollback set): this manager takes
// over prev's checkpoint memory (its own snapshot and the copy it holds
// for its neighbour) and what prev's hook keeps (Hook.Keep). It returns
// the message to inject into the PE to restore its own snapshot.
func (m *Manager) ReviveKeeping(prev *Manager, inc uint32, initial []pe.Envelope, rolledBack bool, mates []Incarnation, rb ftlayer.Rollback) pe.Envelope {
	rb.Kept = prev.FT().Keep()
	m.Revive(inc, initial, rolledBack, mates, rb)
	m.rec.base = prev.rec.base
	m.ckpt.ck = prev.Memory()
	return pe.Envelope{Type: tRecover, Kind: pe.KindSystem, Payload: m.ownRecoverMsg(int32(m.Me()))}
}

// ownRecoverMsg is the RecoverMsg of PE y's snapshot in this PE's memory.
func (m *Manager) ownRecoverMsg(y int32) *RecoverMsg {
	rm := &RecoverMsg{}
	ck := m.checkpointer()
	if s := ck.Committed(y); s != nil {
		rm.Epoch, rm.Own, rm.Base = s.Epoch, s.App, s.Epoch == m.rec.base && s.App != nil
	} else if own := ck.Committed(int32(m.Me())); own != nil && own.App != nil && own.Epoch > m.rec.base && y != int32(m.Me()) {
		// this PE committed a checkpoint since the run's base (from
		// which y would start again: its initial messages restore it),
		// so y did too, and its copy is not here
		rm.Epoch, rm.MissingFrom = own.Epoch, int32(m.Me())+1
	}
	return rm
}

// Incarnation is this PE's incarnation (0: the first).
func (m *Manager) Incarnation() uint32 { return m.rec.inc }

// Restored reports whether this PE runs from its snapshot (or from the
// start): false for a new incarnation whose snapshot has not come yet.
func (m *Manager) Restored() bool { return !m.rec.reviving }

// Recovering reports whether this PE is a new incarnation still catching
// up.
func (m *Manager) Recovering() bool { return m.rec.reviving || m.rec.recovering || m.rb != nil }

// onPEFailed runs on every survivor of a failure.
func (m *Manager) onPEFailed(msg *PEFailedMsg) {
	y, n := int(msg.PE), m.NumPEs()
	if y < 0 || y >= n || y == m.Me() {
		m.failf("PE %d told that PE %d failed (PEs are 0..%d)", m.Me(), y, n-1)
		return
	}
	ck := m.checkpointer()
	if int(m.Buddies().Of(int32(y))) == m.Me() && !msg.Keeps {
		rm := m.ownRecoverMsg(int32(y))
		rm.For = msg.Inc
		m.sendCtl(y, tRecover, rm)
	}
	if int(m.Buddies().Of(int32(m.Me()))) == y && (!msg.Keeps || msg.Again) {
		if s := ck.Committed(int32(m.Me())); s != nil && s.App != nil {
			m.sendCtl(y, tHeldCopy, &HeldCopyMsg{Epoch: s.Epoch, Owner: int32(m.Me()), Snap: s.App})
		}
	}
	for _, r := range msg.Recovered {
		m.ft.PeerRecovered(int(r))
	}
	if err := m.ft.PeerFailed(y, msg.Inc, msg.Set); err != nil {
		m.Fail(err)
		return
	}
	m.takeProcessed()
	if m.Me() == 0 && m.qd.root.peerFailed() {
		m.armQD() // the failed PE's probe or reply is lost: wave again once quiet
	}
	if y == 0 {
		// quiescence requests PE 0 held died with it
		for _, tag := range m.qdAsked {
			m.StartQD(tag)
		}
	}
}

// onRecover restores a new incarnation from its snapshot and handles what
// it kept meanwhile.
func (m *Manager) onRecover(msg *RecoverMsg) {
	// a PE restarts because it failed or because its team rolls back with
	// it; either way it is this PE's restart
	m.PE.RecordInstant(fmt.Sprintf("PE %d restarts from checkpoint %d (incarnation %d)", m.Me(), msg.Epoch, m.rec.inc))
	m.PE.RecordPhase("recovery (replay)", true)
	m.rec.reviving, m.rec.recovering = false, true
	if msg.MissingFrom > 0 {
		m.Fail(fmt.Errorf("recovery of PE %d: PE %d, which held the copy of its checkpoint %d, restarted since and had not had it back when PE %d was lost: no copy survives", m.Me(), msg.MissingFrom-1, msg.Epoch, m.Me()))
		return
	}
	var s *PESnapshot
	var ck *ftlayer.Counters
	if msg.Own != nil {
		var err error
		if s, err = DecodeSnapshot(msg.Own); err != nil {
			m.Fail(fmt.Errorf("recovery of PE %d: %w", m.Me(), err))
			return
		}
		if !msg.Base {
			ck = s.FT
		}
	}
	// the hook first: what restoring sends must be stamped as it was
	m.ft.Restart(ck, m.rec.inc, m.completeBefore, m.rec.rb)
	m.rec.rb.Kept = nil
	for _, r := range m.rec.mates {
		if int(r.PE) != m.Me() {
			if err := m.ft.PeerFailed(int(r.PE), r.Inc, m.rec.rb.Set); err != nil {
				m.Fail(fmt.Errorf("recovery of PE %d: %w", m.Me(), err))
				return
			}
		}
	}
	m.rec.mates = nil
	var resume *Callback
	switch {
	case s != nil:
		if err := m.restoreLocal(s, msg.Own); err != nil {
			m.Fail(fmt.Errorf("recovery of PE %d: %w", m.Me(), err))
			return
		}
		resume = s.Resume
		if msg.Base {
			// the run's base: quiescence counts start from it
			m.rec.base = s.Epoch
			if m.rec.counted {
				m.Processed++
			}
		} else {
			m.Sent, m.Processed = s.Sent, s.Processed
		}
	default:
		for i := range m.rec.initial {
			env := m.rec.initial[i]
			if env.Type == tRestore { // this run began from a checkpoint
				if m.rec.counted {
					m.Processed++
				}
				rm := env.Payload.(*RestoreMsg)
				s, err := DecodeSnapshot(rm.Own)
				if err == nil {
					err = m.restoreLocal(s, rm.Own)
				}
				if err != nil {
					m.Fail(fmt.Errorf("recovery of PE %d from %s: %w", m.Me(), restoreSource(rm), err))
					return
				}
				m.rec.base, resume = s.Epoch, s.Resume
				continue
			}
			if m.rec.counted {
				m.Handle(m.PE, &env)
			} else {
				m.handleSys(&env) // not counted: see Revive
			}
		}
	}
	m.rec.initial = nil
	m.host.LocalRestored(m, msg.Epoch)
	if resume != nil && m.Me() == 0 {
		// PE 0 resumed the program when the checkpoint was complete; the
		// others did so long ago
		m.DeliverCallback(*resume, struct{}{})
	}
	stash := m.rec.stash
	m.rec.stash = nil
	for i := range stash {
		m.Handle(m.PE, &stash[i])
	}
	m.checkRecovered()
}

// restoreLocal is Restore for one PE coming back alone: no handshake with
// PE 0, and the checkpoint's copy is held again.
func (m *Manager) restoreLocal(s *PESnapshot, raw []byte) error {
	if err := m.restore(s); err != nil {
		return err
	}
	for _, tag := range s.QDAsked {
		m.StartQD(tag)
	}
	me := int32(m.Me())
	held := m.checkpointer().Committed(m.Buddies().Held(me)) // a copy HeldCopyMsg brought first
	m.ckpt.ck = ftlayer.RestoredCheckpointer(me, m.Buddies(), m.everyPE(), &ftlayer.Snapshot{Owner: me, Epoch: s.Epoch, App: raw}, held)
	m.ckpt.last = s.Epoch
	return nil
}

func (m *Manager) onHeldCopy(msg *HeldCopyMsg) {
	m.checkpointer().Hold(&ftlayer.Snapshot{Owner: msg.Owner, Epoch: msg.Epoch, App: msg.Snap})
	m.host.LocalHolds(m, msg.Owner)
}

// completeBefore: reductions up to num of group g are complete at their
// root (as the hook of a restarted incarnation learned it).
func (m *Manager) completeBefore(g, num uint64) {
	if !m.rec.recovering {
		// nothing kept: after a recovery a group set up anew starts its
		// rounds afresh
		m.completeUpTo(g, num)
		return
	}
	if m.rec.complete == nil {
		m.rec.complete = map[uint64]uint64{}
	}
	m.rec.complete[g] = max(m.rec.complete[g], num)
	m.applyComplete(g)
}

// applyComplete tells group g's reduction state what its root completed,
// as heard during this recovery (also when the group is set up after the
// news came).
func (m *Manager) applyComplete(g uint64) {
	if num, ok := m.rec.complete[g]; ok {
		m.completeUpTo(g, num)
	}
}

// completeUpTo tells group g's reduction state, if it has one here, that
// its rounds up to num are complete at the root.
func (m *Manager) completeUpTo(g, num uint64) {
	if g < 1<<32 {
		if c := m.colls[uint32(g)]; c != nil && c.red != nil {
			m.acts = c.red.CompleteBefore(uint32(num), m.acts[:0])
			m.runActs(c, nil)
		}
		return
	}
	if s := m.secs[g]; s != nil && s.red != nil {
		m.acts = s.red.CompleteBefore(uint32(num), m.acts[:0])
		m.runActs(m.coll(s.Coll), s)
	}
}

// checkSupplied tells the host which PEs sent this one, recovering,
// everything its recovery needs from them since the last call (a hook
// that tells: ftlayer.Supplied). It runs before the hook's held messages
// are handled: a loss during their re-execution may then wait for it.
func (m *Manager) checkSupplied() {
	if sp, ok := m.ft.(ftlayer.Supplied); ok {
		if by := sp.TakeSupplied(); len(by) > 0 {
			m.host.LocalSupplied(m, by)
		}
	}
}

// checkRecovered ends this PE's recovery once its hook is done.
func (m *Manager) checkRecovered() {
	if !m.rec.recovering || m.ft.Recovering() {
		return
	}
	m.rec.recovering = false
	m.rec.complete = nil
	m.PE.RecordPhase("recovery (replay)", false)
	for p := 0; p < m.NumPEs(); p++ {
		if p != m.Me() {
			m.sendCtl(p, tPeerRecovered, &PeerRecoveredMsg{PE: int32(m.Me())})
		}
	}
	m.host.LocalRecovered(m)
}

func (m *Manager) onPeerRecovered(msg *PeerRecoveredMsg) { m.ft.PeerRecovered(int(msg.PE)) }
