package bench

import (
	"bufio"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/remote"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/charmgo/charmgo/chare"
	"github.com/charmgo/charmgo/pe"
	"github.com/charmgo/charmgo/pe/cluster"
)

// Between processes on this machine's loopback: charmgo's chares in two
// processes (PEs 0 and 1 in processes 0 and 1), against the three
// carriers the data plane could use, each measured carrying the same
// charmgo frames to a peer process: a plain TCP connection with
// length-prefixed frames (what charmgo uses), a grpc-go bidirectional
// stream, and protoactor-go remote (frames as BytesValue messages), and
// protoactor-go remote with a message per send, as its users send.
//
// The processes are this test binary, run again in the role the
// environment names (benchRoleEnv).

const benchRoleEnv = "CHARMGO_BENCH_ROLE"

func TestMain(m *testing.M) {
	if role := os.Getenv(benchRoleEnv); role != "" {
		os.Exit(runRole(role, os.Args[1:]))
	}
	os.Exit(m.Run())
}

// runRole runs this process as a chare program of a job ("ping N",
// "stream N") or as a carrier's peer ("tcp", "grpc", "actor"), which
// prints its address and serves until its standard input closes.
func runRole(role string, args []string) int {
	f := strings.Fields(role)
	switch f[0] {
	case "ping", "stream":
		benchN, _ = strconv.Atoi(f[1])
		cfg, err := chare.ParseFlags(args)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 2
		}
		var res chare.Result
		if f[0] == "ping" {
			res = chare.Run(pingMain, cfg)
		} else {
			res = chare.Run(streamMain, cfg)
		}
		if res.Err != nil || res.Code != 0 {
			fmt.Fprintln(os.Stderr, res.Code, res.Err)
			return 1
		}
		if res.Process == 0 {
			fmt.Printf("elapsed %d\n", benchElapsed.Nanoseconds())
		}
		return 0
	case "tcp":
		return serveTCP()
	case "grpc":
		return serveGRPC()
	case "actor":
		return serveActor()
	}
	fmt.Fprintln(os.Stderr, "no role", role)
	return 2
}

// ---- the chares, in two processes ----

func runJob(b *testing.B, role string, n int, flags ...string) time.Duration {
	b.Helper()
	var out, errb strings.Builder
	args := append([]string{"+p", "2", "++n", "2", "++ppn", "1"}, flags...)
	if runtime.NumCPU() >= 4 {
		// the spin a program gets outside a test binary (test binaries
		// do not spin): each of the two processes takes half the host's
		// cores, and its PE spins where a P is left for the link's reader
		args = append(args, "--spin", strconv.Itoa(chare.DefaultSpinPolls))
	}
	l := cluster.Launch{Path: os.Args[0], Args: args, Name: role, Procs: 2,
		Env: []string{fmt.Sprintf("%s=%s %d", benchRoleEnv, role, n), "GORACE=atexit_sleep_ms=0"}, Stdout: &out, Stderr: &errb}
	if code := l.Run(); code != 0 {
		b.Fatalf("%s: exit %d: %s", role, code, errb.String())
	}
	var ns int64
	if _, err := fmt.Sscanf(out.String(), "elapsed %d", &ns); err != nil {
		b.Fatalf("%s: %q: %v", role, out.String(), err)
	}
	return time.Duration(ns)
}

// BenchmarkProcs_PingPong_Charmgo: the round trip of a small message
// between chares in two processes.
func BenchmarkProcs_PingPong_Charmgo(b *testing.B) {
	d := runJob(b, "ping", b.N)
	b.ReportMetric(float64(d.Nanoseconds())/float64(b.N), "ns/op")
}

// The same under message logging (named FTProcs: each launches a job of
// two processes, which the test suite's bench tier, running every
// benchmark once, leaves out). Under pessimist each reply commits
// how far its PE's deliveries went to the event logger first: with two
// processes, a round trip to the other process (which holds this one's
// events) before the message leaves.
func BenchmarkFTProcs_PingPong_CharmgoSCMEL(b *testing.B) {
	d := runJob(b, "ping", b.N, "--ft", "scmel")
	b.ReportMetric(float64(d.Nanoseconds())/float64(b.N), "ns/op")
}

