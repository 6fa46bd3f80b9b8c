// Package fttest is a deterministic simulator for ftlayer's protocols: N
// PEs run a small message-driven program through a protocol over a seeded
// network (FIFO per channel, random interleaving across channels). It can
// crash any PE before any event, then checks that the run ends in exactly
// the failure-free final state and that every message was executed exactly
// once in the surviving history.
package fttest

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"

	"github.com/charmgo/charmgo/ftlayer"
)

// Send is what a program wants sent: a message To a PE (KindP2P), a
// multicast to Group (this PE must be its root), or this PE's
// contribution to Group's next reduction.
type Send struct {
	Kind    ftlayer.MsgKind
	To      int32
	Group   uint64
	Payload []byte
}

// Input is what a program is handed: a message From a PE, a multicast of
// Group (From is its root), or the result of Group's reduction Num.
type Input struct {
	Kind    ftlayer.MsgKind
	From    int32
	Group   uint64
	Num     uint64
	Payload []byte
}

// Program is a deterministic message-driven program: what a PE does at
// start and on each message, as a function of its state. Its state must be
// a value (copied on checkpoint and restart).
type Program interface {
	Name() string
	// Result is the part of a final state that does not depend on the
	// order of receptions (nil if everything does): it must equal the
	// failure-free run's.
	Result(st State) any
	Init(pe int32, n int) State
	Start(pe int32, st *State) []Send
	Handle(pe int32, st *State, in Input) []Send
}

// Collective is implemented by programs that multicast and reduce: their
// groups and the reduction's fold.
type Collective interface {
	Groups(n int) *ftlayer.Groups
	Combine(g uint64, a, b []byte) []byte
}

// State is a PE's application state. H hashes every reception in order, so
// a replay in another order gives another state.
type State struct {
	H     uint64
	Count uint64
	Vals  [8]int64
	Step  int64
	Got   int64
}

func mix(h uint64, v uint64) uint64 {
	h ^= v + 0x9e3779b97f4a7c15 + h<<6 + h>>2
	h *= 0xff51afd7ed558ccd
	return h ^ h>>33
}

// Crash fails PE PE just before event number At (0: before the first),
// in the order the crashes are listed, or at or after event At as soon as
//   - With When set: PE Of's recovery is in that phase ("collecting"
//     determinants, "replaying") or has just ended ("recovered");
//   - With After set: PE Of has just done that, for reduction or
//     multicast Num of Group: "mcast" (delivered the multicast, and
//     forwarded it), "contrib" (received a contribution), "red" (the
//     root delivered the result), "ack" (received CAMEL's completion
//     notice).
type Crash struct {
	At    int
	PE    int32
	When  string
	After string
	Group uint64
	Num   uint64
	Of    int32
	// Lose drops the crashed PE's packets still in the network: nil
	// none, or those to these PEs (LoseAll: all of them). A PE that
	// fails in the middle of sending leaves some copies unsent.
	Lose    []int32
	LoseAll bool
	// Optional: if the moment never comes in this run (a replay can be
	// over within one event), the crash is skipped instead of an error.
	Optional bool
}

// Result is how a simulated run ended.
type Result struct {
	States    []State
	Events    int
	Delivered [][]Delivery         // per PE, final incarnation, in delivery order
	Sent      []map[sentKey]uint64 // per PE, final incarnation: message -> payload hash
	Stats     []ftlayer.Stats      // per PE, summed over its incarnations
	Err       error
	// Checkpoints begun, Aborted by a failure, Failures injected, PEs
	// RolledBack (checkpoint/restart rolls back every PE).
	Checkpoints, Aborted, Failures, RolledBack int
	// Packets counts application messages put on the network, by kind
	// (every hop of a collective, replays included).
	Packets [3]int
	Crashed []int // indices (in Sim.Crashes) of the crashes that happened
	results []any
	groups  *ftlayer.Groups
}

// Total sums every PE's statistics.
func (r Result) Total() ftlayer.Stats {
	var t ftlayer.Stats
	for _, s := range r.Stats {
		t.Add(s)
	}
	return t
}

