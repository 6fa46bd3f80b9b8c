package manager

import (
	"bytes"
	"cmp"
	"fmt"
	"slices"
	"time"

	"github.com/charmgo/charmgo/ftlayer"
	"github.com/charmgo/charmgo/ftlayer/mcml"
	"github.com/charmgo/charmgo/pe"
	"github.com/vmihailenco/msgpack/v5"
)

// A coordinated checkpoint (Charm++'s CkStartMemCheckpoint): the program
// calls StartCheckpoint at a point where none of its messages is in flight
// (a barrier, as LeanMD does). PE 0 starts an epoch; the take goes down
// the spanning tree over every PE; every PE packs its chares and runtime
// records into a PESnapshot, and ftlayer's Checkpointer runs the two
// phases — the snapshot goes to the PE's buddy; the copies stored are
// merged up the tree; PE 0 commits, down the tree — after which each PE
// keeps its own and its neighbour's committed snapshot, and writes its own
// to the checkpoint directory if there is one. The PEs' commits are merged
// up the tree; once every PE committed, PE 0 delivers the program's
// callback. No PE hears from more than its tree neighbours and its buddy.

// SnapshotVersion is the version of PESnapshot's encoding. 4: the
// protocol counters (ftlayer.GroupCounters) lost the fields of a reduction
// folded inside the protocol, which only its simulator used.
const SnapshotVersion = 4

// PESnapshot is one PE's part of a coordinated checkpoint: enough to
// rebuild the PE (Restore) at the point the checkpoint was taken.
type PESnapshot struct {
	Version    uint8
	PE, NumPEs int32
	Branching  int32 // the spanning trees' arity the counts were made for
	// Procs is the processes the trees were made for (Layout; 0 or 1:
	// one process, as every checkpoint before it was).
	Procs       int32 `msgpack:",omitempty"`
	Epoch       uint64
	NextColl    uint32
	NextSec     uint64
	Resume      *Callback // PE 0: the checkpoint's callback, delivered again after a restart
	Collections []CollSnapshot
	Sections    []SectionMsg // the sections this PE is part of, as they were set up
	SecRounds   []uint32     // each section's next reduction round
	SecRoots    []SecRoot    // sections whose root is not the one their id names
	SecAliases  []SecAlias   `msgpack:",omitempty"` // sections set up again: their old ids
	// FT is the message-logging protocol's counters (sequence numbers,
	// incarnations, groups' numbering): what a PE recovering alone from
	// this checkpoint resumes from.
	FT *ftlayer.Counters `msgpack:",omitempty"`
	// Sent and Processed are the PE's counts for quiescence detection,
	// and QDAsked the detections it waits for: a PE recovering alone goes
	// on from them.
	Sent, Processed uint64
	QDAsked         []uint64 `msgpack:",omitempty"`
	// Host is the chare layer's records of this PE (Host.Records).
	Host []byte `msgpack:",omitempty"`
}

// CollSnapshot is one collection's state on one PE: its definition (as
// created; Arg unused), its broadcast counters, its reduction round and
// counts, the locations this PE knows of and its local elements.
type CollSnapshot struct {
	CreateMsg
	DoneInserting  bool
	BcastNext      uint64
	BcastDelivered uint64
	// LBSteps: the balancing steps of the collection so far (PE 0's):
	// a PE 0 that rolled back, or a restarted run, numbers the next one
	// on from them (a chain of strategies picks by it)
	LBSteps     int     `msgpack:",omitempty"`
	RedNext     uint32  // next reduction round (see ReducesHere)
	RedLocal    int64   // contributors counted on this PE
	RedChildren []int64 // contributors in each tree child's subtree
	Locs        []LocSnapshot
	Elements    []ElemSnapshot
}

// LocSnapshot is where an element of the collection is (elsewhere).
type LocSnapshot struct {
	Index []int32
	PE    int32
	Moves uint32
}

// ElemSnapshot is one element: its index, its runtime record and the
// chare's packed state (msgpack, or its Migratable Pack).
type ElemSnapshot struct {
	Index   []int32
	RedHome int32
	RedNo   uint32
	Bcast   uint64
	Moves   uint32
	Epoch   uint32
	Secs    []SecMembership
	State   []byte
	Sends   uint64 `msgpack:",omitempty"` // see Element.Sends
}