func BenchmarkFTProcs_PingPong_CharmgoCAMEL(b *testing.B) {
	d := runJob(b, "ping", b.N, "--ft", "camel")
	b.ReportMetric(float64(d.Nanoseconds())/float64(b.N), "ns/op")
}

func BenchmarkFTProcs_PingPong_CharmgoPessimist(b *testing.B) {
	d := runJob(b, "ping", b.N, "--ft", "pessimist")
	b.ReportMetric(float64(d.Nanoseconds())/float64(b.N), "ns/op")
}

// BenchmarkProcs_Stream_Charmgo: small messages one way, from 64 chares
// in process 0 to 64 in process 1.
func BenchmarkProcs_Stream_Charmgo(b *testing.B) { streamJob(b) }

// The same under message logging (bandwidth: under pessimist a sender
// that delivered since it last sent commits first).
func BenchmarkFTProcs_Stream_CharmgoSCMEL(b *testing.B)     { streamJob(b, "--ft", "scmel") }
func BenchmarkFTProcs_Stream_CharmgoCAMEL(b *testing.B)     { streamJob(b, "--ft", "camel") }
func BenchmarkFTProcs_Stream_CharmgoPessimist(b *testing.B) { streamJob(b, "--ft", "pessimist") }

func streamJob(b *testing.B, flags ...string) {
	n := max(b.N-b.N%streamPairs, streamPairs)
	d := runJob(b, "stream", n, flags...)
	b.ReportMetric(float64(d.Nanoseconds())/float64(n), "ns/op")
	b.ReportMetric(float64(n)/d.Seconds(), "msgs/s")
}

// ---- carriers: peers ----

// perFrame is how many small messages a streaming frame carries.
const perFrame = 100

var benchMsgType = pe.RegisterType(pe.TypeInfo{
	Name:   "bench.carrier.msg",
	Encode: func(v any) ([]byte, error) { return binary.LittleEndian.AppendUint64(nil, uint64(v.(int64))), nil },
	Decode: func(b []byte) (any, error) { return int64(binary.LittleEndian.Uint64(b)), nil },
})

// frameOf makes a charmgo frame of k small messages.
func frameOf(k int) []byte {
	f := pe.AppendFrameHeader(nil)
	for i := 0; i < k; i++ {
		env := pe.Envelope{Type: benchMsgType, Kind: pe.KindP2P, Index: pe.Idx(i), Payload: int64(i)}
		f, _ = pe.AppendFrameEntry(f, 1, &env)
	}
	pe.FinishFrame(f, 0, k)
	return f
}

// countFrame decodes a frame as charmgo's reader does, and says how many
// messages it held (0 for the end of a stream).
func countFrame(f []byte) int {
	_, n, size, err := pe.FrameHeader(f)
	if err != nil || len(f) != pe.FrameHeaderSize+size {
		panic(fmt.Sprintf("bad frame: %v", err))
	}
	if err := pe.DecodeFrameBody(f[pe.FrameHeaderSize:], n, 0, 2, 0, func(int, *pe.Envelope) {}); err != nil {
		panic(err)
	}
	return n
}

// serve prints the peer's address and waits for its standard input to
// close.
func serve(addr string) int {
	fmt.Println(addr)
	io.Copy(io.Discard, os.Stdin)
	return 0
}

// serveTCP echoes every frame of one entry and counts the others; the end
// of a stream (an empty frame) is answered with an empty frame.
func serveTCP() int {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 1
	}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.(*net.TCPConn).SetNoDelay(true)
			go func() {
				r, w := bufio.NewReader(c), c
				var hdr [pe.FrameHeaderSize]byte
				for {
					if _, err := io.ReadFull(r, hdr[:]); err != nil {
						return
					}
					_, _, size, _ := pe.FrameHeader(hdr[:])
					f := make([]byte, pe.FrameHeaderSize+size)
					copy(f, hdr[:])
					if _, err := io.ReadFull(r, f[pe.FrameHeaderSize:]); err != nil {
						return
					}
					if n := countFrame(f); n <= 1 {
						w.Write(f)
					}
				}
			}()
		}
	}()
	return serve(ln.Addr().String())
}

// rawCodec carries []byte as they are: gRPC without protobuf.
type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error)      { return *v.(*[]byte), nil }
func (rawCodec) Unmarshal(data []byte, v any) error { *v.(*[]byte) = data; return nil }
func (rawCodec) Name() string                       { return "charmgo-raw" }