// Delivery is one message executed by a PE: point to point (Sender, and
// its ssn as Num), a multicast (Group, Num) or a reduction's result at
// its root (Group, Num).
type Delivery struct {
	Kind   ftlayer.MsgKind
	Sender int32
	Group  uint64
	Num    uint64
	Hash   uint64 // of the payload
}

// sentKey names a message in its sender's history: point to point by
// ssn, a multicast by group and number.
type sentKey struct {
	kind  ftlayer.MsgKind
	group uint64
	num   uint64
}

func hashBytes(b []byte) uint64 {
	h := uint64(1469598103934665603)
	for _, c := range b {
		h = (h ^ uint64(c)) * 1099511628211
	}
	return h
}

// Sim runs one program over one protocol.
type Sim struct {
	N       int
	Seed    uint64
	Program Program
	// Protocol is the message-logging protocol (default SCMEL).
	Protocol ftlayer.Factory
	Crashes  []Crash
	// MaxEvents bounds a run (a protocol bug must not hang the test).
	MaxEvents int
}

// Checkpointed is implemented by programs with coordinated checkpoints:
// Waiting says the PE reached a checkpoint point (with nothing of its in
// flight), Resume continues it once the checkpoint is committed.
type Checkpointed interface {
	Waiting(st State) bool
	Resume(pe int32, st *State) []Send
}

type pe struct {
	proto     ftlayer.Protocol
	ck        *ftlayer.Checkpointer
	st        State
	delivered []Delivery
	sent      map[sentKey]uint64
	retired   ftlayer.Stats // of its earlier incarnations
}

type runner struct {
	Sim
	rng           *rand.Rand
	pes           []*pe
	chans         map[[2]int32][]ftlayer.Packet
	live          [][2]int32 // channels with packets, in order
	res           Result
	epoch         uint64
	decided       uint64 // the last epoch the coordinator committed
	recovering    map[int32]bool
	wasRecovering map[int32]bool // recovered at least once
	err           error
	ckptOK        bool
	// hist[e][pe] is what pe had sent and executed when its snapshot of
	// epoch e was taken: a restart from that snapshot keeps that history.
	hist   map[uint64][]history
	groups *ftlayer.Groups
	obs    []observation // what the last event did
}

type observation struct {
	what  string
	pe    int32
	group uint64
	num   uint64
}

type history struct {
	sent      map[sentKey]uint64
	delivered []Delivery
}

func (p *pe) history() history {
	h := history{sent: make(map[sentKey]uint64, len(p.sent)), delivered: append([]Delivery(nil), p.delivered...)}
	for k, v := range p.sent {
		h.sent[k] = v
	}
	return h
}