// CkptStartMsg asks PE 0 for a checkpoint; Callback gets struct{}{} once
// every PE committed it.
type CkptStartMsg struct{ Callback Callback }

// CkptTakeMsg tells a PE to take its snapshot for Epoch. Teams, if
// set, is each PE's team from this epoch on (Options.Regroup).
type CkptTakeMsg struct {
	Epoch uint64
	Teams []int32 `msgpack:",omitempty"`
	// Clusters, if set, is the dendrogram of the PEs a log limit's
	// cluster strategy uses from this epoch on (Options.Recluster).
	Clusters [][2]int32 `msgpack:",omitempty"`
}

// CkptPacketMsg carries one packet of ftlayer's checkpoint protocol.
type CkptPacketMsg struct {
	Kind  ftlayer.PacketKind
	Epoch uint64
	Owner int32
	App   []byte // PktCkptData: the encoded PESnapshot
}

// CkptDoneMsg tells a PE's parent in the tree over every PE that the PEs
// of its subtree committed Epoch: it goes up once the PE and its
// children's subtrees did, so PE 0 hears from its children alone.
type CkptDoneMsg struct {
	Epoch uint64
	Bytes uint64 // the subtree's snapshots, in all
	// Done is, for each PE of the subtree, what it wrote and measured.
	Done []PECommit
}

// PECommit is one PE's end of a checkpoint.
type PECommit struct {
	PE   int32
	File FileRecord // with a checkpoint directory: the file it wrote
	Err  string     `msgpack:",omitempty"` // writing to the checkpoint directory failed
	// Volume is the payload bytes the PE sent each PE since its last
	// commit (with Options.Regroup or Recluster)
	Volume []uint64 `msgpack:",omitempty"`
}

var tCkptStart, tCkptTake, tCkptPacket, tCkptDone, tRestore, tRestored, tStranded uint32

func init() {
	tStranded = RegisterMsgpackType[*StrandedMsg]("mgr.stranded")
	tRestore = RegisterMsgpackType[*RestoreMsg]("mgr.restore")
	tRestored = RegisterMsgpackType[*RestoredMsg]("mgr.restored")
	tCkptStart = RegisterMsgpackType[*CkptStartMsg]("mgr.ckptStart")
	tCkptTake = RegisterMsgpackType[*CkptTakeMsg]("mgr.ckptTake")
	tCkptPacket = RegisterMsgpackType[*CkptPacketMsg]("mgr.ckptPacket")
	tCkptDone = RegisterMsgpackType[*CkptDoneMsg]("mgr.ckptDone")
}

// ckptState is a PE's side of checkpointing; PE 0 also coordinates.
type ckptState struct {
	ck     *ftlayer.Checkpointer
	epoch  uint64 // PE 0: the epoch in progress (0: none)
	last   uint64 // PE 0: the last epoch started
	start  time.Time
	cb     Callback
	queued []Callback // PE 0: checkpoints asked for while one runs

	bytes   uint64
	files   []FileRecord // PE 0: each PE's file of the epoch
	errs    []string
	pending []pe.Envelope // packets of an epoch this PE has not begun yet
	// lastSize: the size of this PE's last encoded snapshot
	lastSize int
	// PE 0, in a restarted run
	restored int
	resume   *Callback
	started  bool // the PEs started the run again (RestoredMsg.Start)
	// PE 0: snapshots are being taken (from the epoch's quiet moment to
	// its commit): no moment is quiet meanwhile (qdRoot.reply)
	taking bool
	// with Options.Regroup: the teams the epoch in progress puts the PEs
	// in (every PE), the volume rows the PEs reported with their last
	// commit (PE 0)
	nextTeams *ftlayer.Teams
	rows      [][]uint64
	// with Options.Recluster: the dendrogram the epoch in progress
	// brought (every PE)
	nextClusters *mcml.Dendrogram
	// up is the commits of this PE's subtree gathered so far
	up ckptGather
}

