package bench

import (
	"io"
	"log/slog"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/charmgo/charmgo/chare"
	"github.com/charmgo/charmgo/internal/crosscore"
)

// Each charmgo benchmark is a small chare program. Its main measures the
// pattern from inside (so PE start-up is left out) and the benchmark reports
// that as ns/op; the baselines run the same pattern on raw Go channels and on
// protoactor-go in the same process, so the ratios come from one run.

// Msg is the small payload every messaging benchmark sends.
type Msg struct {
	Seq  int64
	From int32
}

// newActorSystem makes a protoactor-go system that logs only errors (its
// default writes a line per system started).
func newActorSystem() *actor.ActorSystem {
	quiet := slog.New(slog.NewTextHandler(io.Discard, &slog.HandlerOptions{Level: slog.LevelError}))
	return actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return quiet }))
}

var (
	benchN       int
	benchElapsed time.Duration
)

func runProgram[C any](b *testing.B, main *chare.Type[C, []string], pes int) {
	runProgramWith(b, main, chare.Config{PEs: pes})
}

// programDefaults gives cfg the PEs' spin a program gets outside a test
// binary (chare.Config.SpinPolls: on where every PE has a core), which a
// test binary's default leaves off.
func programDefaults(cfg chare.Config) chare.Config {
	if cfg.SpinPolls == 0 && cfg.PEs <= runtime.GOMAXPROCS(0) && cfg.PEs <= runtime.NumCPU() {
		cfg.SpinPolls = chare.DefaultSpinPolls
	}
	return cfg
}

func runProgramWith[C any](b *testing.B, main *chare.Type[C, []string], cfg chare.Config) {
	b.Helper()
	benchN = b.N
	benchElapsed = 0
	res := chare.Run(main, programDefaults(cfg))
	if res.Err != nil || res.Code != 0 {
		b.Fatalf("run: code %d, %v", res.Code, res.Err)
	}
	if benchElapsed == 0 {
		b.Fatal("program did not report its time")
	}
	b.ReportMetric(float64(benchElapsed.Nanoseconds())/float64(b.N), "ns/op")
	var blocks uint64
	for _, s := range res.Stats.PEs {
		blocks += s.Blocks
	}
	// how often a PE blocked (and had to be woken through Go's
	// scheduler): a fast path that spins well blocks almost never
	b.ReportMetric(float64(blocks)/float64(b.N), "blocks/op")
}

// ---- 1. cross-PE ping-pong round trip ----

type PingMain struct {
	start   time.Time `msgpack:"-"` // the benchmark's clock
	Arr     chare.ArrayProxy[Pinger]
	Elapsed time.Duration // the ping-pong's time before the last pause
	Paused  time.Time     `msgpack:"-"`
}

type Pinger struct{ N int64 }

var (
	pingMain   = chare.NewMainType[PingMain]("bench.PingMain")
	pingers    = chare.NewType[Pinger, struct{}]("bench.Pinger")
	pingBall   *chare.Entry[Pinger, Msg]
	pingDone   *chare.Entry[PingMain, int64]
	pingPause  *chare.Entry[PingMain, int64]
	pingResume *chare.Entry[PingMain, struct{}]
	// pingCkptEvery: the ping-pong pauses for a checkpoint every this many
	// round trips (0: never); pingCkpts, pingCkptTime: how many it took
	// and how long they took, outside the ping-pong's time
	pingCkptEvery int
	pingCkpts     int
	pingCkptTime  time.Duration
)

func init() {
	pingBall = chare.NewEntry(pingers, (*Pinger).Ball)
	pingDone = chare.NewEntry(pingMain, (*PingMain).Done)
	pingPause = chare.NewEntry(pingMain, (*PingMain).Pause)
	pingResume = chare.NewEntry(pingMain, (*PingMain).Resume)
}

func (p *Pinger) Init(*chare.Ctx, struct{}) {}

func (p *Pinger) Ball(ctx *chare.Ctx, m Msg) {
	me := ctx.Index().C[0]
	if me == 0 {
		p.N++
		if p.N == int64(benchN) {
			pingDone.Send(ctx, pingMain.MainProxy(), p.N)
			return
		}
		if pingCkptEvery > 0 && p.N%int64(pingCkptEvery) == 0 {
			pingPause.Send(ctx, pingMain.MainProxy(), m.Seq+1)
			return
		}
	}
	pingBall.Send(ctx, chare.ThisArray[Pinger](ctx).At(int(1-me)), Msg{Seq: m.Seq + 1, From: me})
}