var frameService = grpc.ServiceDesc{
	ServiceName: "charmgo.bench.Frames",
	HandlerType: (*any)(nil),
	Streams: []grpc.StreamDesc{{StreamName: "Frames", ServerStreams: true, ClientStreams: true,
		Handler: func(_ any, s grpc.ServerStream) error {
			for {
				var f []byte
				if err := s.RecvMsg(&f); err != nil {
					return nil
				}
				if n := countFrame(f); n <= 1 {
					if err := s.SendMsg(&f); err != nil {
						return err
					}
				}
			}
		}}},
}

func serveGRPC() int {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 1
	}
	s := grpc.NewServer(grpc.ForceServerCodec(rawCodec{}))
	s.RegisterService(&frameService, struct{}{})
	go s.Serve(ln)
	return serve(ln.Addr().String())
}

// serveActor runs protoactor-go remote with an actor that echoes frames
// of one entry and an end marker, and counts the rest.
func serveActor() int {
	sys := newActorSystem()
	r := remote.NewRemote(sys, remote.Configure("127.0.0.1", 0))
	r.Start()
	props := actor.PropsFromFunc(func(ctx actor.Context) {
		switch m := ctx.Message().(type) {
		case *wrapperspb.BytesValue:
			if len(m.Value) == 0 || countFrame(m.Value) <= 1 {
				ctx.Respond(m)
			}
		case *wrapperspb.Int64Value: // a message of its own, as protoactor's users send
			if m.Value < 0 {
				ctx.Respond(m)
			}
		}
	})
	if _, err := sys.Root.SpawnNamed(props, "echo"); err != nil {
		return 1
	}
	return serve(sys.Address())
}

// peer starts a carrier's peer process and gives its address.
func peer(b *testing.B, role string) string {
	b.Helper()
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), benchRoleEnv+"="+role, "GORACE=atexit_sleep_ms=0")
	in, err := cmd.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { in.Close(); cmd.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		b.Fatal(err)
	}
	return strings.TrimSpace(line)
}

// ---- carriers: plain TCP ----

func tcpConn(b *testing.B) (net.Conn, *bufio.Reader) {
	c, err := net.Dial("tcp", peer(b, "tcp"))
	if err != nil {
		b.Fatal(err)
	}
	c.(*net.TCPConn).SetNoDelay(true)
	b.Cleanup(func() { c.Close() })
	return c, bufio.NewReader(c)
}

func readFrame(b *testing.B, r *bufio.Reader, hdr []byte) {
	if _, err := io.ReadFull(r, hdr[:pe.FrameHeaderSize]); err != nil {
		b.Fatal(err)
	}
	_, _, size, _ := pe.FrameHeader(hdr)
	if _, err := r.Discard(size); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkProcs_PingPong_TCP: a frame of one small message to the peer
// process and back over a plain TCP connection (the baseline of figure 1).
func BenchmarkProcs_PingPong_TCP(b *testing.B) {
	c, r := tcpConn(b)
	f := frameOf(1)
	hdr := make([]byte, pe.FrameHeaderSize)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		c.Write(f)
		readFrame(b, r, hdr)
	}
}

// BenchmarkProcs_Stream_TCP: frames of 100 small messages, one way.
func BenchmarkProcs_Stream_TCP(b *testing.B) {
	c, r := tcpConn(b)
	f, end := frameOf(perFrame), frameOf(0)
	hdr := make([]byte, pe.FrameHeaderSize)
	frames := max(b.N/perFrame, 1)
	w := bufio.NewWriterSize(c, 64<<10)
	b.ResetTimer()
	for i := 0; i < frames; i++ {
		w.Write(f)
	}
	w.Write(end)
	w.Flush()
	readFrame(b, r, hdr)
	b.StopTimer()
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(frames*perFrame), "ns/msg")
	b.ReportMetric(float64(frames*perFrame)/b.Elapsed().Seconds(), "msgs/s")
}

// ---- carriers: a grpc-go bidirectional stream ----