// ckptGather merges the commits of a PE's subtree of the tree over every
// PE for one epoch: its own and each child's subtree's.
type ckptGather struct {
	epoch uint64
	in    subtreeIn
	msg   CkptDoneMsg
}

// StartCheckpoint asks for a coordinated checkpoint; cb receives
// struct{}{} once it is committed on every PE.
func (m *Manager) StartCheckpoint(cb Callback) {
	m.sendSys(0, tCkptStart, &CkptStartMsg{Callback: cb})
}

func (m *Manager) checkpointer() *ftlayer.Checkpointer {
	if m.ckpt.ck == nil {
		m.ckpt.ck = ftlayer.NewCheckpointer(int32(m.Me()), m.Buddies(), m.everyPE(), &ftlayer.Snapshot{Owner: int32(m.Me())})
	}
	return m.ckpt.ck
}

func (m *Manager) onCkptStart(msg *CkptStartMsg) {
	c := &m.ckpt
	if c.epoch != 0 {
		c.queued = append(c.queued, msg.Callback)
		return
	}
	c.last++
	c.epoch, c.cb, c.bytes, c.errs, c.start = c.last, msg.Callback, 0, nil, time.Now()
	c.files = make([]FileRecord, m.NumPEs())
	// Snapshots are taken once nothing is in flight anywhere — the
	// program's messages (it asked at a barrier) but also the runtime's
	// own: a section still being set up, a location notice, a count.
	m.StartQD(ckptQDTag | c.epoch)
}

// ckptQDTag marks the quiescence detections checkpoints wait for (the
// program's own tags count up from 1).
const ckptQDTag = uint64(1) << 63

// ckptQuiescent: the run is quiescent; every PE takes its snapshot.
func (m *Manager) ckptQuiescent(epoch uint64) {
	if epoch != m.ckpt.epoch {
		return
	}
	if !m.host.CheckpointStarting(m, epoch) {
		m.StartQD(ckptQDTag | epoch)
		return
	}
	m.ckpt.taking = true
	take := &CkptTakeMsg{Epoch: epoch}
	if m.opt.Regroup != nil && m.ckpt.rows != nil {
		of, err := m.opt.Regroup(m.ckpt.rows)
		if err != nil {
			m.Fail(fmt.Errorf("checkpoint %d: choosing teams: %w", epoch, err))
			return
		}
		take.Teams = of
	}
	if m.opt.Recluster != nil && m.ckpt.rows != nil {
		joins, err := m.opt.Recluster(m.ckpt.rows)
		if err != nil {
			m.Fail(fmt.Errorf("checkpoint %d: clustering the PEs: %w", epoch, err))
			return
		}
		take.Clusters = joins
	}
	m.ckpt.rows = nil
	// down the tree over every PE, from PE 0 itself (onCkptTake). A PE
	// lost while snapshots are taken rolls every PE back to the last
	// committed checkpoint, so a relay lost with its subtree's take is
	// not waited for.
	m.sendSys(m.Me(), tCkptTake, take)
}

func (m *Manager) onCkptTake(msg *CkptTakeMsg, via *pe.FTHeader) {
	m.relayDown(tCkptTake, via, func() any { cp := *msg; return &cp })
	m.PE.RecordPhase(fmt.Sprintf("checkpoint %d", msg.Epoch), true)
	m.ckpt.nextTeams, m.ckpt.nextClusters = nil, nil
	if msg.Clusters != nil {
		d, err := mcml.FromJoins(m.NumPEs(), msg.Clusters)
		if err != nil {
			m.Fail(fmt.Errorf("checkpoint %d: PE %d: the PEs' clusters: %w", msg.Epoch, m.Me(), err))
			return
		}
		m.ckpt.nextClusters = d
	}
	if msg.Teams != nil {
		t, err := ftlayer.TeamsOf(msg.Teams)
		var b ftlayer.Buddies
		if err == nil {
			b, err = ftlayer.TeamBuddies(t)
		}
		if err != nil {
			m.Fail(fmt.Errorf("checkpoint %d: PE %d: the teams chosen: %w", msg.Epoch, m.Me(), err))
			return
		}
		// the copy goes to the new pair's holder: after the commit, a
		// failure recovers under the new teams
		m.checkpointer().Regroup(b)
		m.ckpt.nextTeams = &t
	}
	snap, err := m.Snapshot(msg.Epoch)
	if err != nil {
		m.Fail(fmt.Errorf("checkpoint %d: %w", msg.Epoch, err))
		return
	}
	// From here until the commit the hook holds what arrives: where the
	// program resumes among its receptions must be where a restart from
	// this snapshot resumes.
	ctr := m.ft.Prepare()
	snap.FT = &ctr
	b, err := m.encodeSnapshot(snap)
	if err != nil {
		m.Fail(fmt.Errorf("checkpoint %d: PE %d: encoding its snapshot: %w", msg.Epoch, m.Me(), err))
		return
	}
	m.ckptActions(m.checkpointer().Begin(msg.Epoch, &ftlayer.Snapshot{App: b}))
	// a buddy's data may have come first
	pending := m.ckpt.pending
	m.ckpt.pending = nil
	for i := range pending {
		m.onCkptPacket(&pending[i])
	}
}

