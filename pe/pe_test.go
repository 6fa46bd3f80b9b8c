package pe

import (
	"encoding/json"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

type testPayload struct {
	A int
	B string
}

var testType = RegisterType(TypeInfo{
	Name:   "pe.test",
	Encode: func(v any) ([]byte, error) { return json.Marshal(v.(testPayload)) },
	Decode: func(b []byte) (any, error) {
		var p testPayload
		err := json.Unmarshal(b, &p)
		return p, err
	},
})

func TestEnvelopeRoundTrip(t *testing.T) {
	cases := []Envelope{
		{Type: testType, Coll: 7, Kind: KindP2P, Src: 3, Index: Idx(1, 2, 3), Seq: 9, Aux: 1 << 50, Payload: testPayload{A: 5, B: "x"}},
		{Type: testType, Kind: KindSystem, Index: Idx(-4, 0, 0, 0, 0, 1<<30)},
		{Type: testType, Kind: KindReduction, Flags: 3}, // nil payload
		{Type: testType, Kind: KindMulticast, Payload: testPayload{A: 1}, FT: &FTHeader{Group: 1 << 41, Sender: 2, Recver: -1, SSN: 10, Num: 4, Inc: 1, Safe: 9,
			Dets: []Det{{Sender: 1, Recver: 2, SSN: 3, RSN: 4}, {Sender: 0, Recver: 2, Group: 5, SSN: 6, RSN: 7}}}},
		{Type: testType, Kind: KindP2P, FT: &FTHeader{Sender: 1, Recver: 0, SSN: 1, CSN: 1}}, // nil payload, no determinants
		{Type: testType, Kind: KindP2P, Payload: testPayload{A: 2}, FT: &FTHeader{Sender: 1, Recver: 0, SSN: 2, CSN: 2,
			Dets: []Det{{Sender: 0, Recver: 1, SSN: 1, RSN: 1}}, Acks: []Det{{Sender: 1, Recver: 0, SSN: 1, RSN: 1}, {Sender: 2, Recver: 0, SSN: 4, RSN: 2}}}},
	}
	for _, env := range cases {
		b, err := EncodeEnvelope([]byte("prefix"), &env)
		require.NoError(t, err)
		got, n, err := DecodeEnvelope(b[6:])
		require.NoError(t, err)
		require.Equal(t, len(b)-6, n)
		require.Equal(t, env, got)
	}
}

func withFT(f func(b []byte) []byte) []byte {
	env := Envelope{Type: testType, Kind: KindP2P, Payload: testPayload{A: 1}, FT: &FTHeader{Sender: 1, SSN: 2, Dets: []Det{{Sender: 1}}}}
	b, err := EncodeEnvelope(nil, &env)
	if err != nil {
		panic(err)
	}
	return f(b)
}

// withNamedFT is an envelope with a named FT header (message logging
// without determinants), changed by f: form byte, sender 1, receiver 2,
// channel number 3, incarnation 0, phase 4, then the name's kind (byte
// headerSize+6), collection 5 and dimensions (byte headerSize+8).
func withNamedFT(f func(b []byte) []byte) []byte {
	env := Envelope{Type: testType, Kind: KindP2P, Payload: testPayload{A: 1}, FT: &FTHeader{Sender: 1, Recver: 2, CSN: 3, SSN: 4,
		Name: &MsgName{Kind: NameOrigin, Origin: Origin{Coll: 5, Index: Idx(1, -2, 3), K: 6}}}}
	b, err := EncodeEnvelope(nil, &env)
	if err != nil {
		panic(err)
	}
	return f(b)
}

// Every name survives the wire, and a header with nothing but numbers
// takes the named form's few bytes.
func TestNamedFTHeadersRoundTrip(t *testing.T) {
	for _, h := range []FTHeader{
		{Sender: 1, Recver: 2, CSN: 3, SSN: 4, Inc: 5},
		{Sender: 3, Recver: 0, CSN: 300, SSN: 1 << 40, Name: &MsgName{Kind: NameOrigin, Origin: Origin{Coll: 1 << 20, Index: Idx(1, -2, 3, 4, 5, -6), K: 1 << 33}, Num: 2, At: 4, AtInc: 3, Crossed: true}},
		{Sender: 1, Recver: 2, Name: &MsgName{Kind: NamePartial, From: 7, Group: 1 << 41, Num: 9}},
		{Sender: 1, Recver: 2, Name: &MsgName{Kind: NameResult, Group: 3, Num: 4, At: 7, AtInc: 1}},
		{Sender: 1, Recver: 2, Name: &MsgName{Kind: NameContents, From: 1, Hash: 0xdeadbeefcafe, Num: 2}},
		{Sender: 1, Recver: 2, Name: &MsgName{Kind: NameHint, From: 1, Hash: 3, Num: 1}},
		{Sender: 1, Recver: -1, SSN: 2, Dets: []Det{{Sender: 1, Recver: 2, SSN: 3, RSN: 4}}}, // the full form
	} {
		env := Envelope{Type: testType, Kind: KindP2P, Payload: testPayload{A: 1}, FT: &h}
		b, err := EncodeEnvelope(nil, &env)
		require.NoError(t, err)
		got, n, err := DecodeEnvelope(b)
		require.NoError(t, err)
		require.Equal(t, len(b), n)
		require.Equal(t, h, *got.FT)
	}
	plain, err := EncodeEnvelope(nil, &Envelope{Type: testType, Kind: KindP2P, Payload: testPayload{A: 1}})
	require.NoError(t, err)
	named := withNamedFT(func(b []byte) []byte { return b })
	require.Less(t, len(named)-len(plain), 20, "a named header with its origin in bytes")
}

func TestDecodeEnvelopeErrorsNameTheByte(t *testing.T) {
	env := Envelope{Type: testType, Kind: KindP2P, Index: Idx(1), Payload: testPayload{A: 1}}
	good, err := EncodeEnvelope(nil, &env)
	require.NoError(t, err)
	mut := func(f func(b []byte) []byte) []byte { return f(append([]byte(nil), good...)) }
	cases := []struct {
		b    []byte
		want string
	}{
		{good[:10], "10 bytes, a header needs"},
		{mut(func(b []byte) []byte { b[0] = 9; return b }), "byte 0: wire version 9"},
		{mut(func(b []byte) []byte { b[1] = 77; return b }), "byte 1: unknown message kind 77"},
		{mut(func(b []byte) []byte { b[3] = 7; return b }), "byte 3: index has 7 dimensions"},
		{mut(func(b []byte) []byte { b[4] = 0xff; b[5] = 0xff; return b }), "byte 4: unknown message type"},
		{mut(func(b []byte) []byte { b[24] = 1; return b }), "coordinate 2 set beyond"},
		{good[:len(good)-1], "payload length"},
		{mut(func(b []byte) []byte { b[headerSize] = '!'; return b }), "pe.test payload"},
		{mut(func(b []byte) []byte { b[2] |= flagFT; return b }), "FT header"},
		{withFT(func(b []byte) []byte { b[headerSize+1+52] = 0xff; return b }), "claims 255 determinants"},
		{withFT(func(b []byte) []byte { b[headerSize+1+ftFixedSize+detSize] = 0xff; return b }), "claims 255 acknowledgements"},
		{withFT(func(b []byte) []byte { return b[:headerSize+1+ftFixedSize+detSize+2] }), "count of acknowledgements needs 4 bytes, 2 left"},
		{withFT(func(b []byte) []byte { b[headerSize] = 7; return b }), fmt.Sprintf("byte %d: FT header's form 7 is unknown", headerSize)},
		{withNamedFT(func(b []byte) []byte { return b[:headerSize+3] }), "FT header's channel number is not a varint"},
		{withNamedFT(func(b []byte) []byte { b[headerSize+6] = 9; return b }), fmt.Sprintf("byte %d: FT header's name kind 9 is unknown", headerSize+6)},
		{withNamedFT(func(b []byte) []byte { b[headerSize+8] = 7; return b }), fmt.Sprintf("byte %d: FT header's origin has 7 dimensions", headerSize+8)},
		{withNamedFT(func(b []byte) []byte { copy(b[headerSize+1:], []byte{0xff, 0xff, 0xff, 0xff, 0x1f}); return b }),
			fmt.Sprintf("byte %d: FT header's sender 8589934591 does not fit 32 bits", headerSize+1)},
	}
	for _, c := range cases {
		_, _, err := DecodeEnvelope(c.b)
		require.ErrorContains(t, err, c.want)
	}
}

// FuzzDecodeEnvelope: envelopes come from other processes; any bytes decode
// to an envelope or an error, never a panic.
// Rate here (go test -fuzz, 2 workers, 10 s): about 48,000 inputs a second.
func FuzzDecodeEnvelope(f *testing.F) {
	env := Envelope{Type: testType, Kind: KindMulticast, Index: Idx(1, 2), Payload: testPayload{A: 1, B: "y"}}
	b, _ := EncodeEnvelope(nil, &env)
	f.Add(b)
	f.Add(b[:headerSize])
	f.Add(withFT(func(b []byte) []byte { return b }))
	f.Add(withNamedFT(func(b []byte) []byte { return b }))
	f.Fuzz(func(t *testing.T, b []byte) {
		env, n, err := DecodeEnvelope(b)
		if err != nil {
			return
		}
		if n > len(b) {
			t.Fatalf("used %d of %d bytes", n, len(b))
		}
		// What decodes must encode back to the same bytes (modulo payload
		// re-encoding, which is the type's business).
		again, err := EncodeEnvelope(nil, &env)
		if err != nil {
			return
		}
		if _, _, err := DecodeEnvelope(again); err != nil {
			t.Fatalf("re-encoded envelope does not decode: %v", err)
		}
	})
}

type recorder struct {
	mu   sync.Mutex
	got  []string
	done func(p *PE, env *Envelope) bool
}

func (r *recorder) Handle(p *PE, env *Envelope) {
	r.mu.Lock()
	r.got = append(r.got, fmt.Sprintf("%s:%d", env.Kind, env.Seq))
	r.mu.Unlock()
	if r.done(p, env) {
		p.Node().Stop(0)
	}
}

// System messages queued after application messages still go first.
func TestSystemLaneGoesFirst(t *testing.T) {
	rec := &recorder{done: func(p *PE, env *Envelope) bool { return env.Seq == 99 }}
	n, err := NewNode(Config{NumPEs: 1}, func(p *PE) Handler { return rec })
	require.NoError(t, err)
	for i := 0; i < 3; i++ {
		n.Inject(0, Envelope{Type: testType, Kind: KindP2P, Seq: uint64(i)})
	}
	n.Inject(0, Envelope{Type: testType, Kind: KindSystem, Seq: 10})
	n.Inject(0, Envelope{Type: testType, Kind: KindP2P, Seq: 99})
	n.Start()
	code, err := n.Wait()
	require.NoError(t, err)
	require.Equal(t, 0, code)
	require.Equal(t, []string{"system:10", "p2p:0", "p2p:1", "p2p:2", "p2p:99"}, rec.got)
}

type pingPong struct {
	n     int
	limit int
}

func (h *pingPong) Handle(p *PE, env *Envelope) {
	if int(env.Seq) >= h.limit {
		p.Node().Stop(0)
		return
	}
	p.Send(1-p.ID(), &Envelope{Type: testType, Kind: KindP2P, Seq: env.Seq + 1})
}

// Two PEs bounce a message; every hop parks and wakes a PE. Also under
// --wire-check, where the payload-less envelopes still round-trip.
func TestPingPongAcrossPEs(t *testing.T) {
	for _, wire := range []bool{false, true} {
		n, err := NewNode(Config{NumPEs: 2, WireCheck: wire}, func(p *PE) Handler { return &pingPong{limit: 10000} })
		require.NoError(t, err)
		n.Inject(0, Envelope{Type: testType, Kind: KindP2P})
		n.Start()
		_, err = n.Wait()
		require.NoError(t, err)
		require.Equal(t, uint64(5000), n.PE(0).Stats.Sent[KindP2P])
	}
}

func TestHandlerPanicStopsEveryPE(t *testing.T) {
	n, err := NewNode(Config{NumPEs: 3}, func(p *PE) Handler {
		return &recorder{done: func(p *PE, env *Envelope) bool { panic("bad message") }}
	})
	require.NoError(t, err)
	n.Inject(1, Envelope{Type: testType, Kind: KindP2P})
	n.Start()
	code, err := n.Wait()
	require.Equal(t, 1, code)
	require.ErrorContains(t, err, "PE 1: panic handling pe.test: bad message")
}

type fanout struct {
	n, got, want int
	seen         map[uint64]bool
	dup          bool
}

// Each message sends several more to its own PE, so the local queue grows
// past its compaction threshold while envelopes are being dispatched: none
// may be lost or delivered twice.
func (h *fanout) Handle(p *PE, env *Envelope) {
	if h.seen[env.Seq] {
		h.dup = true
	}
	h.seen[env.Seq] = true
	h.got++
	for i := 0; i < 3 && h.n < h.want; i++ {
		h.n++
		p.Send(p.ID(), &Envelope{Type: testType, Kind: KindP2P, Seq: uint64(h.n)})
	}
	if h.got == h.want+1 {
		p.Node().Stop(0)
	}
}

func TestLocalQueueSurvivesGrowthDuringDispatch(t *testing.T) {
	h := &fanout{want: 20000, seen: map[uint64]bool{}}
	n, err := NewNode(Config{NumPEs: 1}, func(p *PE) Handler { return h })
	require.NoError(t, err)
	n.Inject(0, Envelope{Type: testType, Kind: KindP2P, Seq: 0})
	n.Start()
	_, err = n.Wait()
	require.NoError(t, err)
	require.False(t, h.dup)
	require.Equal(t, h.want+1, h.got)
}

// longHandler, on PE 0, sends to PE 1 and then works on (Progress per unit
// of work) until PE 1 has the message: a handler that runs many entry
// methods must not hold back what they sent until it returns.
type longHandler struct {
	units int
	got   chan struct{}
}

func (h *longHandler) Handle(p *PE, env *Envelope) {
	if p.ID() == 1 {
		close(h.got)
		return
	}
	p.Send(1, &Envelope{Type: testType, Kind: KindP2P})
	for i := 0; i < h.units; i++ {
		p.Unit()
	}
	select {
	case <-h.got:
		p.Node().Stop(0)
	case <-time.After(10 * time.Second):
		p.Node().Fail(fmt.Errorf("after %d units of work PE 1 still lacks the message", h.units))
	}
}

func TestProgressHandsOverWhatALongHandlerSent(t *testing.T) {
	h := &longHandler{units: 8, got: make(chan struct{})}
	runToEnd(t, Config{NumPEs: 2, FlushEvery: 8}, func(p *PE) Handler { return h })
}

// runToEnd runs a node from one envelope injected on PE 0 and requires
// that it ends well.
func runToEnd(t *testing.T, cfg Config, mk func(p *PE) Handler) {
	t.Helper()
	n, err := NewNode(cfg, mk)
	require.NoError(t, err)
	n.Inject(0, Envelope{Type: testType, Kind: KindP2P})
	n.Start()
	code, err := n.Wait()
	require.NoError(t, err)
	require.Equal(t, 0, code)
}

// The spin before parking adapts: a spin that finds work doubles the
// next, up to the cap; one that finds nothing leaves it, and the wait that
// follows decides: a long one halves it, down to minSpin; a short one (a
// full spin would have caught its message) makes it full again at once.
func TestSpinAdapts(t *testing.T) {
	n, err := NewNode(Config{NumPEs: 1, SpinPolls: 1024}, func(p *PE) Handler { return &recorder{} })
	require.NoError(t, err)
	p := n.PE(0)
	p.fullSpin = time.Microsecond
	require.Equal(t, 1024, p.spinNow)
	require.False(t, p.spinWait(), "nothing was sent")
	require.Equal(t, 1024, p.spinNow, "a spin that found nothing leaves it to the wait")
	for _, w := range []int{512, 256, 128, 64, 32, 32} {
		p.spinAfterBlock(time.Millisecond)
		require.Equal(t, w, p.spinNow)
	}
	p.in.pushes.Add(1)
	for _, w := range []int{64, 128} {
		require.True(t, p.spinWait())
		require.Equal(t, w, p.spinNow)
	}
	p.spinAfterBlock(1500 * time.Nanosecond) // came within two full spins
	require.Equal(t, 1024, p.spinNow)
	require.True(t, p.spinWait())
	require.Equal(t, 1024, p.spinNow, "capped")

	small, err := NewNode(Config{NumPEs: 1, SpinPolls: 8}, func(p *PE) Handler { return &recorder{} })
	require.NoError(t, err)
	q := small.PE(0)
	q.spinAfterBlock(time.Second)
	require.Equal(t, 8, q.spinNow, "a cap below minSpin stays the floor")
}

// A spinning PE yields to Go's scheduler only where something its
// messages depend on may wait for its P: more PEs than Ps, or as many
// and a remote link's reader. Without yields, two PEs that came to share
// a P (Go runs a goroutine it wakes on the waker's P) no longer take
// turns at it for good: the idle P takes one.
func TestSpinYieldsOnlyWhereAPIsShared(t *testing.T) {
	procs := runtime.GOMAXPROCS(0)
	for _, c := range []struct {
		pes    int
		remote bool
		yield  bool
	}{
		{procs, false, false},
		{procs + 1, false, true},
		{procs, true, true},
	} {
		cfg := Config{NumPEs: c.pes, SpinPolls: 64}
		if c.remote {
			cfg.NumPEs, cfg.LocalPEs, cfg.Remote = c.pes+1, c.pes, nullRemote{}
		}
		n, err := NewNode(cfg, func(p *PE) Handler { return &recorder{} })
		require.NoError(t, err)
		require.Equal(t, c.yield, n.PE(0).yieldInSpin, "%d PEs on %d Ps, remote %v", c.pes, procs, c.remote)
	}
}

// nullRemote is a remote transport that carries nothing.
type nullRemote struct{}

func (nullRemote) Deliver(int, int, bool, []Envelope) error { return nil }
func (nullRemote) RolledBack()                              {}

// PEs that spin before parking still run a round trip to the end.
func TestSpinningPEsPingPong(t *testing.T) {
	runToEnd(t, Config{NumPEs: 2, SpinPolls: 4096}, func(p *PE) Handler { return &pingPong{limit: 2000} })
}

// The usage sampler: a PE that computes between messages is seen busy,
// one that waits is seen idle.
func TestUsageSampler(t *testing.T) {
	release := make(chan struct{})
	n, err := NewNode(Config{NumPEs: 2, SampleUsage: time.Millisecond}, func(p *PE) Handler { return busyHandler{release: release} })
	require.NoError(t, err)
	n.Inject(0, Envelope{Type: testType, Kind: KindP2P})
	n.Start()
	<-release // PE 0 computed for 100 ms while PE 1 waited
	n.Stop(0)
	_, err = n.Wait()
	require.NoError(t, err)
	u := n.Usage()
	require.Len(t, u, 2)
	require.Greater(t, u[0].Samples, uint64(20))
	require.Greater(t, u[0].Utilisation(), 0.5, "PE 0 computed")
	require.Less(t, u[1].Utilisation(), 0.5, "PE 1 waited")
}

type busyHandler struct{ release chan struct{} }

func (h busyHandler) Handle(p *PE, env *Envelope) {
	for end := time.Now().Add(100 * time.Millisecond); time.Now().Before(end); {
	}
	close(h.release)
}

// wakingRemote stands for a link: Deliver hands the batch to a writer
// goroutine, as pe/cluster's links do, and the writer notes when it ran.
type wakingRemote struct {
	queued chan int
	wrote  chan int
}

func (r wakingRemote) Deliver(_, _ int, _ bool, batch []Envelope) error {
	r.queued <- len(batch)
	return nil
}
func (wakingRemote) RolledBack() {}

// linkBusyHandler sends one message to the remote PE, then handles its own
// messages one after another, each busy for a while, and notes how many
// it had handled when the writer ran.
type linkBusyHandler struct {
	left        int
	handledWhen chan int
	wrote       chan int
	handled     int
}

func (h *linkBusyHandler) Handle(p *PE, env *Envelope) {
	switch env.Seq {
	case 0:
		p.Send(1, &Envelope{Type: testType, Kind: KindP2P, Seq: 1})
		p.Flush()
	default:
		for t0 := time.Now(); time.Since(t0) < 2*linkYield; {
		}
	}
	h.handled++
	select {
	case <-h.wrote:
		h.handledWhen <- h.handled
	default:
	}
	if h.left--; h.left > 0 {
		p.Send(0, &Envelope{Type: testType, Kind: KindP2P, Seq: 2})
		return
	}
	p.Node().Stop(0)
}

// Where a process's PEs take every P, a busy PE lets the link's writer that
// its flush woke run within a message or two, not when it goes idle (it
// held what it sent to other processes back for as long as it had work:
// CAMEL's acknowledgements came late and its piggybacked lists grew).
func TestABusyPELetsItsLinksRun(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	r := wakingRemote{queued: make(chan int, 1), wrote: make(chan int, 1)}
	h := &linkBusyHandler{left: 40, handledWhen: make(chan int, 1), wrote: r.wrote}
	n, err := NewNode(Config{NumPEs: 2, LocalPEs: 1, Remote: r}, func(p *PE) Handler { return h })
	require.NoError(t, err)
	require.True(t, n.PE(0).yieldForLinks)
	go func() { // the link's writer
		<-r.queued
		r.wrote <- 1
	}()
	n.Inject(0, Envelope{Type: testType, Kind: KindP2P, Seq: 0})
	n.Start()
	_, err = n.Wait()
	require.NoError(t, err)
	select {
	case k := <-h.handledWhen:
		require.LessOrEqual(t, k, 3, "the writer ran after the PE had handled %d of its 40 busy messages", k)
	default:
		t.Fatal("the writer ran only after the PE had handled all of its 40 busy messages")
	}
}
