// Package manager owns the per-PE manager objects of charmgo: the k-ary
// spanning trees of the PE set and of each array section, reductions
// (accumulate local contributions, agglomerate with the children's partials,
// deliver at the root in canonical order), broadcast and multicast
// forwarding, the location of array elements (home PEs, caches, forwarding
// across migrations), element creation, insertion, deletion and migration,
// AtSync epochs and the load-balancing steps they drive (each PE's
// measurements; the strategy itself is a Balancer the chare layer plugs
// in), and quiescence detection. It knows nothing of the user's Go types:
// the chare layer plugs in through Host.
//
// A file per concept. Plain state machines, tested without a PE: tree.go
// (spanning trees), reduce.go (a reduction's rounds on one PE, reducers),
// the location table of location.go (Collection.route and learn), the
// counting of quiescence.go (qdRoot), the rollback plan of rollback.go
// (PlanRollback). The per-PE Manager (this file)
// dispatches messages to the concepts that wire them: collection.go,
// location.go, route.go, insert.go, migrate.go, broadcast.go, section.go,
// contribute.go, atsync.go (balancing steps), lbstats.go (the measurements
// and their gathering on PE 0), lbperiodic.go (+LBPeriod), secrefresh.go
// (sections set up again after their members moved), quiescence.go,
// dump.go, msgs.go (the messages).
// Fault tolerance, each PE's side of it: fthook.go (the hook on the send
// and receive paths), checkpoint.go, ckptfile.go, validate.go (snapshots,
// their files, their checks), recover.go (a PE recovering alone) and
// rollback.go (every PE going back to a checkpoint, agreed by messages).
// The launcher's side — injected failures, new incarnations, starting a
// rollback, a restart on another PE count — is package recovery's.
package manager

import (
	"fmt"

	"github.com/charmgo/charmgo/ftlayer"
	"github.com/charmgo/charmgo/pe"
)

// Host is what the chare layer provides: construction, invocation and
// packing of user objects, and delivery of futures.
type Host interface {
	// Construct builds element e (e.Obj is nil) with constructor argument arg.
	Construct(m *Manager, e *Element, arg Lazy)
	// Invoke runs the entry method env.Type on e. It need not recover
	// panics: one that leaves it reaches Panicked.
	Invoke(m *Manager, e *Element, env *pe.Envelope)
	// Panicked reports a panic that left an Invoke (ending the run with
	// an error that names the entry and the element) and returns true,
	// or returns false if no Invoke was running.
	Panicked(m *Manager, r any, stack []byte) bool
	// Pack serializes e.Obj for migration.
	Pack(e *Element) ([]byte, error)
	// Checkpoint serializes e.Obj for a checkpoint (migratable or not).
	Checkpoint(e *Element) ([]byte, error)
	// Restore rebuilds e.Obj from a checkpoint (no arrival hook runs).
	Restore(m *Manager, e *Element, state []byte) error
	// Restored runs on PE 0 when every PE restored a checkpoint, just
	// before the program resumes, or started the run again after a
	// rollback to its start.
	Restored(m *Manager)
	// CheckpointStarting runs on PE 0 when the run is quiet for checkpoint
	// epoch, before it asks every PE for its snapshot; false puts the
	// checkpoint off to the next quiet moment (a PE is recovering).
	CheckpointStarting(m *Manager, epoch uint64) bool
	// CheckpointCommitted runs on PE 0 once every PE committed epoch;
	// teams, if not nil, are the teams the epoch put the PEs in
	// (Options.Regroup), in effect from it on.
	CheckpointCommitted(m *Manager, epoch uint64, teams *ftlayer.Teams)
	// RollingBack runs on PE 0 when a global rollback chose the
	// checkpoint every PE goes back to (0: the start of the run) and
	// where its snapshots are.
	RollingBack(m *Manager, epoch uint64, from string)
	// LocalRestored runs on a failed PE's new incarnation when it restored
	// checkpoint epoch (0: the start of the run) to recover alone.
	LocalRestored(m *Manager, epoch uint64)
	// LocalHolds runs on a PE when it holds PE owner's checkpoint copy
	// again (a restarted PE, which came back empty: its owner sent it).
	LocalHolds(m *Manager, owner int32)
	// LocalSupplied runs on it, under a hook that tells (ftlayer.Supplied),
	// once the PEs by sent it everything its recovery needs from them;
	// LocalRecovered, once it caught up with the others.
	LocalSupplied(m *Manager, by []int32)
	LocalRecovered(m *Manager)
	// Unpack rebuilds e.Obj on its new PE and runs its arrival hook.
	Unpack(m *Manager, e *Element, state []byte) error
	// ResumeFromSync ends an AtSync epoch for e.
	ResumeFromSync(m *Manager, e *Element)
	// FutureFilled delivers a future's value on its PE.
	FutureFilled(m *Manager, id uint64, v Lazy)
	// Quiescent runs when quiescence detection that this PE asked for
	// (StartQD) finds the run quiescent.
	Quiescent(m *Manager, tag uint64)
	// Records packs this PE's records of the chare layer for a
	// checkpoint (the callbacks of its quiescence detections, its
	// futures), or says why no checkpoint can be taken now.
	Records(m *Manager) ([]byte, error)
	// RestoreRecords rebuilds them from a checkpoint (nil: none).
	RestoreRecords(m *Manager, b []byte) error
	// Pending lists the chare layer's unfinished work on this PE (entry
	// methods blocked on futures), for Manager.Pending.
	Pending(m *Manager) []string
	// Waits lists what this PE's elements wait for in the chare layer's
	// own constructs (messages a Gather waits for), for dumps
	// (Manager.Describe): a program may end with elements waiting, so
	// it is not unfinished work.
	Waits(m *Manager) []string
}

