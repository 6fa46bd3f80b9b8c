package cluster

import (
	"bytes"
	"crypto/tls"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"os"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/charmgo/charmgo/pe"
)

// token is a message passed around the PEs of a job.
var tokenType = pe.RegisterType(pe.TypeInfo{
	Name:   "cluster.test.token",
	Encode: func(v any) ([]byte, error) { return binary.LittleEndian.AppendUint64(nil, v.(uint64)), nil },
	Append: func(dst []byte, v any) ([]byte, error) { return binary.LittleEndian.AppendUint64(dst, v.(uint64)), nil },
	Decode: func(b []byte) (any, error) {
		if len(b) != 8 {
			return nil, fmt.Errorf("token: %d bytes", len(b))
		}
		return binary.LittleEndian.Uint64(b), nil
	},
})

// relay passes every token to the next PE, until it has made hops hops
// (then it stops the job); sum adds up what it saw.
type relay struct {
	hops uint64
	seen *atomic.Uint64
}

func (r relay) Handle(p *pe.PE, env *pe.Envelope) {
	n := env.Payload.(uint64)
	r.seen.Add(1)
	if n >= r.hops {
		p.Node().Stop(0)
		return
	}
	p.Send((p.ID()+1)%p.NumPEs(), &pe.Envelope{Type: tokenType, Kind: pe.KindP2P, Payload: n + 1})
}

// The tests run this test binary itself as the processes of a job
// (cluster.Launch starts them, as charmrun does): one actor system and
// one set of listeners per process, as in a real job.
const childEnv = "CLUSTER_TEST_CHILD" // "pes hops attack"

func TestMain(m *testing.M) {
	if v := os.Getenv(childEnv); v != "" {
		os.Exit(testProcess(v))
	}
	if dir := os.Getenv(endingEnv); dir != "" {
		os.Exit(endingProcess(dir))
	}
	if dir := os.Getenv(hungEnv); dir != "" {
		os.Exit(hungProcess(dir))
	}
	if os.Getenv(lostNoticeEnv) != "" {
		os.Exit(lostNoticeProcess())
	}
	if os.Getenv(progressEnv) != "" {
		os.Exit(progressProcess())
	}
	if dir := os.Getenv(unlistedEnv); dir != "" {
		os.Exit(unlistedProcess(dir))
	}
	os.Exit(m.Run())
}

// testProcess is one process of a test job: it joins, passes a token hops times
// around the job's PEs, and prints how many hops its PEs saw. With
// attack, process 0 first connects to the job's listeners as a stranger
// would, and prints what happened.
func testProcess(spec string) int {
	var pes int
	var hops uint64
	var attack bool
	var burst, strangers int
	fmt.Sscan(spec, &pes, &hops, &attack, &burst, &strangers)
	rank, _ := strconv.Atoi(os.Getenv(RankEnv))
	procs, _ := strconv.Atoi(os.Getenv(ProcsEnv))
	secret, err := ParseSecret(os.Getenv(SecretEnv))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	core := zapcore.NewCore(zapcore.NewConsoleEncoder(zap.NewDevelopmentEncoderConfig()), zapcore.Lock(os.Stderr), zapcore.WarnLevel)
	rv := &Charmrun{Addr: os.Getenv(CharmrunEnv), Secret: secret, Rank: rank}
	var handshake time.Duration
	if strangers > 0 {
		handshake = floodHandshake
	}
	j, err := Join(Config{Rank: rank, Procs: procs, PEs: pes, Secret: secret, ConnectTimeout: 20 * time.Second,
		Rendezvous: rv, Types: pe.TypesDigest(), Log: zap.New(core), HandshakeTimeout: handshake})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer j.Close()
	if attack && rank == 0 {
		if err := attackJob(j.Members()); err != nil {
			fmt.Println("attack:", err)
		} else {
			fmt.Println("attack: every stranger refused")
		}
	}
	if strangers > 0 && rank == 0 {
		for _, m := range j.Members()[1:] {
			for what, addr := range map[string]string{"data": m.Data, "control": m.Control} {
				if err := floodListener(addr, strangers, floodHandshake); err != nil {
					fmt.Printf("flood of %s listener of %v: %v\n", what, m, err)
				} else {
					fmt.Printf("flood of %s listener: bounded\n", what)
				}
			}
		}
	}
	var seen atomic.Uint64
	first, count := j.PEs()
	node, err := pe.NewNode(pe.Config{NumPEs: pes, FirstPE: first, LocalPEs: count, Remote: j},
		func(*pe.PE) pe.Handler {
			if burst > 0 {
				return &flood{each: burst, seen: &seen}
			}
			return relay{hops: hops, seen: &seen}
		})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	j.Run(node)
	switch {
	case burst > 0: // every PE floods every other
		for p := first; p < first+count; p++ {
			node.Inject(p, pe.Envelope{Type: tokenType, Kind: pe.KindSystem, Payload: uint64(0)})
		}
	case rank == 0:
		node.Inject(0, pe.Envelope{Type: tokenType, Kind: pe.KindP2P, Payload: uint64(0)})
	}
	node.Start()
	code, ok := endProcess(rank, j, node)
	if ok {
		fmt.Println("seen", seen.Load())
	}
	return code
}

