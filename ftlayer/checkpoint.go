package ftlayer

import (
	"fmt"
	"slices"
)

// Snapshot is one PE's checkpoint: its application state (opaque bytes)
// and its protocol's counters.
type Snapshot struct {
	Owner int32
	Epoch uint64
	App   []byte
	Proto Counters
}

// CkptMsg is a message of the coordinated checkpoint protocol.
type CkptMsg struct {
	Epoch uint64
	Snap  *Snapshot // PktCkptData
	Owner int32     // PktCkptData: whose snapshot it is
}

const (
	PktCkptData   PacketKind = iota + 10 // a PE's snapshot, to its buddy
	PktCkptStored                        // a subtree's PEs stored the copies they hold (to the parent)
	PktCkptCommit                        // the coordinator commits the epoch (down the tree)
)

// PETree is the spanning tree over every PE, rooted at PE 0, along which a
// checkpoint's notices travel (manager's tree over every PE is one).
type PETree interface {
	Parent(pe int) int
	Children(pe int, dst []int) []int
}

// ActCommitted tells the host the epoch is committed on this PE: it drops
// the protocol's logs (Protocol.Checkpoint) and resumes the application.
const ActCommitted ActionKind = 10

// Checkpointer is one PE's part of the coordinated, double in-memory
// checkpoint: it keeps its own snapshot and its buddy's, in two phases —
// collect (each snapshot reaches the owner's buddy; a PE that stored the
// copy it holds, and whose tree children said the same of their
// subtrees, tells its parent) and commit (the coordinator, PE 0, the
// tree's root, tells its children, which tell theirs). A failure before
// the coordinator decided aborts the epoch: everyone keeps the last
// committed checkpoint, and no log is dropped before a commit. Once it
// decided, the epoch stands, and a PE that fails restarts from the new
// snapshot its buddy holds. Each PE holds one copy besides its own (the
// pairs are a rotation), so a subtree is stored once each of its PEs
// stored one; every PE hears from its children alone.
type Checkpointer struct {
	me, n     int32
	parent    int32   // in the tree over every PE (-1: the coordinator)
	children  []int32 // in the tree over every PE
	buddies   Buddies
	next      *Buddies            // the epoch in progress pairs PEs anew (Regroup)
	committed map[int32]*Snapshot // own and the buddy-owned copies this PE holds
	tentative map[int32]*Snapshot // this epoch's
	epoch     uint64              // in progress (0: none)
	last      uint64              // last committed
	held      bool                // this epoch: this PE stored the copy it holds
	kidsDone  []int32             // this epoch: the children whose subtrees stored theirs
	decided   uint64              // coordinator: last epoch it committed
	Bytes     uint64              // snapshot bytes this PE sent or stored, all epochs
}

// NewCheckpointer makes PE me's checkpointer; initial is its state at the
// start (epoch 0, held by itself and by its buddy's checkpointer through
// Hold). tree is the spanning tree over every PE (nil: every PE a child
// of PE 0).
func NewCheckpointer(me int32, b Buddies, tree PETree, initial *Snapshot) *Checkpointer {
	c := &Checkpointer{me: me, n: b.N, parent: -1, buddies: b, committed: map[int32]*Snapshot{}, tentative: map[int32]*Snapshot{}}
	switch {
	case tree != nil:
		if me != 0 {
			c.parent = int32(tree.Parent(int(me)))
		}
		for _, k := range tree.Children(int(me), nil) {
			c.children = append(c.children, int32(k))
		}
	case me != 0:
		c.parent = 0
	default:
		for k := int32(1); k < b.N; k++ {
			c.children = append(c.children, k)
		}
	}
	c.committed[me] = initial
	return c
}

// RestoredCheckpointer makes PE me's checkpointer in a run rolled back or
// restarted to own's epoch: it holds own and held (its neighbour's copy)
// as committed, and continues from that epoch.
func RestoredCheckpointer(me int32, b Buddies, tree PETree, own, held *Snapshot) *Checkpointer {
	c := NewCheckpointer(me, b, tree, own)
	if held != nil {
		c.Hold(held)
	}
	c.last = own.Epoch
	return c
}