// Run simulates the program and returns its end state.
func (s Sim) Run() Result {
	if s.Protocol == nil {
		s.Protocol = ftlayer.SCMELFactory{}
	}
	if s.MaxEvents == 0 {
		s.MaxEvents = 1_000_000
	}
	r := &runner{Sim: s, rng: rand.New(rand.NewPCG(s.Seed, 0x5eed)), chans: map[[2]int32][]ftlayer.Packet{}, recovering: map[int32]bool{}, wasRecovering: map[int32]bool{}, hist: map[uint64][]history{}}
	if c, ok := s.Program.(Collective); ok {
		r.groups = c.Groups(s.N)
		r.Protocol = WithCollectives(s.Protocol, ftlayer.Collectives{Groups: r.groups, Combine: c.Combine})
	}
	_, r.ckptOK = s.Program.(Checkpointed)
	r.pes = make([]*pe, s.N)
	for i := range r.pes {
		id := int32(i)
		p := &pe{proto: r.Protocol.New(id, s.N), st: s.Program.Init(id, s.N), sent: map[sentKey]uint64{}}
		p.ck = ftlayer.NewCheckpointer(id, s.N, &ftlayer.Snapshot{Owner: id, App: encodeState(p.st), Proto: p.proto.Snapshot()})
		r.pes[i] = p
	}
	for i := range r.pes { // the initial checkpoint's second copies
		r.pes[ftlayer.Buddy(int32(i), s.N)].ck.Hold(r.pes[i].ck.Committed(int32(i)))
	}
	for i := range r.pes {
		r.sends(int32(i), s.Program.Start(int32(i), &r.pes[i].st))
	}
	if r.err != nil {
		r.res.Err = r.err
		return s.finish(r.res, r.pes, r.groups)
	}
	crashes := append([]Crash(nil), s.Crashes...) // in the order given
	next := 0                                     // index of crashes[0] in s.Crashes
	for r.err == nil {
		for len(crashes) > 0 && crashes[0].At <= r.res.Events && r.err == nil && r.due(crashes[0]) {
			r.lose(crashes[0])
			r.crash(crashes[0].PE)
			r.res.Crashed = append(r.res.Crashed, next)
			crashes, next = crashes[1:], next+1
		}
		if r.err != nil {
			break
		}
		r.maybeCheckpoint()
		live := r.live
		if len(live) == 0 {
			if len(crashes) > 0 && crashes[0].When == "" && crashes[0].After == "" { // crashes scheduled after the end still happen
				r.res.Events = crashes[0].At
				continue
			}
			if len(crashes) > 0 && crashes[0].Optional {
				crashes, next = crashes[1:], next+1
				continue
			}
			if len(crashes) > 0 {
				r.err = fmt.Errorf("crash %+v: its moment never came", crashes[0])
			}
			break
		}
		if r.res.Events >= s.MaxEvents {
			r.err = fmt.Errorf("no end after %d events", r.res.Events)
			break
		}
		k := live[r.rng.IntN(len(live))]
		p := r.chans[k][0]
		r.chans[k] = r.chans[k][1:]
		r.sync(k)
		r.res.Events++
		r.obs = r.obs[:0]
		r.receive(&p)
	}
	if r.err == nil {
		for y := range r.recovering {
			r.err = fmt.Errorf("PE %d never finished recovering", y)
		}
	}
	r.res.Err = r.err
	return s.finish(r.res, r.pes, r.groups)
}

// WithCollectives returns factory f running its collectives over c.
func WithCollectives(f ftlayer.Factory, c ftlayer.Collectives) ftlayer.Factory {
	switch x := f.(type) {
	case ftlayer.SCMELFactory:
		x.Coll = c
		return x
	case ftlayer.CAMELFactory:
		x.Coll = c
		return x
	case ftlayer.NoneFactory:
		x.Coll = c
		return x
	}
	return f
}

// due reports whether a crash's moment has come.
func (r *runner) due(c Crash) bool {
	if c.After != "" {
		for _, o := range r.obs {
			if o.what == c.After && o.pe == c.Of && o.group == c.Group && o.num == c.Num {
				return true
			}
		}
		return false
	}
	if c.When == "" {
		return true
	}
	phase := ""
	if s, ok := r.pes[c.Of].proto.(interface{ Phase() string }); ok {
		phase = s.Phase()
	}
	if c.When == "recovered" {
		return r.wasRecovering[c.Of] && phase == ""
	}
	return phase == c.When
}

func (r *runner) push(p ftlayer.Packet) {
	if p.Kind == ftlayer.PktApp && int(p.Msg.Kind) < len(r.res.Packets) {
		r.res.Packets[p.Msg.Kind]++
	}
	k := [2]int32{p.From, p.To}
	r.chans[k] = append(r.chans[k], p)
	r.sync(k)
}

// sync keeps r.live — the channels with packets, in (from, to) order, the
// order the scheduler picks from — in step with channel k.
func (r *runner) sync(k [2]int32) {
	less := func(a, b [2]int32) bool { return a[0] < b[0] || a[0] == b[0] && a[1] < b[1] }
	i := sort.Search(len(r.live), func(i int) bool { return !less(r.live[i], k) })
	in := i < len(r.live) && r.live[i] == k
	switch has := len(r.chans[k]) > 0; {
	case has && !in:
		r.live = slices.Insert(r.live, i, k)
	case !has && in:
		r.live = slices.Delete(r.live, i, i+1)
	}
}