func (m *PingMain) Init(ctx *chare.Ctx, _ []string) {
	m.Arr = pingers.NewArray(ctx, []int{2}, struct{}{}, chare.RoundRobinMap()) // [0] on PE 0, [1] on PE 1
	m.start = time.Now()
	pingBall.Send(ctx, m.Arr.At(1), Msg{})
}

// Pause stops the clock and takes a checkpoint (the ping-pong is
// quiescent: its ball is here); Resume serves the ball again.
func (m *PingMain) Pause(ctx *chare.Ctx, _ int64) {
	m.Paused = time.Now()
	m.Elapsed += m.Paused.Sub(m.start)
	chare.Checkpoint(ctx, pingResume.CallbackTo(pingMain.MainProxy()))
}

func (m *PingMain) Resume(ctx *chare.Ctx, _ struct{}) {
	m.start = time.Now()
	pingCkpts++
	pingCkptTime += m.start.Sub(m.Paused)
	pingBall.Send(ctx, m.Arr.At(1), Msg{})
}

func (m *PingMain) Done(ctx *chare.Ctx, n int64) {
	benchElapsed = m.Elapsed + time.Since(m.start)
	ctx.Exit(0)
}

func BenchmarkPingPong_Charmgo(b *testing.B) {
	floor := crossCoreRoundTrips(1e5)
	runProgram(b, pingMain, 2)
	reportFloor(b, floor)
}

// pingCkptRounds is how many round trips the ping-pongs under message
// logging make between two checkpoints: every message stays in its
// sender's log until a checkpoint, so without them the log only grows,
// and the collector's work with it (the allocator's fresh memory, the
// marking of a heap of logged messages), which a run that checkpoints
// does not pay. 2^14 round trips are 3.6 MB of each PE's records under
// pessimist. The checkpoints' own time is left out of ns/op and
// reported beside it (ckpt-ms: the mean; ckpts: how many per run).
const pingCkptRounds = 1 << 14

// runPingPong runs the ping-pong under cfg, pausing for a checkpoint every
// `every` round trips (0: never).
func runPingPong(b *testing.B, cfg chare.Config, every int) {
	pingCkptEvery, pingCkpts, pingCkptTime = every, 0, 0
	defer func() { pingCkptEvery = 0 }()
	runProgramWith(b, pingMain, cfg)
	if every > 0 {
		b.ReportMetric(float64(pingCkpts), "ckpts")
		if pingCkpts > 0 {
			b.ReportMetric(float64(pingCkptTime.Milliseconds())/float64(pingCkpts), "ckpt-ms")
		}
	}
}

// The ping-pong without message logging, checkpointing as the ones with
// it do: their baseline.
func BenchmarkPingPong_CharmgoCkpt(b *testing.B) {
	runPingPong(b, chare.Config{PEs: 2}, pingCkptRounds)
}

// The same under message logging: every message is logged at its sender
// and its reception determined.
func BenchmarkPingPong_CharmgoSCMEL(b *testing.B) {
	runPingPong(b, chare.Config{PEs: 2, FT: "scmel"}, pingCkptRounds)
}

func BenchmarkPingPong_CharmgoCAMEL(b *testing.B) {
	runPingPong(b, chare.Config{PEs: 2, FT: "camel"}, pingCkptRounds)
}

// Under pessimist no reply commits: each continues its PE's run of
// deliveries from the other PE, whose count it carries (one sender: no
// event after the first).
func BenchmarkPingPong_CharmgoPessimist(b *testing.B) {
	runPingPong(b, chare.Config{PEs: 2, FT: "pessimist"}, pingCkptRounds)
}

func BenchmarkPingPong_Channels(b *testing.B) {
	ping, pong := make(chan Msg), make(chan Msg)
	go func() {
		for m := range ping {
			pong <- Msg{Seq: m.Seq + 1, From: 1}
		}
	}()
	b.ResetTimer()
	m := Msg{}
	for i := 0; i < b.N; i++ {
		ping <- m
		m = <-pong
	}
	b.StopTimer()
	close(ping)
}

// The machine's floor for a cross-core round trip: two goroutines, each
// on an OS thread of its own, bounce a counter through two cache lines by
// spinning. No scheduler, no queue: what any runtime whose PEs run on
// two cores pays at least. (A Go channel round trip does not cross cores:
// Go runs the two goroutines on one P, taking turns.) On a virtual
// machine it moves with where the host places the two vCPUs: here it
// is about 110 ns most of the time and about 540 ns for minutes at a
// time.
func BenchmarkPingPong_CrossCore(b *testing.B) {
	b.ResetTimer()
	crossCoreRoundTrips(b.N)
}