// endProcess waits for the end of a test process's run (a hang ends it
// in 30 s, with every goroutine's stack) and its part of the job's end:
// the run's exit code, and whether both went well (if not, it said why).
func endProcess(rank int, j *Job, node *pe.Node) (int, bool) {
	go func() {
		select {
		case <-node.Done():
		case <-time.After(30 * time.Second):
			fmt.Fprintf(os.Stderr, "process %d: the job hangs after 30s\n", rank)
			pprof.Lookup("goroutine").WriteTo(os.Stderr, 1)
			os.Exit(3)
		}
	}()
	code, err := node.Wait()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1, false
	}
	if _, err := j.Finish(nil, 10*time.Second); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1, false
	}
	return code, true
}

// attackJob connects to every listener of the job without its secret:
// with garbage, with a well-formed greeting under a wrong secret, and on
// the control plane without a certificate and with another job's. Each
// must be refused.
func attackJob(members []Member) error {
	wrong, err := NewSecret()
	if err != nil {
		return err
	}
	wrongTLS, err := wrong.TLS()
	if err != nil {
		return err
	}
	closed := func(c net.Conn) error {
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		var b [128]byte
		for {
			if _, err := c.Read(b[:]); err != nil {
				if ne, ok := err.(net.Error); ok && ne.Timeout() {
					return fmt.Errorf("%s kept a stranger's connection open", c.RemoteAddr())
				}
				return nil
			}
		}
	}
	for _, m := range members {
		c, err := net.Dial("tcp", m.Data)
		if err != nil {
			return err
		}
		c.Write([]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n" + string(make([]byte, 64))))
		if err := closed(c); err != nil {
			return err
		}
		c.Close()
		if c, err = net.Dial("tcp", m.Data); err != nil {
			return err
		}
		if err := dialHandshake(c, wrong, 1, uint32(m.Rank)); err == nil || !strings.Contains(err.Error(), "could not prove the job's secret") {
			return fmt.Errorf("data plane of %v with a wrong secret: %v", m, err)
		}
		c.Close()
		if c, err := tls.Dial("tcp", m.Control, &tls.Config{InsecureSkipVerify: true}); err == nil {
			if err := closed(c); err != nil {
				return err
			}
			c.Close()
		}
		if _, err := tls.Dial("tcp", m.Control, wrongTLS); err == nil {
			return fmt.Errorf("control plane of %v took another job's certificate", m)
		}
	}
	return nil
}

// flooders is how many silent strangers a flood test sends: 40 more than
// a listener holds (in a handshake, or waiting for a turn).
const flooders = MaxHandshakes + MaxHandshakeQueue + 40

// floodHandshake is the handshake timeout of the processes a flood test
// starts (DefaultHandshakeTimeout would make it wait 10 s).
const floodHandshake = 500 * time.Millisecond

// floodListener opens n connections to addr that say nothing, as a flood of
// strangers would. The listener must close the ones past MaxHandshakes and
// MaxHandshakeQueue at once (within a fifth of timeout), and every one
// (those waiting for a turn too) within timeout and a margin for a busy
// machine.
func floodListener(addr string, n int, timeout time.Duration) error {
	conns := make([]net.Conn, 0, n)
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	// each connection's time counts from its own dial (opening hundreds
	// takes a while under the race detector)
	closedAt := make(chan time.Duration, n)
	for range n {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			return err
		}
		conns = append(conns, c)
		start := time.Now()
		go func() {
			c.SetReadDeadline(start.Add(timeout + 5*time.Second))
			var b [64]byte
			for {
				if _, err := c.Read(b[:]); err != nil {
					if ne, ok := err.(net.Error); ok && ne.Timeout() {
						closedAt <- -1
						return
					}
					closedAt <- time.Since(start)
					return
				}
			}
		}()
	}
	fast := 0
	for range n {
		d := <-closedAt
		if d < 0 {
			return fmt.Errorf("a silent connection was kept open for %v (handshake timeout %v)", timeout+5*time.Second, timeout)
		}
		if d < timeout/5 {
			fast++
		}
	}
	if held := MaxHandshakes + MaxHandshakeQueue; fast < n-held {
		return fmt.Errorf("%d of %d silent connections closed at once; %d held at a time at most", fast, n, held)
	}
	return nil
}