// encodeSnapshot encodes snap with msgpack into a buffer a little larger
// than this PE's last snapshot: they are about the same size each time,
// and growing the buffer by doubling from nothing was a third of LeanMD's
// allocation.
func (m *Manager) encodeSnapshot(snap *PESnapshot) ([]byte, error) {
	buf := bytes.NewBuffer(make([]byte, 0, m.ckpt.lastSize+m.ckpt.lastSize/8))
	enc := msgpack.GetEncoder()
	enc.Reset(buf)
	err := enc.Encode(snap)
	msgpack.PutEncoder(enc)
	if err != nil {
		return nil, err
	}
	m.ckpt.lastSize = buf.Len()
	return buf.Bytes(), nil
}

func (m *Manager) onCkptPacket(env *pe.Envelope) {
	msg := env.Payload.(*CkptPacketMsg)
	ck := m.checkpointer()
	if !ck.InProgress() && msg.Epoch > ck.LastCommitted() {
		m.ckpt.pending = append(m.ckpt.pending, *env) // before this PE's CkptTake
		return
	}
	p := &ftlayer.Packet{Kind: msg.Kind, From: int32(env.Src), To: int32(m.Me()), Ckpt: &ftlayer.CkptMsg{Epoch: msg.Epoch, Owner: msg.Owner}}
	if msg.Kind == ftlayer.PktCkptData {
		p.Ckpt.Snap = &ftlayer.Snapshot{Owner: msg.Owner, Epoch: msg.Epoch, App: msg.App}
	}
	acts, err := ck.Receive(p)
	if err != nil {
		m.Fail(fmt.Errorf("checkpoint %d: %w", msg.Epoch, err))
		return
	}
	m.ckptActions(acts)
}

// ckptActions carries out what the Checkpointer asks for.
func (m *Manager) ckptActions(acts []ftlayer.Action) {
	for _, a := range acts {
		switch a.Kind {
		case ftlayer.ActSend:
			p := a.Packet
			msg := &CkptPacketMsg{Kind: p.Kind, Epoch: p.Ckpt.Epoch, Owner: p.Ckpt.Owner}
			if p.Ckpt.Snap != nil {
				msg.Owner, msg.App = p.Ckpt.Snap.Owner, p.Ckpt.Snap.App
			}
			m.sendSys(int(p.To), tCkptPacket, msg)
		case ftlayer.ActCommitted:
			m.committed()
		}
	}
}