// Options configure every manager of a run.
type Options struct {
	Branching int // spanning-tree arity (default 4)
	// Procs is how many processes the job's PEs run in (Layout): the
	// spanning trees keep each process's PEs together. 0 or 1: one.
	Procs int
	LB    LBOptions // load balancing at AtSync
	// CheckpointDir, if set, receives every committed checkpoint as well.
	CheckpointDir string
	// FTVerify checks that a PE re-executing after a failure sends what
	// it sent the first time (--ft-verify: see verify.go).
	FTVerify bool
	OnError  func(error) // how a runtime error ends the run (default: node.Fail)
	// FT makes each PE's message-logging hook (nil: none).
	FT HookFactory
	// BuddyStride is how far on a PE's checkpoint buddy is (its PEs per
	// process when there are several: the copy lives in another
	// process; 0 or 1: the next PE).
	BuddyStride int
	// Regroup, if set, chooses teams (each PE's team number) at each
	// coordinated checkpoint from the volume each PE sent each PE since
	// the one before (rows[u][v]; nil rows: not measured), or returns nil
	// to keep them. PE 0 calls it; the teams and the checkpoint copies'
	// pairs that keep each copy in another team apply from that
	// checkpoint on.
	Regroup func(rows [][]uint64) ([]int32, error)
	// Teams gives the teams in effect (for the pairs of a manager made
	// after a failure); nil: every PE alone.
	Teams func() ftlayer.Teams
	// Recluster, if set, clusters the PEs at each coordinated checkpoint
	// from the same rows as Regroup (a log limit's cluster strategy):
	// the dendrogram's joins (mcml.Dendrogram.Joins), or nil to keep the
	// one in effect. PE 0 calls it; each PE's hook gets the dendrogram
	// (Hook.Recluster) at that checkpoint's commit.
	Recluster func(rows [][]uint64) ([][2]int32, error)
}

// Buddies pairs each PE with the holder of its checkpoint's second copy:
// as the last checkpoint this PE committed did.
func (m *Manager) Buddies() ftlayer.Buddies {
	if m.ckpt.ck != nil {
		return m.ckpt.ck.Buddies()
	}
	if m.opt.Regroup != nil && m.opt.Teams != nil {
		if t := m.opt.Teams(); t.On() {
			if b, err := ftlayer.TeamBuddies(t); err == nil {
				return b
			}
		}
	}
	return ftlayer.NewBuddies(m.NumPEs(), m.opt.BuddyStride)
}