func (r *runner) sends(id int32, ss []Send) {
	for _, x := range ss {
		if r.err != nil {
			return
		}
		p := r.pes[id]
		switch x.Kind {
		case ftlayer.KindP2P:
			pk := p.proto.Send(x.To, x.Payload)
			p.sent[sentKey{ftlayer.KindP2P, 0, pk.Msg.SSN}] = hashBytes(x.Payload)
			r.push(pk)
			continue
		case ftlayer.KindMulticast:
			acts, err := p.proto.Multicast(x.Group, x.Payload)
			if err != nil {
				r.err = err
				return
			}
			for _, a := range acts {
				if a.Kind == ftlayer.ActSend && a.Packet.Kind == ftlayer.PktApp {
					p.sent[sentKey{ftlayer.KindMulticast, x.Group, a.Packet.Msg.Num}] = hashBytes(x.Payload)
					break
				}
			}
			r.exec(id, acts)
		case ftlayer.KindReduction:
			acts, err := p.proto.Contribute(x.Group, x.Payload)
			if err != nil {
				r.err = err
				return
			}
			r.exec(id, acts)
		}
	}
}

func (r *runner) exec(id int32, acts []ftlayer.Action) {
	for _, a := range acts {
		switch a.Kind {
		case ftlayer.ActSend:
			r.push(a.Packet)
			if a.Packet.Kind == ftlayer.PktCkptCommit && a.Packet.Ckpt != nil {
				r.decided = a.Packet.Ckpt.Epoch
			}
		case ftlayer.ActDeliver:
			p := r.pes[id]
			m := a.Msg
			d := Delivery{Kind: m.Kind, Sender: m.Sender, Group: m.Group, Num: m.Num, Hash: hashBytes(m.Payload)}
			in := Input{Kind: m.Kind, From: m.Sender, Group: m.Group, Num: m.Num, Payload: m.Payload}
			switch m.Kind {
			case ftlayer.KindP2P:
				d.Num, d.Group = m.SSN, 0
			case ftlayer.KindMulticast:
				d.Sender, in.From = -1, r.groups.Root(m.Group)
				r.obs = append(r.obs, observation{"mcast", id, m.Group, m.Num})
			case ftlayer.KindReduction:
				d.Sender, in.From = -1, id
				r.obs = append(r.obs, observation{"red", id, m.Group, m.Num})
			}
			p.delivered = append(p.delivered, d)
			r.sends(id, r.Program.Handle(id, &p.st, in))
		case ftlayer.ActCommitted:
			p := r.pes[id]
			p.proto.Checkpoint() // logs and determinants go only now
			r.sends(id, r.Program.(Checkpointed).Resume(id, &p.st))
		}
	}
}

func (r *runner) receive(p *ftlayer.Packet) {
	var acts []ftlayer.Action
	var err error
	if p.Kind >= ftlayer.PktCkptData {
		acts, err = r.pes[p.To].ck.Receive(p)
	} else {
		acts, err = r.pes[p.To].proto.Receive(p)
	}
	if err != nil {
		r.err = err
		return
	}
	switch {
	case p.Kind == ftlayer.PktRedAck:
		for _, d := range p.Done {
			r.obs = append(r.obs, observation{"ack", p.To, d.Group, d.Num})
		}
	case p.Kind == ftlayer.PktApp && p.Msg.Kind == ftlayer.KindReduction:
		r.obs = append(r.obs, observation{"contrib", p.To, p.Msg.Group, p.Msg.Num})
	}
	r.exec(p.To, acts)
	r.drain(p.To)
	for y := range r.recovering {
		if !r.pes[y].proto.Recovering() {
			delete(r.recovering, y)
			for _, q := range r.pes {
				q.proto.Recovered(y)
			}
		}
	}
}