// committed: this PE's snapshot of the epoch is committed (held here and
// by the buddy); write it to the checkpoint directory and tell PE 0.
func (m *Manager) committed() {
	m.PE.RecordPhase(fmt.Sprintf("checkpoint %d", m.checkpointer().LastCommitted()), false)
	m.ft.Checkpoint()
	clear(m.verified) // a recovery re-executes from here on
	if m.dedup != nil {
		for _, c := range m.colls {
			for _, e := range c.local {
				e.FTNames = ftlayer.ElementNames{}
			}
		}
	}
	if t := m.ckpt.nextTeams; t != nil {
		m.ft.Regroup(*t)
	}
	if d := m.ckpt.nextClusters; d != nil {
		m.ft.Recluster(d)
		m.ckpt.nextClusters = nil
	}
	ck := m.checkpointer()
	own := ck.Committed(int32(m.Me()))
	mine := PECommit{PE: int32(m.Me())}
	if m.measures() {
		mine.Volume = m.ft.TakeVolume()
		if mine.Volume == nil {
			mine.Volume = make([]uint64, m.NumPEs()) // measured: nothing sent
		}
	}
	if dir := m.opt.CheckpointDir; dir != "" {
		var err error
		if mine.File, err = writeSnapshot(dir, m.Me(), own.Epoch, own.App); err != nil {
			mine.Err = err.Error()
		}
	}
	m.ckptGathered(&CkptDoneMsg{Epoch: ck.LastCommitted(), Bytes: uint64(len(own.App)), Done: []PECommit{mine}}, true)
}

func (m *Manager) onCkptDone(env *pe.Envelope) {
	m.ckptGathered(env.Payload.(*CkptDoneMsg), false)
}

// ckptGathered merges this PE's commit (own) or a tree child's subtree's
// into what goes up: once it has its own and its children's, the
// subtree's goes to its parent in the tree over every PE; on PE 0 the
// checkpoint is complete.
func (m *Manager) ckptGathered(msg *CkptDoneMsg, own bool) {
	g := &m.ckpt.up
	if g.epoch != msg.Epoch {
		// a new epoch (one checkpoint at a time: a rollback starts
		// every PE with a new manager)
		*g = ckptGather{epoch: msg.Epoch, msg: CkptDoneMsg{Epoch: msg.Epoch}}
	}
	g.msg.Bytes += msg.Bytes
	g.msg.Done = append(g.msg.Done, msg.Done...)
	if !g.in.add(m, own) {
		return
	}
	up := g.msg
	*g = ckptGather{epoch: msg.Epoch}
	if m.Me() != 0 {
		m.sendSys(m.everyPE().Parent(m.Me()), tCkptDone, &up)
		return
	}
	m.ckptComplete(&up)
}

// ckptComplete: every PE committed the epoch (PE 0).
func (m *Manager) ckptComplete(msg *CkptDoneMsg) {
	c := &m.ckpt
	if msg.Epoch != c.epoch {
		return
	}
	if len(msg.Done) != m.NumPEs() {
		m.Fail(fmt.Errorf("checkpoint %d: %d PEs reported their commit, not %d", c.epoch, len(msg.Done), m.NumPEs()))
		return
	}
	c.bytes += msg.Bytes
	for _, d := range msg.Done {
		if d.PE < 0 || int(d.PE) >= m.NumPEs() {
			m.Fail(fmt.Errorf("checkpoint %d: a commit of PE %d of %d", c.epoch, d.PE, m.NumPEs()))
			return
		}
		c.files[d.PE] = d.File
		if d.Volume != nil && m.measures() {
			if len(d.Volume) != m.NumPEs() {
				m.Fail(fmt.Errorf("checkpoint %d: PE %d reported its volume to %d PEs, not %d", c.epoch, d.PE, len(d.Volume), m.NumPEs()))
				return
			}
			if c.rows == nil {
				c.rows = make([][]uint64, m.NumPEs())
			}
			c.rows[d.PE] = d.Volume
		}
		if d.Err != "" {
			c.errs = append(c.errs, d.Err)
		}
	}
	if len(c.errs) > 0 {
		m.Fail(fmt.Errorf("checkpoint %d: %s", c.epoch, c.errs[0]))
		return
	}
	if dir := m.opt.CheckpointDir; dir != "" {
		// only the last complete checkpoint is kept
		if err := commitLatest(dir, c.epoch, c.files); err != nil {
			m.Fail(fmt.Errorf("checkpoint %d: %w", c.epoch, err))
			return
		}
	}
	m.Stats.Checkpoints++
	m.Stats.CheckpointBytes += c.bytes
	m.Stats.CheckpointNanos += uint64(time.Since(c.start))
	cb, epoch, teams := c.cb, c.epoch, c.nextTeams
	c.epoch, c.taking, c.nextTeams = 0, false, nil
	m.host.CheckpointCommitted(m, epoch, teams)
	m.DeliverCallback(cb, struct{}{})
	if len(c.queued) > 0 {
		next := c.queued[0]
		c.queued = c.queued[1:]
		m.onCkptStart(&CkptStartMsg{Callback: next})
	}
}

