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
	"sort"

	"github.com/charmgo/charmgo/ftlayer"
)

// Send is a message a program wants to send.
type Send struct {
	To      int32
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
	Handle(pe int32, st *State, from int32, payload []byte) []Send
}

// State is a PE's application state. H hashes every reception in order, so
// a replay in another order gives another state.
type State struct {
	H     uint64
	Count uint64
	Vals  [6]int64
	Step  int64
	Got   int64
}

func mix(h uint64, v uint64) uint64 {
	h ^= v + 0x9e3779b97f4a7c15 + h<<6 + h>>2
	h *= 0xff51afd7ed558ccd
	return h ^ h>>33
}

// Crash fails PE PE just before event number At (0: before the first),
// in the order the crashes are listed,
// or, with When set, as soon as PE Of's recovery is in that phase
// ("collecting" determinants, "replaying") or has just ended ("recovered"),
// at or after event At.
type Crash struct {
	At   int
	PE   int32
	When string
	Of   int32
	// Optional: if the moment never comes in this run (a replay can be
	// over within one event), the crash is skipped instead of an error.
	Optional bool
}

// Result is how a simulated run ended.
type Result struct {
	States    []State
	Events    int
	Delivered [][]Delivery        // per PE, final incarnation, in delivery order
	Sent      []map[uint64]uint64 // per PE, final incarnation: ssn -> payload hash
	Stats     []ftlayer.Stats
	Err       error
	// Checkpoints begun, Aborted by a failure, Failures injected, PEs
	// RolledBack (checkpoint/restart rolls back every PE).
	Checkpoints, Aborted, Failures, RolledBack int
	Crashed                                    []int // indices (in Sim.Crashes) of the crashes that happened
	results                                    []any
}

// Delivery is one message executed by a PE.
type Delivery struct {
	Sender int32
	SSN    uint64
	Hash   uint64 // of the payload
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
	sent      map[uint64]uint64
}

type runner struct {
	Sim
	rng           *rand.Rand
	pes           []*pe
	chans         map[[2]int32][]ftlayer.Packet
	keys          [][2]int32
	res           Result
	epoch         uint64
	decided       uint64 // the last epoch the coordinator committed
	recovering    map[int32]bool
	wasRecovering map[int32]bool // recovered at least once
	err           error
	ckptOK        bool
	// hist[e][pe] is what pe had sent and executed when its snapshot of
	// epoch e was taken: a restart from that snapshot keeps that history.
	hist map[uint64][]history
}

type history struct {
	sent      map[uint64]uint64
	delivered []Delivery
}