func grpcStream(b *testing.B) grpc.ClientStream {
	conn, err := grpc.Dial(peer(b, "grpc"), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { conn.Close() })
	s, err := conn.NewStream(context.Background(), &frameService.Streams[0], "/charmgo.bench.Frames/Frames", grpc.ForceCodec(rawCodec{}))
	if err != nil {
		b.Fatal(err)
	}
	return s
}

// BenchmarkProcs_PingPong_GRPC: a frame of one message and back over a
// grpc-go bidirectional stream.
func BenchmarkProcs_PingPong_GRPC(b *testing.B) {
	s := grpcStream(b)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		f := frameOf(1) // grpc-go may keep a buffer after SendMsg: a new one each time
		if err := s.SendMsg(&f); err != nil {
			b.Fatal(err)
		}
		var got []byte
		if err := s.RecvMsg(&got); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkProcs_Stream_GRPC: frames of 100 messages, one way, over a
// grpc-go stream (figure 2's batched gRPC baseline).
func BenchmarkProcs_Stream_GRPC(b *testing.B) {
	s := grpcStream(b)
	frames := max(b.N/perFrame, 1)
	proto := frameOf(perFrame)
	b.ResetTimer()
	for i := 0; i < frames; i++ {
		f := append([]byte(nil), proto...) // as a writer would: a new frame each time
		if err := s.SendMsg(&f); err != nil {
			b.Fatal(err)
		}
	}
	end := frameOf(0)
	s.SendMsg(&end)
	var got []byte
	if err := s.RecvMsg(&got); err != nil {
		b.Fatal(err)
	}
	b.StopTimer()
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(frames*perFrame), "ns/msg")
	b.ReportMetric(float64(frames*perFrame)/b.Elapsed().Seconds(), "msgs/s")
}

// ---- carriers: protoactor-go remote ----

// actorPeer starts the peer and a local actor system with remote. Its
// endpoint writer batches at most 100 messages: with its default (1,000)
// a batch of frames exceeds gRPC's 4 MB message limit, and protoactor-go
// drops the batch without a word (the stream then times out).
func actorPeer(b *testing.B) (*actor.ActorSystem, *actor.PID) {
	addr := peer(b, "actor")
	sys := newActorSystem()
	r := remote.NewRemote(sys, remote.Configure("127.0.0.1", 0, remote.WithEndpointWriterBatchSize(100)))
	r.Start()
	b.Cleanup(func() { r.Shutdown(false); sys.Shutdown() })
	return sys, actor.NewPID(addr, "echo")
}

// BenchmarkProcs_PingPong_Protoactor: a frame of one message and back
// through protoactor-go remote (request and response).
func BenchmarkProcs_PingPong_Protoactor(b *testing.B) {
	sys, pid := actorPeer(b)
	f := &wrapperspb.BytesValue{Value: frameOf(1)}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := sys.Root.RequestFuture(pid, f, 10*time.Second).Result(); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkProcs_Stream_ProtoactorFrames: frames of 100 messages as
// BytesValue, one way, through protoactor-go remote.
func BenchmarkProcs_Stream_ProtoactorFrames(b *testing.B) {
	sys, pid := actorPeer(b)
	frames := max(b.N/perFrame, 1)
	f := &wrapperspb.BytesValue{Value: frameOf(perFrame)}
	b.ResetTimer()
	for i := 0; i < frames; i++ {
		sys.Root.Send(pid, f)
	}
	if _, err := sys.Root.RequestFuture(pid, &wrapperspb.BytesValue{}, time.Minute).Result(); err != nil {
		b.Fatal(err)
	}
	b.StopTimer()
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(frames*perFrame), "ns/msg")
	b.ReportMetric(float64(frames*perFrame)/b.Elapsed().Seconds(), "msgs/s")
}

// BenchmarkProcs_Stream_ProtoactorMsgs: a small message per send, one
// way, through protoactor-go remote, as its users send (figure 2).
func BenchmarkProcs_Stream_ProtoactorMsgs(b *testing.B) {
	sys, pid := actorPeer(b)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		sys.Root.Send(pid, &wrapperspb.Int64Value{Value: int64(i)})
	}
	if _, err := sys.Root.RequestFuture(pid, &wrapperspb.Int64Value{Value: -1}, time.Minute).Result(); err != nil {
		b.Fatal(err)
	}
	b.StopTimer()
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N), "ns/msg")
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
}