// Manager is one PE's manager object. All methods run on that PE.
type Manager struct {
	PE  *pe.PE
	ran bool // an entry method ran since the PE's last flush: its progress (PE.NoteEntriesIn)
	// recording: the PE records its timeline (pe.Config.Timeline)
	recording bool
	host      Host
	opt       Options
	colls     map[uint32]*Collection
	secs      map[uint64]*Section
	// allPEs: the spanning tree over every PE (everyPE); kids: scratch
	// for a PE's children in it
	allPEs *Tree
	kids   []int

	pendingColl map[uint32][]pe.Envelope
	pendingSec  map[uint64][]pe.Envelope
	building    map[uint64]*sectionBuild // sections waiting for member locations

	last     *Collection // the collection of the previous message: most runs hit it again
	nextColl uint32
	nextSec  uint64
	acts     []RedAction

	qd       qdState
	quiet    quietCheck
	ckpt     ckptState
	secRoots map[uint64]int // sections rooted elsewhere than their id says (after a restart)
	ft       ftlayer.Hook
	// ftOn: a protocol is on (ft is not a NopHook). The per-message
	// paths test it and nothing else when it is off.
	ftOn  bool
	ftEnv *pe.Envelope // stamp's scratch envelope
	// origins: the hook names messages by their origin (ftlayer.OriginUser);
	// origin is the one of the message an element is sending, if
	// hasOrigin (see from)
	origins, hasOrigin bool
	origin             pe.Origin
	// dedup: the hook recognises messages again at their element
	dedup ftlayer.ElementDedup
	// counter: the hook corrects the count of messages processed
	counter ftlayer.Counter
	// result: the reduction whose result is being delivered to its
	// callback (a name for a hook that uses origins)
	result struct {
		g, num uint64
		on     bool
	}
	released pe.Envelope // a held envelope the hook handed back
	rec      recoverState
	rb       *rollbackState // a global rollback this PE takes part in
	rbStash  []pe.Envelope  // what reached it meanwhile, handled once it restored
	qdAsked  []uint64       // quiescence detections this PE waits for (not checkpoints')
	lb       lbState
	secAlias map[uint64]secAlias // sections set up again: old id -> new
	// Sent and Processed count application-level messages for quiescence
	// detection.
	Sent, Processed uint64
	// Stats counts what the program asked for, by kind.
	Stats Stats
	// verified: under --ft-verify, the hashes of the logged messages
	// handled since the last checkpoint, by their place (verify.go)
	verified map[verifyKey]uint64
}

// Stats counts application-level operations and their payload bytes, as a
// program sees them (not the runtime's own tree hops and bookkeeping).
// Bytes count payloads whose size is known (see PayloadSize); Unsized counts
// the others.
type Stats struct {
	P2P, P2PBytes              uint64 // point-to-point sends (callback deliveries included)
	Multicasts, MulticastBytes uint64 // section multicasts issued
	Deliveries                 uint64 // multicast deliveries to section members
	// Deliveries a section sent to a PE its member had left, passed on
	// from there (and the member's contributions sent back to it).
	ForwardedDeliveries           uint64
	Broadcasts, BroadcastBytes    uint64 // collection broadcasts issued
	Contributions, ReductionBytes uint64 // reduction contributions (collections and sections)
	Unsized                       uint64
	// Coordinated checkpoints committed (counted on PE 0), the bytes of
	// every PE's snapshot (each held twice: own PE and buddy) and the time
	// from the request to the last PE's commit.
	Checkpoints, CheckpointBytes, CheckpointNanos uint64
	// Restarts from a checkpoint (counted on PE 0).
	Restarts uint64
	// Verified counts the copies --ft-verify compared with what their
	// sender's first execution sent (all the same, or the run failed).
	Verified uint64
}

// Add accumulates o into s.
func (s *Stats) Add(o Stats) {
	s.P2P += o.P2P
	s.P2PBytes += o.P2PBytes
	s.Multicasts += o.Multicasts
	s.MulticastBytes += o.MulticastBytes
	s.Deliveries += o.Deliveries
	s.ForwardedDeliveries += o.ForwardedDeliveries
	s.Broadcasts += o.Broadcasts
	s.BroadcastBytes += o.BroadcastBytes
	s.Contributions += o.Contributions
	s.ReductionBytes += o.ReductionBytes
	s.Unsized += o.Unsized
	s.Verified += o.Verified
	s.Checkpoints += o.Checkpoints
	s.CheckpointBytes += o.CheckpointBytes
	s.CheckpointNanos += o.CheckpointNanos
	s.Restarts += o.Restarts
}

// Sizer is implemented by payloads that know their size on the wire.
type Sizer = pe.Sizer

// PayloadSize is the wire size of a payload when it can be known cheaply, or
// -1.
func PayloadSize(v any) int { return pe.PayloadSize(v) }

func (s *Stats) bytes(n *uint64, v any) { s.addBytes(n, PayloadSize(v)) }

func (s *Stats) addBytes(n *uint64, size int) {
	if size >= 0 {
		*n += uint64(size)
	} else {
		s.Unsized++
	}
}

// New makes the manager of PE p.
func New(p *pe.PE, host Host, opt Options) *Manager {
	if opt.Branching < 2 {
		opt.Branching = DefaultBranching
	}
	m := &Manager{
		PE: p, host: host, opt: opt,
		colls:       map[uint32]*Collection{},
		secs:        map[uint64]*Section{},
		pendingColl: map[uint32][]pe.Envelope{},
		pendingSec:  map[uint64][]pe.Envelope{},
	}
	p.NoteEntriesIn(&m.ran)
	m.recording = p.Recording()
	m.newHook()
	m.lbInit()
	return m
}