// flood sends each messages to every other PE, in batches of every size
// from 1 up (each handled message of the system lane starts one), and
// counts what it receives; PE 0 stops the job once every PE got all.
type flood struct {
	each     int
	seen     *atomic.Uint64
	got      int
	finished int // PE 0: PEs that got all theirs
}

func (f *flood) Handle(p *pe.PE, env *pe.Envelope) {
	n := p.NumPEs()
	switch {
	case env.Kind == pe.KindSystem && env.Payload.(uint64) == 0: // start
		for sent, size := 0, 1; sent < f.each; size = size%97 + 1 {
			k := min(size, f.each-sent)
			for q := range n {
				if q == p.ID() {
					continue
				}
				for i := range k {
					p.Send(q, &pe.Envelope{Type: tokenType, Kind: pe.KindP2P, Payload: uint64(sent + i + 1)})
				}
			}
			sent += k
			p.Flush() // a batch of k for each: small and large ones
		}
	case env.Kind == pe.KindSystem: // PE 0: one more PE got all
		if f.finished++; f.finished == n {
			p.Node().Stop(0)
		}
	default:
		f.seen.Add(1)
		if f.got++; f.got == f.each*(n-1) {
			p.Send(0, &pe.Envelope{Type: tokenType, Kind: pe.KindSystem, Payload: uint64(1)})
		}
	}
}

// runJob launches a test job of procs processes and pes PEs passing a
// token hops times, and gives the hops its PEs saw in all, what the
// processes printed and their standard error.
func runJob(t *testing.T, procs, pes int, hops uint64, attack bool, burstStrangers ...int) (uint64, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	more := append(burstStrangers, 0, 0)
	l := Launch{Path: os.Args[0], Name: "cluster test", Procs: procs, ConnectTimeout: 30 * time.Second,
		Env:    []string{fmt.Sprintf("%s=%d %d %v %d %d", childEnv, pes, hops, attack, more[0], more[1]), "GORACE=atexit_sleep_ms=0"},
		Stdout: &out, Stderr: &errb}
	require.Equal(t, 0, l.Run(), errb.String())
	var seen uint64
	for _, line := range strings.Split(out.String(), "\n") {
		var n uint64
		if _, err := fmt.Sscanf(line, "seen %d", &n); err == nil {
			seen += n
		}
	}
	return seen, out.String(), errb.String()
}