// Snapshot packs this PE's chares and their runtime records.
func (m *Manager) Snapshot(epoch uint64) (*PESnapshot, error) {
	s := &PESnapshot{Version: SnapshotVersion, PE: int32(m.Me()), NumPEs: int32(m.NumPEs()), Branching: int32(m.opt.Branching), Procs: int32(max(m.opt.Procs, 0)),
		Epoch: epoch, NextColl: m.nextColl, NextSec: m.nextSec, Sent: m.Sent, Processed: m.Processed}
	s.QDAsked = slices.Clone(m.qdAsked)
	var err error
	if s.Host, err = m.host.Records(m); err != nil {
		return nil, fmt.Errorf("PE %d: %w", m.Me(), err)
	}
	if m.Me() == 0 && m.ckpt.epoch == epoch {
		cb := m.ckpt.cb
		s.Resume = &cb
	}
	for _, id := range sortedKeys(m.colls) {
		c := m.colls[id]
		cs := CollSnapshot{CreateMsg: CreateMsg{Coll: c.ID, Kind: c.Kind, Type: c.Type, Name: c.Name, Bounds: c.Bounds, Map: c.Map,
			MapFn: c.MapFn, Sparse: c.Sparse, Migratable: c.Migratable, Creator: c.Creator}, DoneInserting: c.doneInserting,
			BcastNext: c.bcastNext, BcastDelivered: c.bcastDelivered, RedNext: c.red.NextReport(), LBSteps: c.lbSteps}
		if !c.red.Enabled() || len(c.homeBuf) > 0 || len(m.pendingColl[c.ID]) > 0 {
			return nil, fmt.Errorf("PE %d: %s is still being created or inserted into: checkpoint after DoneInserting", m.Me(), c.Name)
		}
		cs.RedLocal, cs.RedChildren = c.red.Counts(cs.RedNext)
		c.eachLoc(func(ix pe.Index, l loc) {
			if int(l.pe) != m.Me() && l.pe >= 0 {
				cs.Locs = append(cs.Locs, LocSnapshot{Index: coords(ix), PE: l.pe, Moves: l.moves})
			}
		})
		for _, e := range c.Locals() {
			state, err := m.host.Checkpoint(e)
			if err != nil {
				return nil, fmt.Errorf("PE %d: %s%v: %w", m.Me(), c.Name, e.Index, err)
			}
			es := ElemSnapshot{Index: coords(e.Index), RedHome: e.RedHome, RedNo: e.RedNo,
				Bcast: e.Bcast, Moves: e.Moves, Epoch: e.Epoch, State: state, Sends: e.Sends}
			es.Secs = e.sortedSecs()
			cs.Elements = append(cs.Elements, es)
		}
		s.Collections = append(s.Collections, cs)
	}
	for _, id := range sortedKeys(m.secRoots) {
		s.SecRoots = append(s.SecRoots, SecRoot{Sec: id, Root: int32(m.secRoots[id])})
	}
	for _, id := range sortedKeys(m.secAlias) {
		a := m.secAlias[id]
		s.SecAliases = append(s.SecAliases, SecAlias{Old: id, New: a.to, First: a.first})
	}
	for _, id := range sortedKeys(m.secs) {
		sec := m.secs[id]
		s.Sections = append(s.Sections, *sec.setup)
		s.SecRounds = append(s.SecRounds, sec.red.NextReport())
	}
	if len(m.building) > 0 {
		return nil, fmt.Errorf("PE %d: a section is still being set up", m.Me())
	}
	return s, nil
}