// maybeCheckpoint starts an epoch when every PE waits at a checkpoint
// point and none is recovering.
func (r *runner) maybeCheckpoint() {
	if !r.ckptOK || len(r.recovering) > 0 {
		return
	}
	for _, p := range r.pes {
		if p.ck.InProgress() || !r.Program.(Checkpointed).Waiting(p.st) {
			return
		}
	}
	r.epoch++
	r.res.Checkpoints++
	r.hist[r.epoch] = make([]history, r.N)
	for i, p := range r.pes {
		r.hist[r.epoch][i] = p.history()
		r.exec(int32(i), p.ck.Begin(r.epoch, &ftlayer.Snapshot{App: encodeState(p.st), Proto: p.proto.Prepare()}))
	}
}

// drain delivers what a PE's protocol held and may now deliver, one
// message (and the application's reaction to it) at a time.
func (r *runner) drain(id int32) {
	for r.err == nil {
		acts := r.pes[id].proto.Next()
		if len(acts) == 0 {
			return
		}
		r.exec(id, acts)
	}
}

// lose drops a crashing PE's packets still in the network, as c says.
func (r *runner) lose(c Crash) {
	for k := range r.chans {
		if k[0] == c.PE && (c.LoseAll || slices.Contains(c.Lose, k[1])) {
			r.chans[k] = nil
			r.sync(k)
		}
	}
}

// crash fails PE y: its memory (state, logs, checkpoint copies) and every
// packet on its way to it are gone; it restarts from the checkpoint its
// buddy holds.
func (r *runner) crash(y int32) {
	r.res.Failures++
	for k := range r.chans {
		if k[1] == y {
			r.chans[k] = nil
			r.sync(k)
		}
	}
	buddy := r.pes[ftlayer.Buddy(y, r.N)].ck
	snap := buddy.Committed(y)
	inProgress := r.epoch > 0 && r.decided < r.epoch && anyInProgress(r.pes)
	if r.decided == r.epoch && r.epoch > 0 {
		// The epoch was committed: the new snapshot stands. Survivors that
		// have not seen the commit yet apply it now, before replaying.
		if t := buddy.Tentative(y); t != nil {
			snap = t
		}
		for i, q := range r.pes {
			if int32(i) != y && q.ck.LastCommitted() < r.epoch {
				r.dropCommit(int32(i))
				acts, err := q.ck.Receive(&ftlayer.Packet{Kind: ftlayer.PktCkptCommit, From: 0, To: int32(i), Ckpt: &ftlayer.CkptMsg{Epoch: r.epoch}})
				if err != nil {
					r.err = err
					return
				}
				r.exec(int32(i), acts)
			}
		}
	} else if inProgress {
		for _, q := range r.pes { // not decided: the epoch is aborted
			q.ck.Abort()
			q.proto.Abort()
		}
		for i := range r.pes {
			if int32(i) != y {
				r.drain(int32(i))
			}
		}
		r.res.Aborted++
	}
	if snap == nil {
		r.err = fmt.Errorf("PE %d failed and no checkpoint of it is left (its buddy lost it too)", y)
		return
	}
	if r.Protocol.RollsBackAll() {
		r.rollbackAll(y, snap)
		r.wasRecovering[y] = true // restarted, and with nothing to replay, recovered
		return
	}
	r.restart(y, snap)
	r.recovering[y] = true
	r.wasRecovering[y] = true
	for i, q := range r.pes {
		if int32(i) == y {
			continue
		}
		acts, err := q.proto.PeerFailed(y, r.pes[y].proto.Snapshot().Inc)
		if err != nil {
			r.err = err
			return
		}
		r.exec(int32(i), acts)
	}
	r.resume(y, snap)
}

func anyInProgress(pes []*pe) bool {
	for _, p := range pes {
		if p.ck.InProgress() {
			return true
		}
	}
	return false
}

func (r *runner) dropCommit(to int32) {
	k := [2]int32{0, to}
	kept := r.chans[k][:0]
	for _, p := range r.chans[k] {
		if p.Kind != ftlayer.PktCkptCommit {
			kept = append(kept, p)
		}
	}
	r.chans[k] = kept
	r.sync(k)
}