func TestTokensCrossProcesses(t *testing.T) {
	for _, c := range []struct{ procs, pes int }{{2, 2}, {2, 4}, {3, 3}, {3, 7}} {
		t.Run(fmt.Sprintf("%dx%d", c.procs, c.pes), func(t *testing.T) {
			// The job stops as the token makes its last hop: every hop
			// was seen once, in one process or another.
			seen, _, errs := runJob(t, c.procs, c.pes, 2000, false)
			require.Equal(t, uint64(2001), seen)
			require.Empty(t, errs)
		})
	}
}

// Every PE floods every other with batches of every size, small ones
// written through by the PE, large ones by the writer: every message
// arrives once (a lost wake-up of the writer once left some behind).
func TestFloodsCrossProcesses(t *testing.T) {
	for _, c := range []struct{ procs, pes, each int }{{2, 2, 20000}, {3, 6, 5000}} {
		t.Run(fmt.Sprintf("%dx%d", c.procs, c.pes), func(t *testing.T) {
			seen, _, errs := runJob(t, c.procs, c.pes, 0, false, c.each)
			require.Equal(t, uint64(c.each*c.pes*(c.pes-1)), seen)
			require.Empty(t, errs)
		})
	}
}

// A peer that cannot prove the job's secret is refused and logged, on
// the data and the control listeners of every process, and the job goes
// on to the same result.
func TestForeignClientsAreRefused(t *testing.T) {
	seen, out, errs := runJob(t, 2, 4, 500, true)
	require.Contains(t, out, "attack: every stranger refused")
	require.Equal(t, uint64(501), seen, "the job's result is unaffected")
	require.Equal(t, 4, strings.Count(errs, "refused a data connection"), errs)
	require.GreaterOrEqual(t, strings.Count(errs, "refused a control connection"), 4, errs)
}

// A flood of silent strangers on a process's data and control listeners
// is bounded: MaxHandshakes at a time may try to prove the secret and
// MaxHandshakeQueue more wait for a turn, the rest are closed as they come, and each is dropped once the handshake
// timeout passes (the control plane's TLS listener used to keep a silent
// connection past 13 s, grpc's own bound being 120 s); the job goes on to
// the same result.
func TestListenersBoundAFloodOfStrangers(t *testing.T) {
	seen, out, errs := runJob(t, 2, 2, 200, false, 0, flooders)
	require.Contains(t, out, "flood of data listener: bounded", errs)
	require.Contains(t, out, "flood of control listener: bounded", errs)
	require.Equal(t, uint64(201), seen, "the job's result is unaffected")
}