// Buddies pairs every PE with the one that holds the second copy of its
// checkpoint, Stride PEs on (modulo N): with a process per Stride PEs,
// the copy lives in another process, so that losing a process loses no
// snapshot. In one process Stride is 1. Teams that are not runs of PEs
// (TeamBuddies) pair PEs Stride apart in an order of their own.
type Buddies struct {
	N, Stride int32
	order     []int32 // nil: 0..N-1
	pos       []int32 // each PE's place in order
}

// NewBuddies pairs n PEs stride apart (1 if stride does not pair distinct
// PEs).
func NewBuddies(n, stride int) Buddies {
	if stride < 1 || stride%n == 0 {
		stride = 1
	}
	return Buddies{N: int32(n), Stride: int32(stride % n)}
}

// TeamBuddies pairs the PEs so that each PE's copy lives in another team:
// the PEs in team order, each paired with the one the largest team's size
// on. It fails if a team holds more than half the PEs (then some copy
// would stay in its owner's team).
func TeamBuddies(t Teams) (Buddies, error) {
	n := len(t.of)
	order := make([]int32, 0, n)
	for k := range t.K() {
		order = append(order, t.Team(k)...)
	}
	pos := make([]int32, n)
	for i, p := range order {
		pos[p] = int32(i)
	}
	b := Buddies{N: int32(n), Stride: int32(t.Largest() % max(n, 1)), order: order, pos: pos}
	if err := b.Apart(t); err != nil {
		return Buddies{}, err
	}
	return b, nil
}

// Apart checks that every PE's copy is held in another team than its
// own, which fails with it.
func (b Buddies) Apart(t Teams) error {
	for p := int32(0); p < b.N; p++ {
		if t.Same(p, b.Of(p)) {
			return fmt.Errorf("teams %v on %d PEs: PE %d's checkpoint copy would be held in its own team, which fails with it (no team may hold more than half the PEs)", t, b.N, p)
		}
	}
	return nil
}

// Of is the PE that holds me's second copy.
func (b Buddies) Of(me int32) int32 {
	if b.order != nil {
		return b.order[(b.pos[me]+b.Stride)%b.N]
	}
	return (me + b.Stride) % b.N
}

// Held is the PE whose second copy me holds.
func (b Buddies) Held(me int32) int32 {
	if b.order != nil {
		return b.order[(b.pos[me]-b.Stride+b.N)%b.N]
	}
	return (me - b.Stride + b.N) % b.N
}

// Regroup pairs the PEs as b from the next epoch on (teams chosen
// anew): call it before Begin; the epoch's commit makes it so, its abort
// forgets it.
func (c *Checkpointer) Regroup(b Buddies) { c.next = &b }

// Buddies is how the last committed epoch paired the PEs.
func (c *Checkpointer) Buddies() Buddies { return c.buddies }

// Hold stores another PE's committed snapshot (the initial one, or a copy
// re-sent after a restart).
func (c *Checkpointer) Hold(s *Snapshot) { c.committed[s.Owner] = s }

// Committed returns the committed copy of owner's snapshot this PE holds.
func (c *Checkpointer) Committed(owner int32) *Snapshot { return c.committed[owner] }

// Tentative returns this epoch's copy of owner's snapshot, if held.
func (c *Checkpointer) Tentative(owner int32) *Snapshot { return c.tentative[owner] }

// InProgress reports whether an epoch is being collected.
func (c *Checkpointer) InProgress() bool { return c.epoch != 0 }

// LastCommitted is the last epoch this PE committed.
func (c *Checkpointer) LastCommitted() uint64 { return c.last }

// Decided is the last epoch the coordinator committed (PE 0 only).
func (c *Checkpointer) Decided() uint64 { return c.decided }

// Begin starts epoch e with this PE's snapshot.
func (c *Checkpointer) Begin(e uint64, s *Snapshot) []Action {
	c.epoch = e
	s.Owner, s.Epoch = c.me, e
	c.tentative[c.me] = s
	c.held, c.kidsDone = false, c.kidsDone[:0]
	c.Bytes += uint64(len(s.App))
	b := c.buddies.Of(c.me)
	if c.next != nil {
		b = c.next.Of(c.me)
	}
	return []Action{{Kind: ActSend, Packet: Packet{Kind: PktCkptData, From: c.me, To: b, Ckpt: &CkptMsg{Epoch: e, Snap: s}}}}
}