// restart replaces PE y by a new incarnation from snap, and re-replicates
// the checkpoint copies it held (its own comes back from its buddy, its
// neighbour's from that neighbour).
func (r *runner) restart(y int32, snap *ftlayer.Snapshot) {
	inc := snap.Proto.Inc
	for _, q := range r.pes {
		inc = max(inc, q.proto.Snapshot().IncMap[y])
	}
	inc++
	old := r.pes[y]
	p := &pe{proto: r.Protocol.Restart(y, r.N, snap.Proto, inc), st: decodeState(snap.App), sent: map[sentKey]uint64{}, retired: old.retired}
	p.retired.Add(old.proto.Stats())
	p.retired.CheckpointBytes += old.ck.Bytes
	if h := r.hist[snap.Epoch]; h != nil {
		kept := (&pe{sent: h[y].sent, delivered: h[y].delivered}).history() // a copy
		p.sent, p.delivered = kept.sent, kept.delivered
	}
	p.ck = ftlayer.NewCheckpointer(y, r.N, snap)
	prev := (y + int32(r.N) - 1) % int32(r.N)
	if c := r.pes[prev].ck.Committed(prev); c != nil {
		p.ck.Hold(c)
	}
	r.pes[y] = p
}

// resume starts a restarted PE: from the beginning, or from its
// checkpoint point.
func (r *runner) resume(y int32, snap *ftlayer.Snapshot) {
	p := r.pes[y]
	if snap.Epoch == 0 {
		r.sends(y, r.Program.Start(y, &p.st))
	} else {
		r.sends(y, r.Program.(Checkpointed).Resume(y, &p.st))
	}
}

// rollbackAll is checkpoint/restart: every PE goes back to the last
// committed checkpoint, and everything in flight is discarded.
func (r *runner) rollbackAll(y int32, snap *ftlayer.Snapshot) {
	for k := range r.chans {
		r.chans[k] = nil
		r.sync(k)
	}
	r.res.RolledBack += r.N
	snaps := make([]*ftlayer.Snapshot, r.N)
	for i := range r.pes {
		if int32(i) == y {
			snaps[i] = snap
		} else {
			snaps[i] = r.pes[i].ck.Committed(int32(i))
		}
	}
	for i := range r.pes {
		r.restart(int32(i), snaps[i])
	}
	for i := range r.pes {
		// the neighbour's copy is the snapshot it restarted from, not what
		// its old memory held (a failed PE may not have seen the commit)
		prev := (i + r.N - 1) % r.N
		r.pes[i].ck.Hold(snaps[prev])
	}
	for i := range r.pes {
		r.resume(int32(i), snaps[i])
	}
}

func (s Sim) finish(res Result, pes []*pe, groups *ftlayer.Groups) Result {
	res.groups = groups
	for _, p := range pes {
		res.States = append(res.States, p.st)
		res.Delivered = append(res.Delivered, p.delivered)
		res.Sent = append(res.Sent, p.sent)
		res.results = append(res.results, s.Program.Result(p.st))
		st := p.retired
		st.Add(p.proto.Stats())
		st.CheckpointBytes += p.ck.Bytes
		res.Stats = append(res.Stats, st)
	}
	return res
}