// Of returns the manager of PE p.
func Of(p *pe.PE) *Manager { return p.Handler().(*Manager) }

// Host is the chare layer's per-PE state.
func (m *Manager) Host() Host { return m.host }

// Me is this PE's number.
func (m *Manager) Me() int { return m.PE.ID() }

// NumPEs is the number of PEs in the run.
func (m *Manager) NumPEs() int { return m.PE.NumPEs() }

// layout is the job's placement of PEs in processes, for its trees.
func (m *Manager) layout() Layout { return Layout{PEs: m.NumPEs(), Procs: m.opt.Procs} }

// Collection returns this PE's view of a collection, or nil.
func (m *Manager) Collection(id uint32) *Collection { return m.coll(id) }

// CollectionNames names every collection this PE knows, by id.
func (m *Manager) CollectionNames() map[uint32]string {
	out := make(map[uint32]string, len(m.colls))
	for id, c := range m.colls {
		out[id] = c.Name
	}
	return out
}

// Fail ends the run with err.
func (m *Manager) Fail(err error) {
	if m.opt.OnError != nil {
		m.opt.OnError(err)
		return
	}
	m.PE.Node().Fail(err)
}

func (m *Manager) failf(format string, args ...any) { m.Fail(fmt.Errorf(format, args...)) }

// send counts an application-level message, has the FT hook stamp it and
// queues it.
func (m *Manager) send(dst int, env *pe.Envelope) {
	if m.ftOn && (env.Kind != pe.KindSystem || !unlogged(env.Type)) {
		if !m.stamp(dst, ftlayer.RoleP2P, 0, 0, false, env) {
			return
		}
	}
	if env.Kind != pe.KindSystem || !control(env.Type) {
		m.Sent++
	}
	m.PE.Send(dst, env)
}

func (m *Manager) sendSys(dst int, typ uint32, payload any) {
	m.send(dst, &pe.Envelope{Type: typ, Kind: pe.KindSystem, Payload: payload})
}

// Handle implements pe.Handler.
func (m *Manager) Handle(p *pe.PE, env *pe.Envelope) {
	switch env.Type {
	case tQDProbe:
		m.onQDProbe(env.Payload.(*QDProbeMsg))
		return
	case tQDReply:
		m.onQDReply(env.Payload.(*QDReplyMsg))
		return
	case tDump:
		m.onDump(env.Payload.(*DumpMsg))
		return
	}
	if m.rb != nil {
		m.handleRollback(env)
		return
	}
	if m.rec.reviving {
		if env.Type == tRecover {
			if rm := env.Payload.(*RecoverMsg); rm.For == 0 || rm.For == m.rec.inc {
				m.onRecover(rm)
			} // (else for the incarnation before: this one restarted again since)
		} else {
			m.rec.stash = append(m.rec.stash, *env) // until the snapshot is in
		}
		return
	}
	if env.FT != nil {
		a, err := m.ft.Arrive(env)
		if m.counter != nil {
			m.takeProcessed()
		}
		switch {
		case err != nil:
			m.Fail(err)
			return
		case a == ftlayer.Held:
			// counted as processed when the hook hands it back, maybe at
			// once: a kept result can fill the turn the hook waited for
			m.handleReleased()
			return
		case a == ftlayer.Relay:
			m.relayBcast(env)
			return
		case a == ftlayer.Dropped:
			// a copy (a replay, or a message made again by a recovering
			// PE): counted neither as sent nor as processed
			if m.opt.FTVerify {
				if err := m.verifyDropped(env); err != nil {
					m.Fail(err)
				}
			}
			return
		}
		if m.opt.FTVerify {
			m.verifyHandled(env)
		}
	}
	m.handle(env)
	if m.ftOn || m.rec.recovering {
		m.handleReleased()
	}
}

// Panicked implements pe.PanicHandler: a panic left Handle.
func (m *Manager) Panicked(p *pe.PE, env *pe.Envelope, r any, stack []byte) {
	if !m.host.Panicked(m, r, stack) {
		m.Fail(fmt.Errorf("PE %d: panic handling %s: %v\n%s", m.Me(), pe.TypeName(env.Type), r, stack))
	}
}