// Receive handles a checkpoint packet.
func (c *Checkpointer) Receive(p *Packet) ([]Action, error) {
	m := p.Ckpt
	if m == nil {
		return nil, fmt.Errorf("PE %d: checkpoint packet without its message", c.me)
	}
	if m.Epoch != c.epoch {
		return nil, nil // from an aborted epoch
	}
	switch p.Kind {
	case PktCkptData:
		if m.Snap == nil {
			return nil, fmt.Errorf("PE %d: checkpoint %d: a snapshot packet from PE %d without its snapshot", c.me, m.Epoch, p.From)
		}
		if want := c.heldOwner(); m.Snap.Owner != want {
			return nil, fmt.Errorf("PE %d: checkpoint %d: given PE %d's snapshot, it holds PE %d's", c.me, m.Epoch, m.Snap.Owner, want)
		}
		c.tentative[m.Snap.Owner] = m.Snap
		c.Bytes += uint64(len(m.Snap.App))
		c.held = true
		return c.subtreeStored(), nil
	case PktCkptStored:
		if !slices.Contains(c.children, p.From) {
			return nil, fmt.Errorf("PE %d: checkpoint %d: a stored notice from PE %d, not a child of its in the tree over every PE", c.me, m.Epoch, p.From)
		}
		if slices.Contains(c.kidsDone, p.From) {
			return nil, nil // said twice
		}
		c.kidsDone = append(c.kidsDone, p.From)
		return c.subtreeStored(), nil
	case PktCkptCommit:
		if from := c.parent; from < 0 && p.From != c.me || from >= 0 && p.From != from {
			return nil, fmt.Errorf("PE %d: checkpoint %d: a commit from PE %d, not its parent in the tree over every PE", c.me, m.Epoch, p.From)
		}
		out := make([]Action, 0, len(c.children)+1)
		for _, k := range c.children {
			out = append(out, Action{Kind: ActSend, Packet: Packet{Kind: PktCkptCommit, From: c.me, To: k, Ckpt: &CkptMsg{Epoch: m.Epoch}}})
		}
		if c.next != nil {
			// paired anew: the copies of the old pairs go
			c.buddies, c.next = *c.next, nil
			clear(c.committed)
		}
		for owner, s := range c.tentative {
			c.committed[owner] = s
		}
		c.tentative = map[int32]*Snapshot{}
		c.last, c.epoch = m.Epoch, 0
		return append(out, Action{Kind: ActCommitted}), nil
	}
	return nil, fmt.Errorf("PE %d: unknown checkpoint packet kind %d", c.me, p.Kind)
}

// heldOwner is the PE whose copy this PE holds in the epoch in progress.
func (c *Checkpointer) heldOwner() int32 {
	if c.next != nil {
		return c.next.Held(c.me)
	}
	return c.buddies.Held(c.me)
}

// subtreeStored: once this PE stored the copy it holds and its children
// said their subtrees did, it tells its parent; the coordinator then
// commits the epoch (to itself first, which passes it down the tree).
func (c *Checkpointer) subtreeStored() []Action {
	if !c.held || len(c.kidsDone) < len(c.children) {
		return nil
	}
	if c.parent >= 0 {
		return []Action{{Kind: ActSend, Packet: Packet{Kind: PktCkptStored, From: c.me, To: c.parent, Ckpt: &CkptMsg{Epoch: c.epoch}}}}
	}
	c.decided = c.epoch
	return []Action{{Kind: ActSend, Packet: Packet{Kind: PktCkptCommit, From: c.me, To: c.me, Ckpt: &CkptMsg{Epoch: c.epoch}}}}
}

// Abort drops an epoch in progress (a PE failed before the commit was
// decided): the last committed checkpoint stays.
func (c *Checkpointer) Abort() {
	c.epoch, c.next = 0, nil
	c.tentative = map[int32]*Snapshot{}
	c.held, c.kidsDone = false, c.kidsDone[:0]
}