// The rendezvous refuses strangers the same way, and still serves the
// job's processes.
func TestRendezvousRefusesStrangers(t *testing.T) {
	core, logs := observer.New(zapcore.WarnLevel)
	refused := make(chan struct{}, 8)
	log := zap.New(core, zap.Hooks(func(e zapcore.Entry) error {
		if e.Message == "refused a rendezvous connection" {
			refused <- struct{}{}
		}
		return nil
	}))
	secret, err := NewSecret()
	require.NoError(t, err)
	wrong, err := NewSecret()
	require.NoError(t, err)
	srv, err := ServeRendezvous("127.0.0.1", secret, 2, log, 0)
	require.NoError(t, err)
	defer srv.Close()
	c, err := net.Dial("tcp", srv.Addr())
	require.NoError(t, err)
	c.Write([]byte("garbage, and more garbage, and more than forty bytes of it"))
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	_, err = io.ReadAll(c)
	if err != nil { // closed on it, perhaps before reading all it was sent
		require.ErrorIs(t, err, syscall.ECONNRESET)
	}
	c.Close()
	c, err = net.Dial("tcp", srv.Addr())
	require.NoError(t, err)
	require.ErrorContains(t, dialHandshake(c, wrong, 1, CharmrunID), "could not prove the job's secret")
	c.Close()
	// a flood of silent strangers is bounded as on a process's listeners
	// (this server's handshake timeout: DefaultHandshakeTimeout)
	fl, err := ServeRendezvous("127.0.0.1", secret, 2, zap.NewNop(), floodHandshake)
	require.NoError(t, err)
	require.NoError(t, floodListener(fl.Addr(), flooders, floodHandshake))
	fl.Close()

	p0 := &Charmrun{Addr: srv.Addr(), Secret: secret, Rank: 0}
	p1 := &Charmrun{Addr: srv.Addr(), Secret: secret, Rank: 1}
	require.NoError(t, p0.Publish("127.0.0.1:7"))
	addr, err := p1.Lookup(time.Now().Add(5 * time.Second))
	require.NoError(t, err)
	require.Equal(t, "127.0.0.1:7", addr)
	srv.Close()
	<-p0.Gone() // charmrun gone: the processes learn it
	<-p1.Gone()
	for range 2 {
		select {
		case <-refused:
		case <-time.After(10 * time.Second):
			t.Fatalf("the strangers were not logged: %v", logs.All())
		}
	}
}

func TestBlocksCoverThePEs(t *testing.T) {
	for n := 1; n <= 20; n++ {
		for procs := 1; procs <= n; procs++ {
			next := 0
			for r := range procs {
				f, c := Block(n, procs, r)
				require.Equal(t, next, f)
				require.GreaterOrEqual(t, c, n/procs)
				next = f + c
			}
			require.Equal(t, n, next)
		}
	}
}

// The listening side of a handshake reads bytes from anyone: whatever
// they are, it ends with an error or a proven peer, never a panic.
// Rate here (go test -fuzz, 2 workers, 10 s): about 9,700 inputs a second.
func FuzzAcceptHandshake(f *testing.F) {
	s, _ := ParseSecret("00000000000000000000000000000000000000000000000000000000000000aa")
	f.Add([]byte("CGH1\x00\x00\x00\x01" + string(make([]byte, 64))))
	f.Add([]byte("GET / HTTP/1.1\r\n"))
	f.Fuzz(func(t *testing.T, in []byte) {
		a, b := net.Pipe()
		go func() {
			b.Write(in)
			b.Close()
		}()
		go func() { // drain what the listener answers
			var buf [256]byte
			for {
				if _, err := b.Read(buf[:]); err != nil {
					return
				}
			}
		}()
		_, err := acceptHandshake(a, s, 0, DefaultHandshakeTimeout, func(uint32) error { return nil })
		require.Error(t, err)
		a.Close()
	})
}

// A crowd of the job's own processes proving the secret at once, more
// than MaxHandshakes, all get in: those past the gate's slots wait for a
// turn instead of being closed (a job's processes all dial process 0 as
// they start; 128 of them failed the start when the 65th was closed).
func TestListenerQueuesACrowdOfTheJobsProcesses(t *testing.T) {
	secret, err := NewSecret()
	require.NoError(t, err)
	const crowd = 3 * MaxHandshakes
	srv, err := ServeRendezvous("127.0.0.1", secret, crowd, zap.NewNop(), 0)
	require.NoError(t, err)
	defer srv.Close()
	errs := make(chan error, crowd)
	for rank := range crowd {
		go func() {
			c, err := net.Dial("tcp", srv.Addr())
			if err != nil {
				errs <- err
				return
			}
			// each holds its connection until the crowd is in
			errs <- dialHandshake(c, secret, uint32(rank), CharmrunID)
		}()
	}
	for range crowd {
		require.NoError(t, <-errs)
	}
	joined := map[int]bool{}
	for len(joined) < crowd {
		joined[<-srv.Joined()] = true
	}
}