// crossCoreRoundTrips bounces a counter n times between two threads (see
// BenchmarkPingPong_CrossCore) and returns the time it took.
func crossCoreRoundTrips(n int) time.Duration { return crosscore.RoundTrips(n) }

// reportFloor adds the machine's cross-core round trip, measured just
// before (100,000 round trips), to a cross-PE benchmark's figures, so
// each run says what the machine gave it: a slow run with a slow floor
// is the machine's, one with a fast floor the runtime's.
func reportFloor(b *testing.B, measured time.Duration) {
	b.ReportMetric(float64(measured.Nanoseconds())/1e5, "floor-ns")
}

type paPonger struct{}

func (paPonger) Receive(ctx actor.Context) {
	if m, ok := ctx.Message().(*Msg); ok {
		ctx.Respond(&Msg{Seq: m.Seq + 1, From: 1})
	}
}

type paPinger struct {
	ponger *actor.PID
	left   int
	done   chan struct{}
}

func (p *paPinger) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *actor.Started:
	case string:
		ctx.Request(p.ponger, &Msg{})
	case *Msg:
		p.left--
		if p.left == 0 {
			close(p.done)
			return
		}
		ctx.Request(p.ponger, &Msg{Seq: m.Seq})
	}
}

func BenchmarkPingPong_Protoactor(b *testing.B) {
	sys := newActorSystem()
	ponger := sys.Root.Spawn(actor.PropsFromProducer(func() actor.Actor { return paPonger{} }))
	done := make(chan struct{})
	pinger := sys.Root.Spawn(actor.PropsFromProducer(func() actor.Actor { return &paPinger{ponger: ponger, left: b.N, done: done} }))
	b.ResetTimer()
	sys.Root.Send(pinger, "go")
	<-done
	b.StopTimer()
	sys.Shutdown()
}

// ---- 2. one-way streaming of small messages from many chares on PE 0 to
// chares on PE 1 ----

const (
	streamPairs = 64 // senders on PE 0, each with a receiver on PE 1
	streamBurst = 64 // messages a sender's entry method sends per invocation
)

type StreamMain struct {
	start   time.Time `msgpack:"-"` // the benchmark's clock
	Arr     chare.ArrayProxy[Streamer]
	Left    int           // messages still to send, all senders together
	Elapsed time.Duration // the rounds' time before this one
}

type Streamer struct{ Got int }

var (
	streamMain = chare.NewMainType[StreamMain]("bench.StreamMain")
	streamers  = chare.NewType[Streamer, struct{}]("bench.Streamer")
	streamTick *chare.Entry[Streamer, int]
	streamRecv *chare.Entry[Streamer, Msg]
	streamDone *chare.Entry[StreamMain, struct{}]
	// streamResume, streamCkptEvery: the stream pauses for a checkpoint
	// every streamCkptEvery messages (0: never)
	streamResume    *chare.Entry[StreamMain, struct{}]
	streamCkptEvery int
)

func init() {
	streamTick = chare.NewEntry(streamers, (*Streamer).Tick)
	streamRecv = chare.NewEntry(streamers, (*Streamer).Recv)
	streamDone = chare.NewEntry(streamMain, (*StreamMain).Done)
	streamResume = chare.NewEntry(streamMain, (*StreamMain).Resume)
}

// Tick sends a burst of messages to this sender's receiver on the other PE
// (like a producer loop on a channel), then re-arms itself with a local send
// so other senders interleave.
func (s *Streamer) Tick(ctx *chare.Ctx, left int) {
	me := int(ctx.Index().C[0])
	arr := chare.ThisArray[Streamer](ctx)
	to := arr.At(me + streamPairs)
	n := min(left, streamBurst)
	for i := 0; i < n; i++ {
		streamRecv.Send(ctx, to, Msg{Seq: int64(left - i), From: int32(me)})
	}
	if left > n {
		streamTick.Send(ctx, arr.At(me), left-n)
	}
}

func (s *Streamer) Init(*chare.Ctx, struct{}) {}

func (s *Streamer) Recv(ctx *chare.Ctx, m Msg) {
	s.Got++
	if m.Seq == 1 { // this receiver's last message
		chare.Contribute(ctx, chare.Barrier, struct{}{}, streamDone.CallbackTo(streamMain.MainProxy()))
	}
}