func sortedKeys[K cmp.Ordered, V any](m map[K]V) []K {
	ks := make([]K, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

func coords(ix pe.Index) []int32 { return slices.Clone(ix.C[:ix.Dims]) }

// Restore rebuilds this PE from its snapshot (in a new run, every PE from
// its own): collections with their reduction rounds and counts, locations,
// elements (Host.Restore), and sections, set up again as they were. The
// run resumes once every PE restored (RestoredMsg to PE 0, which delivers
// the checkpoint's callback).
func (m *Manager) Restore(s *PESnapshot) error {
	if err := m.restore(s); err != nil {
		return err
	}
	// the quiescence detections the checkpoint's run waited for — the
	// end-of-run one among them, which a restored run's main, whose
	// constructor returned long ago, never asks for again
	for _, tag := range s.QDAsked {
		m.StartQD(tag)
	}
	m.sendSys(0, tRestored, &RestoredMsg{Resume: s.Resume})
	return nil
}

// restore rebuilds this PE from its snapshot, sending nothing.
func (m *Manager) restore(s *PESnapshot) error {
	if int(s.PE) != m.Me() || int(s.NumPEs) != m.NumPEs() {
		return fmt.Errorf("PE %d of %d: given the snapshot of PE %d of %d", m.Me(), m.NumPEs(), s.PE, s.NumPEs)
	}
	m.nextColl, m.nextSec = s.NextColl, s.NextSec
	if err := m.host.RestoreRecords(m, s.Host); err != nil {
		return err
	}
	for _, a := range s.SecAliases {
		m.addSecAlias(a.Old, a.New, a.First)
	}
	for _, r := range s.SecRoots {
		if m.secRoots == nil {
			m.secRoots = map[uint64]int{}
		}
		m.secRoots[r.Sec] = int(r.Root)
	}
	for i := range s.Collections {
		cs := &s.Collections[i]
		c := m.defineCollection(&cs.CreateMsg)
		if c == nil {
			return fmt.Errorf("collection %s (%d) defined twice", cs.Name, cs.Coll)
		}
		c.doneInserting, c.countsSent = cs.DoneInserting, true
		c.bcastNext, c.bcastDelivered, c.lbSteps = cs.BcastNext, cs.BcastDelivered, cs.LBSteps
		for _, l := range cs.Locs {
			c.setLoc(pe.IndexOf(l.Index), loc{pe: l.PE, moves: l.Moves})
		}
		for _, es := range cs.Elements {
			e := &Element{Coll: c, Index: pe.IndexOf(es.Index), RedHome: es.RedHome, RedNo: es.RedNo, Bcast: es.Bcast,
				Moves: es.Moves, Epoch: es.Epoch, Sends: es.Sends, migrateTo: -1}
			c.put(e)
			c.setLoc(e.Index, loc{pe: int32(m.Me()), moves: e.Moves})
			if err := m.host.Restore(m, e, es.State); err != nil {
				return fmt.Errorf("%s%v: %w", c.Name, e.Index, err)
			}
		}
		m.acts = c.red.Restart(cs.RedNext, cs.RedLocal, cs.RedChildren, m.acts[:0])
		m.runActs(c, nil)
		// what the hook's restart said complete came before the
		// collection was here again (a PE rolled back without failing
		// knows which of its reductions completed: found by ftsim, an
		// inner node waiting for a partial its failed child was told it
		// need not send again)
		m.applyComplete(uint64(cs.Coll))
	}
	for i := range s.Sections {
		m.onSection(&s.Sections[i])
		sec := m.secs[s.Sections[i].Sec]
		if sec == nil {
			return fmt.Errorf("section %d could not be set up again", s.Sections[i].Sec)
		}
		local, children := sec.red.Counts(0)
		m.acts = sec.red.Restart(s.SecRounds[i], local, children, m.acts[:0])
		m.runActs(m.coll(sec.Coll), sec)
	}
	// memberships as they were (rounds and partial counts included)
	for _, cs := range s.Collections {
		c := m.coll(cs.Coll)
		for _, es := range cs.Elements {
			e := c.get(pe.IndexOf(es.Index))
			for _, sm := range es.Secs {
				ms := sm
				if e.Secs == nil {
					e.Secs = map[uint64]*SecMembership{}
				}
				e.Secs[sm.Sec] = &ms
			}
		}
	}
	return nil
}

// RestoredMsg tells PE 0 that a PE restored its snapshot; PE 0's carries
// the callback to resume with. Start says the PE started the run again
// instead (a rollback to the start): nothing resumes then, but the
// rollback is over once every PE did.
type RestoredMsg struct {
	Resume *Callback
	Start  bool `msgpack:",omitempty"`
}

func (m *Manager) onRestored(msg *RestoredMsg) {
	c := &m.ckpt
	c.restored++
	if msg.Resume != nil {
		c.resume = msg.Resume
	}
	c.started = c.started || msg.Start
	if c.restored != m.NumPEs() {
		return
	}
	switch {
	case c.resume != nil:
		m.Stats.Restarts++
		m.host.Restored(m)
		m.DeliverCallback(*c.resume, struct{}{})
	case c.started:
		m.host.Restored(m)
	}
}

// RestoreMsg asks a PE to rebuild itself from Own, its encoded snapshot,
// and to hold Prev, its neighbour's, as the checkpoint's second copy.
// From says where the snapshots were found (a file, a rollback), for
// errors.
type RestoreMsg struct {
	Own, Prev []byte
	From      string `msgpack:",omitempty"`
}

// RestoreType is the message type of RestoreMsg.
func RestoreType() uint32 { return tRestore }

func (m *Manager) onRestore(msg *RestoreMsg) {
	s, err := DecodeSnapshot(msg.Own)
	if err == nil {
		err = m.Restore(s)
	}
	if err != nil {
		m.Fail(fmt.Errorf("restart from %s: PE %d: %w", restoreSource(msg), m.Me(), err))
		return
	}
	me := int32(m.Me())
	own := &ftlayer.Snapshot{Owner: me, Epoch: s.Epoch, App: msg.Own}
	var held *ftlayer.Snapshot
	if msg.Prev != nil {
		held = &ftlayer.Snapshot{Owner: m.Buddies().Held(me), Epoch: s.Epoch, App: msg.Prev}
	}
	m.ckpt.ck = ftlayer.RestoredCheckpointer(me, m.Buddies(), m.everyPE(), own, held)
	m.ckpt.last = s.Epoch
	m.rec.base = s.Epoch
}

// restoreSource names where a RestoreMsg's snapshot came from.
func restoreSource(msg *RestoreMsg) string {
	if msg.From == "" {
		return "a checkpoint"
	}
	return msg.From
}

// DecodeSnapshot reads a PESnapshot (a checkpoint file's payload) and
// checks everything it holds on its own (see CheckCheckpoint for a whole
// checkpoint): the error names what is wrong and where.
func DecodeSnapshot(b []byte) (*PESnapshot, error) {
	// the version first: another version's fields are not this one's
	var v struct{ Version uint8 }
	if err := pe.UnmarshalMsgpack(b, &v); err == nil && v.Version != SnapshotVersion && v.Version != 0 {
		return nil, fmt.Errorf("checkpoint version %d, this build reads %d", v.Version, SnapshotVersion)
	}
	var s PESnapshot
	if err := strictUnmarshal(b, &s); err != nil {
		return nil, fmt.Errorf("not a charmgo checkpoint (%d bytes): %w", len(b), err)
	}
	if err := checkSnapshot(&s); err != nil {
		return nil, err
	}
	return &s, nil
}

// measures reports whether the PEs report the volume they sent each PE at
// each commit (teams or clusters chosen from it).
func (m *Manager) measures() bool { return m.opt.Regroup != nil || m.opt.Recluster != nil }

// ReducesHere reports whether the PE's subtree of the collection's
// reduction tree held contributors (or the PE elements) at the
// snapshot: a PE whose subtree had none completes no round, and its
// RedNext lags the collection's (it catches up once an element
// arrives), so only the others' say where the collection's reductions
// are.
func (cs *CollSnapshot) ReducesHere() bool {
	if cs.RedLocal > 0 || len(cs.Elements) > 0 {
		return true
	}
	for _, n := range cs.RedChildren {
		if n > 0 {
			return true
		}
	}
	return false
}