// Check verifies a run with failures (CAMEL paper, Property 1: no orphan):
//   - every message a PE executed is exactly what its sender's final
//     incarnation sent (a recovery that replayed receptions in another
//     order would make different messages): a point-to-point message by
//     its ssn, a multicast by its group and number (its root is the
//     sender); a reduction's result equals the failure-free run's;
//   - every message sent in the final histories was executed exactly once
//     by each of its receivers (a multicast by every member but the root),
//     and the roots delivered the same reductions as without failures;
//   - the order-independent part of every final state equals the
//     failure-free run's.
func Check(free, failed Result) error {
	if failed.Err != nil {
		return failed.Err
	}
	type key struct {
		kind  ftlayer.MsgKind
		from  int32
		group uint64
		num   uint64
	}
	freeRed := map[key]uint64{}
	for _, ds := range free.Delivered {
		for _, d := range ds {
			if d.Kind == ftlayer.KindReduction {
				freeRed[key{d.Kind, -1, d.Group, d.Num}] = d.Hash
			}
		}
	}
	var got [3]int
	for r, ds := range failed.Delivered {
		seen := map[key]bool{}
		for _, d := range ds {
			k := key{d.Kind, d.Sender, d.Group, d.Num}
			if seen[k] {
				return fmt.Errorf("PE %d executed %s twice", r, d)
			}
			seen[k] = true
			got[d.Kind]++
			switch d.Kind {
			case ftlayer.KindP2P:
				h, ok := failed.Sent[d.Sender][sentKey{d.Kind, 0, d.Num}]
				if !ok {
					return fmt.Errorf("PE %d executed %s, which PE %d's final history never sent (an orphan)", r, d, d.Sender)
				}
				if h != d.Hash {
					return fmt.Errorf("PE %d executed %s with other contents than PE %d's final history sent (an orphan)", r, d, d.Sender)
				}
			case ftlayer.KindMulticast:
				root := failed.groups.Root(d.Group)
				if root == int32(r) || !failed.groups.Has(d.Group, int32(r)) {
					return fmt.Errorf("PE %d executed %s, not being a member of the group other than its root", r, d)
				}
				h, ok := failed.Sent[root][sentKey{d.Kind, d.Group, d.Num}]
				if !ok {
					return fmt.Errorf("PE %d executed %s, which root PE %d's final history never sent (an orphan)", r, d, root)
				}
				if h != d.Hash {
					return fmt.Errorf("PE %d executed %s with other contents than root PE %d's final history sent (an orphan)", r, d, root)
				}
			case ftlayer.KindReduction:
				if failed.groups.Root(d.Group) != int32(r) {
					return fmt.Errorf("PE %d delivered %s, not being the group's root", r, d)
				}
				h, ok := freeRed[k]
				if !ok {
					return fmt.Errorf("PE %d delivered %s, which the failure-free run never did", r, d)
				}
				if h != d.Hash {
					return fmt.Errorf("PE %d delivered %s with another result than the failure-free run", r, d)
				}
			}
		}
	}
	// none lost: everything sent was executed, by every receiver
	var sent [3]int
	for _, m := range failed.Sent {
		for k := range m {
			if k.kind == ftlayer.KindMulticast {
				sent[k.kind] += len(failed.groups.Members(k.group)) - 1
			} else {
				sent[k.kind]++
			}
		}
	}
	sent[ftlayer.KindReduction] = len(freeRed)
	for kind := range sent {
		if sent[kind] != got[kind] {
			return fmt.Errorf("%s: %d receptions due in the final histories, %d executed (lost or stranded)", ftlayer.MsgKind(kind), sent[kind], got[kind])
		}
	}
	for i := range free.results {
		if fmt.Sprint(free.results[i]) != fmt.Sprint(failed.results[i]) {
			return fmt.Errorf("PE %d ends with %v, the failure-free run with %v", i, failed.results[i], free.results[i])
		}
	}
	return nil
}

func (d Delivery) String() string {
	switch d.Kind {
	case ftlayer.KindMulticast:
		return fmt.Sprintf("multicast %d of group %d", d.Num, d.Group)
	case ftlayer.KindReduction:
		return fmt.Sprintf("reduction %d of group %d", d.Num, d.Group)
	}
	return fmt.Sprintf("message %d:%d", d.Sender, d.Num)
}

func encodeState(st State) []byte {
	v := []uint64{st.H, st.Count, uint64(st.Step), uint64(st.Got)}
	for _, x := range st.Vals {
		v = append(v, uint64(x))
	}
	return put(v...)
}

func decodeState(b []byte) State {
	var st State
	st.H, st.Count, st.Step, st.Got = u64(b), u64(b[8:]), int64(u64(b[16:])), int64(u64(b[24:]))
	for i := range st.Vals {
		st.Vals[i] = int64(u64(b[32+8*i:]))
	}
	return st
}

func u64(b []byte) uint64 {
	if len(b) < 8 {
		return 0
	}
	return binary.LittleEndian.Uint64(b)
}

func put(v ...uint64) []byte {
	b := make([]byte, 8*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint64(b[8*i:], x)
	}
	return b
}