// Senders join the barrier once at the start so it counts every element.
func (s *Streamer) Joins(ctx *chare.Ctx, _ struct{}) {
	chare.Contribute(ctx, chare.Barrier, struct{}{}, streamDone.CallbackTo(streamMain.MainProxy()))
}

var streamJoin = chare.NewEntry(streamers, (*Streamer).Joins)

func (m *StreamMain) Init(ctx *chare.Ctx, _ []string) {
	m.Arr = streamers.NewArray(ctx, []int{2 * streamPairs}, struct{}{}) // block map on 2 PEs: senders on PE 0, receivers on PE 1
	m.Left = benchN
	m.round(ctx)
}

// round streams streamCkptEvery messages (all of them if 0), every
// sender the same share.
func (m *StreamMain) round(ctx *chare.Ctx) {
	n := m.Left
	if streamCkptEvery > 0 {
		n = min(n, streamCkptEvery)
	}
	m.Left -= n
	m.start = time.Now()
	for i := 0; i < streamPairs; i++ {
		streamJoin.Send(ctx, m.Arr.At(i), struct{}{})
		streamTick.Send(ctx, m.Arr.At(i), n/streamPairs)
	}
}

// Done: a round's messages all arrived. The clock stops for the
// checkpoint between two rounds.
func (m *StreamMain) Done(ctx *chare.Ctx, _ struct{}) {
	m.Elapsed += time.Since(m.start)
	if m.Left > 0 {
		chare.Checkpoint(ctx, streamResume.CallbackTo(streamMain.MainProxy()))
		return
	}
	benchElapsed = m.Elapsed
	ctx.Exit(0)
}

func (m *StreamMain) Resume(ctx *chare.Ctx, _ struct{}) { m.round(ctx) }

func BenchmarkStream_Charmgo(b *testing.B) { runStream(b, chare.Config{PEs: 2}) }

func BenchmarkStream_CharmgoSCMEL(b *testing.B) { runStream(b, chare.Config{PEs: 2, FT: "scmel"}) }

func BenchmarkStream_CharmgoCAMEL(b *testing.B) { runStream(b, chare.Config{PEs: 2, FT: "camel"}) }

func BenchmarkStream_CharmgoPessimist(b *testing.B) {
	runStream(b, chare.Config{PEs: 2, FT: "pessimist"})
}

// streamRound is how many messages a stream under message logging
// carries between two checkpoints: every message stays in its sender's
// log until a checkpoint, so without them a run measured a heap that grew
// with b.N, and the collector's work with it (Stream_CharmgoSCMEL took 412
// ns a message for 2.9 M messages and 615 for 4.9 M: benchtable's two
// modes). The checkpoints' time is left out, as the ping-pongs' is.
// Without message logging a stream is one round.
const streamRound = 1 << 18

func runStream(b *testing.B, cfg chare.Config) {
	b.ReportAllocs()
	// the stream crosses cores too: 34–40 ns a message in a slow-floor
	// period against 24–28 on a fast floor (benchtable: "two modes")
	floor := crossCoreRoundTrips(1e5)
	n := max(b.N-b.N%streamPairs, streamPairs)
	streamCkptEvery = 0
	if cfg.FT != "" {
		streamCkptEvery = streamRound
	}
	defer func() { streamCkptEvery = 0 }()
	benchN, benchElapsed = n, 0
	res := chare.Run(streamMain, programDefaults(cfg))
	if res.Err != nil || res.Code != 0 {
		b.Fatal(res.Code, res.Err)
	}
	b.ReportMetric(float64(benchElapsed.Nanoseconds())/float64(n), "ns/op")
	b.ReportMetric(float64(n)/benchElapsed.Seconds(), "msgs/s")
	reportFloor(b, floor)
}

func BenchmarkStream_BufferedChannel(b *testing.B) {
	b.ReportAllocs()
	ch := make(chan Msg, 1024)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		got := 0
		for range ch {
			got++
		}
	}()
	b.ResetTimer()
	start := time.Now()
	for i := 0; i < b.N; i++ {
		ch <- Msg{Seq: int64(i)}
	}
	close(ch)
	wg.Wait()
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "msgs/s")
}

type paCounter struct {
	want, got int
	done      chan struct{}
}

func (c *paCounter) Receive(ctx actor.Context) {
	if _, ok := ctx.Message().(*Msg); ok {
		c.got++
		if c.got == c.want {
			close(c.done)
		}
	}
}