// handleReleased handles the envelopes the hook releases, one at a time.
func (m *Manager) handleReleased() {
	if m.rec.recovering {
		m.checkSupplied()
	}
	if m.ftOn && m.ft.Next(&m.released) {
		for ok := true; ok; ok = m.ft.Next(&m.released) {
			if m.opt.FTVerify {
				m.verifyHandled(&m.released)
			}
			m.handle(&m.released)
		}
		m.released = pe.Envelope{} // drop its payload
	}
	if m.rec.recovering {
		m.checkRecovered()
	}
}

func (m *Manager) handle(env *pe.Envelope) {
	if env.Kind != pe.KindSystem || !control(env.Type) {
		m.Processed++
	}
	switch env.Kind {
	case pe.KindSystem:
		m.handleSys(env)
	case pe.KindReduction:
		switch env.Type {
		case tContrib:
			m.onContrib(env)
		case tPartial:
			m.onPartial(env)
		default:
			m.failf("PE %d: unexpected reduction message %s", m.Me(), pe.TypeName(env.Type))
		}
	default:
		m.handleApp(env)
	}
}

// Idle implements pe's idle hook: the fault-tolerance hook sends what it
// batches, and quiescence replies wait for an idle PE (after those
// sends, which they count).
func (m *Manager) Idle(p *pe.PE) {
	if m.ftOn {
		m.ft.Idle()
	}
	m.qdIdle()
}

func (m *Manager) handleSys(env *pe.Envelope) {
	switch env.Type {
	case tCreate:
		m.onCreateMsg(env.Payload.(*CreateMsg), env.FT)
	case tInsert:
		m.onInsert(env)
	case tDone:
		m.onDoneInserting(env)
	case tCount:
		m.onCount(env)
	case tLoc:
		m.onLoc(env)
	case tMigrate:
		m.onMigrate(env)
	case tMigrateReq:
		m.onMigrateReq(env)
	case tLocQuery:
		m.onLocQuery(env)
	case tDelete:
		m.onDelete(env)
	case tDeath:
		m.onDeath(env)
	case tSection:
		sm := env.Payload.(*SectionMsg)
		m.onSection(sm)
		if sm.Replaces != 0 {
			m.sendSys(SectionRoot(sm.Sec), tSecAck, &SecAckMsg{Sec: sm.Sec})
		}
	case tFuture:
		f := env.Payload.(*FutureMsg)
		m.PE.Ran()
		m.host.FutureFilled(m, f.ID, f.Value)
	case tSync:
		m.onSync(env.Payload.(*SyncMsg))
	case tPlan:
		m.onPlan(env.Payload.(*PlanMsg), env.FT)
	case tPlanDone:
		m.onPlanDone(env.Payload.(*PlanDoneMsg))
	case tResume:
		m.onResume(env.Payload.(*ResumeMsg), env.FT)
	case tSecRefresh:
		m.onSecRefresh(env.Payload.(*SecRefreshMsg))
	case tSecAlias:
		m.onSecAlias(env.Payload.(*SecAliasMsg))
	case tSecAck:
		m.onSecAck(env.Payload.(*SecAckMsg))
	case tLBTick:
		m.onLBTick()
	case tLBCollect:
		m.onLBCollect(env.Payload.(*LBCollectMsg))
	case tLBPart:
		m.onLBPart(env.Payload.(*LBPartMsg))
	case tStranded:
		m.onStranded(env)
	case tCkptStart:
		m.onCkptStart(env.Payload.(*CkptStartMsg))
	case tCkptTake:
		m.onCkptTake(env.Payload.(*CkptTakeMsg), env.FT)
	case tCkptPacket:
		m.onCkptPacket(env)
	case tCkptDone:
		m.onCkptDone(env)
	case tRestore:
		m.onRestore(env.Payload.(*RestoreMsg))
	case tRestored:
		m.onRestored(env.Payload.(*RestoredMsg))
	case tFTPacket:
		m.onFTPacket(env)
	case tPEFailed:
		m.onPEFailed(env.Payload.(*PEFailedMsg))
	case tHeldCopy:
		m.onHeldCopy(env.Payload.(*HeldCopyMsg))
	case tPeerRecovered:
		m.onPeerRecovered(env.Payload.(*PeerRecoveredMsg))
	case tRecover:
		if rm := env.Payload.(*RecoverMsg); rm.For != 0 && rm.For < m.rec.inc {
			return // for an incarnation before this one
		}
		m.failf("PE %d: a recovery snapshot (for incarnation %d, from PE %d) reached a PE that is not recovering (incarnation %d)", m.Me(), env.Payload.(*RecoverMsg).For, env.Src, m.rec.inc)
	default:
		m.failf("PE %d: unknown system message %s", m.Me(), pe.TypeName(env.Type))
	}
}