func (p *pe) history() history {
	h := history{sent: make(map[uint64]uint64, len(p.sent)), delivered: append([]Delivery(nil), p.delivered...)}
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
	_, r.ckptOK = s.Program.(Checkpointed)
	r.pes = make([]*pe, s.N)
	for i := range r.pes {
		id := int32(i)
		p := &pe{proto: s.Protocol.New(id, s.N), st: s.Program.Init(id, s.N), sent: map[uint64]uint64{}}
		p.ck = ftlayer.NewCheckpointer(id, s.N, &ftlayer.Snapshot{Owner: id, App: encodeState(p.st), Proto: p.proto.Snapshot()})
		r.pes[i] = p
	}
	for i := range r.pes { // the initial checkpoint's second copies
		r.pes[ftlayer.Buddy(int32(i), s.N)].ck.Hold(r.pes[i].ck.Committed(int32(i)))
	}
	for i := range r.pes {
		r.sends(int32(i), s.Program.Start(int32(i), &r.pes[i].st))
	}
	crashes := append([]Crash(nil), s.Crashes...) // in the order given
	next := 0                                     // index of crashes[0] in s.Crashes
	for r.err == nil {
		for len(crashes) > 0 && crashes[0].At <= r.res.Events && r.err == nil && r.due(crashes[0]) {
			r.crash(crashes[0].PE)
			r.res.Crashed = append(r.res.Crashed, next)
			crashes, next = crashes[1:], next+1
		}
		if r.err != nil {
			break
		}
		r.maybeCheckpoint()
		var live [][2]int32
		for _, k := range r.keys {
			if len(r.chans[k]) > 0 {
				live = append(live, k)
			}
		}
		if len(live) == 0 {
			if len(crashes) > 0 && crashes[0].When == "" { // crashes scheduled after the end still happen
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
		r.res.Events++
		r.receive(&p)
	}
	if r.err == nil {
		for y := range r.recovering {
			r.err = fmt.Errorf("PE %d never finished recovering", y)
		}
	}
	r.res.Err = r.err
	return s.finish(r.res, r.pes)
}

// due reports whether a crash's moment has come.
func (r *runner) due(c Crash) bool {
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
	k := [2]int32{p.From, p.To}
	if _, ok := r.chans[k]; !ok {
		r.keys = append(r.keys, k)
		sort.Slice(r.keys, func(i, j int) bool {
			return r.keys[i][0] < r.keys[j][0] || r.keys[i][0] == r.keys[j][0] && r.keys[i][1] < r.keys[j][1]
		})
	}
	r.chans[k] = append(r.chans[k], p)
}

func (r *runner) sends(id int32, ss []Send) {
	for _, x := range ss {
		acts := r.pes[id].proto.Send(x.To, x.Payload)
		r.pes[id].sent[acts[0].Packet.Msg.SSN] = hashBytes(x.Payload)
		r.exec(id, acts)
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
			p.delivered = append(p.delivered, Delivery{a.Msg.Sender, a.Msg.SSN, hashBytes(a.Msg.Payload)})
			r.sends(id, r.Program.Handle(id, &p.st, a.Msg.Sender, a.Msg.Payload))
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
	r.exec(p.To, acts)
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

// crash fails PE y: its memory (state, logs, checkpoint copies) and every
// packet on its way to it are gone; it restarts from the checkpoint its
// buddy holds.
func (r *runner) crash(y int32) {
	r.res.Failures++
	for k := range r.chans {
		if k[1] == y {
			r.chans[k] = nil
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
		}
		r.res.Aborted++
	}
	if snap == nil {
		r.err = fmt.Errorf("PE %d failed and no checkpoint of it is left (its buddy lost it too)", y)
		return
	}
	if r.Protocol.RollsBackAll() {
		r.rollbackAll(y, snap)
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
	p := &pe{proto: r.Protocol.Restart(y, r.N, snap.Proto, inc), st: decodeState(snap.App), sent: map[uint64]uint64{}}
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
		r.resume(int32(i), snaps[i])
	}
}

func (s Sim) finish(res Result, pes []*pe) Result {
	for _, p := range pes {
		res.States = append(res.States, p.st)
		res.Delivered = append(res.Delivered, p.delivered)
		res.Sent = append(res.Sent, p.sent)
		res.results = append(res.results, s.Program.Result(p.st))
		res.Stats = append(res.Stats, p.proto.Stats())
	}
	return res
}

// Check verifies a run with failures (CAMEL paper, Property 1: no orphan):
//   - every message a PE executed is exactly what its sender's final
//     incarnation sent with that ssn (a recovery that replayed receptions
//     in another order would make different messages);
//   - every message sent in the final histories was executed exactly once
//     by its receiver (none lost, none repeated);
//   - the order-independent part of every final state equals the
//     failure-free run's.
func Check(free, failed Result) error {
	if failed.Err != nil {
		return failed.Err
	}
	for r := range failed.Delivered {
		seen := map[[2]uint64]bool{}
		for _, d := range failed.Delivered[r] {
			k := [2]uint64{uint64(d.Sender), d.SSN}
			if seen[k] {
				return fmt.Errorf("PE %d executed message %d:%d twice", r, d.Sender, d.SSN)
			}
			seen[k] = true
			h, ok := failed.Sent[d.Sender][d.SSN]
			if !ok {
				return fmt.Errorf("PE %d executed message %d:%d, which PE %d's final history never sent (an orphan)", r, d.Sender, d.SSN, d.Sender)
			}
			if h != d.Hash {
				return fmt.Errorf("PE %d executed message %d:%d with other contents than PE %d's final history sent (an orphan)", r, d.Sender, d.SSN, d.Sender)
			}
		}
	}
	// none lost: everything sent was executed
	var sent, got int
	for s := range failed.Sent {
		sent += len(failed.Sent[s])
	}
	for r := range failed.Delivered {
		got += len(failed.Delivered[r])
	}
	if sent != got {
		return fmt.Errorf("%d messages sent in the final histories, %d executed (lost or stranded)", sent, got)
	}
	for i := range free.results {
		if fmt.Sprint(free.results[i]) != fmt.Sprint(failed.results[i]) {
			return fmt.Errorf("PE %d ends with %v, the failure-free run with %v", i, failed.results[i], free.results[i])
		}
	}
	return nil
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