func BenchmarkStream_Protoactor(b *testing.B) {
	b.ReportAllocs()
	sys := newActorSystem()
	done := make(chan struct{})
	pid := sys.Root.Spawn(actor.PropsFromProducer(func() actor.Actor { return &paCounter{want: b.N, done: done} }))
	b.ResetTimer()
	start := time.Now()
	for i := 0; i < b.N; i++ {
		sys.Root.Send(pid, &Msg{Seq: int64(i)})
	}
	<-done
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "msgs/s")
	b.StopTimer()
	sys.Shutdown()
}

// ---- same-PE send: allocations of the local path ----

type LocalMain struct {
	start time.Time `msgpack:"-"` // the benchmark's clock
}

type LocalPair struct{ Left int }

var (
	localMain = chare.NewMainType[LocalMain]("bench.LocalMain")
	localT    = chare.NewType[LocalPair, struct{}]("bench.LocalPair")
	localHop  *chare.Entry[LocalPair, *Msg]
	localDone *chare.Entry[LocalMain, struct{}]
)

func init() {
	localHop = chare.NewEntry(localT, (*LocalPair).Hop)
	localDone = chare.NewEntry(localMain, (*LocalMain).Done)
}

func (l *LocalPair) Init(*chare.Ctx, struct{}) {}

// Hop passes one message back and forth between two chares of one PE. The
// payload is a pointer that is handed on, so the runtime's own cost shows.
func (l *LocalPair) Hop(ctx *chare.Ctx, m *Msg) {
	m.Seq--
	if m.Seq == 0 {
		localDone.Send(ctx, localMain.MainProxy(), struct{}{})
		return
	}
	localHop.Send(ctx, chare.ThisArray[LocalPair](ctx).At(int(1-ctx.Index().C[0])), m)
}

func (m *LocalMain) Init(ctx *chare.Ctx, _ []string) {
	arr := localT.NewArray(ctx, []int{2}, struct{}{})
	m.start = time.Now()
	localHop.Send(ctx, arr.At(0), &Msg{Seq: int64(benchN)})
}

func (m *LocalMain) Done(ctx *chare.Ctx, _ struct{}) {
	benchElapsed = time.Since(m.start)
	ctx.Exit(0)
}

func BenchmarkLocalSend_Charmgo(b *testing.B) {
	b.ReportAllocs()
	runProgram(b, localMain, 1)
}

// Without the spin: every message parks a PE and wakes the other.
func BenchmarkPingPong_CharmgoNoSpin(b *testing.B) {
	runProgramWith(b, pingMain, chare.Config{PEs: 2, SpinPolls: -1})
}

type PingPMain struct {
	start time.Time `msgpack:"-"` // the benchmark's clock
}

type PingerP struct{ N int64 }

var (
	pingPMain = chare.NewMainType[PingPMain]("bench.PingPMain")
	pingersP  = chare.NewType[PingerP, struct{}]("bench.PingerP")
	pingBallP *chare.Entry[PingerP, *Msg]
	pingDoneP *chare.Entry[PingPMain, int64]
)

func init() {
	pingBallP = chare.NewEntry(pingersP, (*PingerP).Ball)
	pingDoneP = chare.NewEntry(pingPMain, (*PingPMain).Done)
}

func (p *PingerP) Init(*chare.Ctx, struct{}) {}

// Ball with a pointer payload that is handed back and forth: no allocation
// per message.
func (p *PingerP) Ball(ctx *chare.Ctx, m *Msg) {
	me := ctx.Index().C[0]
	if me == 0 {
		p.N++
		if p.N == int64(benchN) {
			pingDoneP.Send(ctx, pingPMain.MainProxy(), p.N)
			return
		}
	}
	m.Seq++
	pingBallP.Send(ctx, chare.ThisArray[PingerP](ctx).At(int(1-me)), m)
}

func (m *PingPMain) Init(ctx *chare.Ctx, _ []string) {
	arr := pingersP.NewArray(ctx, []int{2}, struct{}{}, chare.RoundRobinMap())
	m.start = time.Now()
	pingBallP.Send(ctx, arr.At(1), &Msg{})
}

func (m *PingPMain) Done(ctx *chare.Ctx, n int64) {
	benchElapsed = time.Since(m.start)
	ctx.Exit(0)
}

func BenchmarkPingPong_CharmgoPtr(b *testing.B) { runProgram(b, pingPMain, 2) }
