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

// Crash fails PE PE just before event number At (0: before the first).
type Crash struct {
	At int
	PE int32
}

// Result is how a simulated run ended.
type Result struct {
	States    []State
	Events    int
	Delivered [][]Delivery        // per PE, final incarnation, in delivery order
	Sent      []map[uint64]uint64 // per PE, final incarnation: ssn -> payload hash
	Stats     []ftlayer.Stats
	Err       error
	results   []any
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
	Crashes []Crash
	// MaxEvents bounds a run (a protocol bug must not hang the test).
	MaxEvents int
}

type pe struct {
	proto     *ftlayer.SCMEL
	st        State
	delivered []Delivery
	sent      map[uint64]uint64
	ckState   State
	ckProto   ftlayer.Counters
}

// Run simulates the program and returns its end state.
func (s Sim) Run() Result {
	rng := rand.New(rand.NewPCG(s.Seed, 0x5eed))
	pes := make([]*pe, s.N)
	chans := map[[2]int32][]ftlayer.Packet{}
	var keys [][2]int32
	var res Result
	if s.MaxEvents == 0 {
		s.MaxEvents = 1_000_000
	}
	push := func(p ftlayer.Packet) {
		k := [2]int32{p.From, p.To}
		if _, ok := chans[k]; !ok {
			keys = append(keys, k)
			sort.Slice(keys, func(i, j int) bool {
				return keys[i][0] < keys[j][0] || keys[i][0] == keys[j][0] && keys[i][1] < keys[j][1]
			})
		}
		chans[k] = append(chans[k], p)
	}
	var exec func(id int32, acts []ftlayer.Action)
	sends := func(id int32, ss []Send) {
		for _, x := range ss {
			acts := pes[id].proto.Send(x.To, x.Payload)
			pes[id].sent[acts[0].Packet.Msg.SSN] = hashBytes(x.Payload)
			exec(id, acts)
		}
	}
	exec = func(id int32, acts []ftlayer.Action) {
		for _, a := range acts {
			switch a.Kind {
			case ftlayer.ActSend:
				push(a.Packet)
			case ftlayer.ActDeliver:
				p := pes[id]
				p.delivered = append(p.delivered, Delivery{a.Msg.Sender, a.Msg.SSN, hashBytes(a.Msg.Payload)})
				sends(id, s.Program.Handle(id, &p.st, a.Msg.Sender, a.Msg.Payload))
			}
		}
	}
	for i := range pes {
		id := int32(i)
		pes[i] = &pe{proto: ftlayer.NewSCMEL(id, s.N), st: s.Program.Init(id, s.N), sent: map[uint64]uint64{}}
		pes[i].ckState, pes[i].ckProto = pes[i].st, pes[i].proto.Snapshot() // the initial checkpoint
	}
	for i := range pes {
		sends(int32(i), s.Program.Start(int32(i), &pes[i].st))
	}
	crashes := append([]Crash(nil), s.Crashes...)
	sort.Slice(crashes, func(i, j int) bool { return crashes[i].At < crashes[j].At })
	recovering := map[int32]bool{}
	for {
		for len(crashes) > 0 && crashes[0].At <= res.Events {
			if err := s.crash(crashes[0].PE, pes, chans, exec, sends, recovering); err != nil {
				res.Err = err
				return s.finish(res, pes)
			}
			crashes = crashes[1:]
		}
		// pick a non-empty channel
		var live [][2]int32
		for _, k := range keys {
			if len(chans[k]) > 0 {
				live = append(live, k)
			}
		}
		if len(live) == 0 {
			if len(crashes) > 0 { // crashes scheduled after the end still happen
				res.Events = crashes[0].At
				continue
			}
			break
		}
		if res.Events >= s.MaxEvents {
			res.Err = fmt.Errorf("no end after %d events", res.Events)
			break
		}
		k := live[rng.IntN(len(live))]
		p := chans[k][0]
		chans[k] = chans[k][1:]
		res.Events++
		acts, err := pes[p.To].proto.Receive(&p)
		if err != nil {
			res.Err = err
			break
		}
		exec(p.To, acts)
		for y := range recovering {
			if !pes[y].proto.Recovering() {
				delete(recovering, y)
				for _, q := range pes {
					q.proto.Recovered(y)
				}
			}
		}
	}
	for y := range recovering {
		res.Err = fmt.Errorf("PE %d never finished recovering", y)
	}
	return s.finish(res, pes)
}

func (s Sim) crash(y int32, pes []*pe, chans map[[2]int32][]ftlayer.Packet, exec func(int32, []ftlayer.Action), sends func(int32, []Send), recovering map[int32]bool) error {
	// Fail-stop: y's memory is gone, and so is everything on its way to it.
	for k := range chans {
		if k[1] == y {
			chans[k] = nil
		}
	}
	old := pes[y]
	inc := old.ckProto.Inc
	for _, q := range pes { // the highest incarnation anyone knows of y, plus one
		if q != old {
			inc = max(inc, q.proto.Snapshot().IncMap[y])
		}
	}
	inc++
	pes[y] = &pe{proto: ftlayer.RestartSCMEL(y, s.N, old.ckProto, inc), st: old.ckState, ckState: old.ckState, ckProto: old.ckProto, sent: map[uint64]uint64{}}
	recovering[y] = true
	for i, q := range pes {
		if int32(i) == y {
			continue
		}
		acts, err := q.proto.PeerFailed(y, inc)
		if err != nil {
			return err
		}
		exec(int32(i), acts)
	}
	// The new incarnation re-executes from its checkpoint.
	sends(y, s.Program.Start(y, &pes[y].st))
	return nil
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
