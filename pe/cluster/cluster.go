// Package cluster owns a job that spans several OS processes: membership
// (which processes are in the job and which PEs each runs), their control
// traffic (the start barrier, exit, abort, results at the end) and failure
// detection, all over protoactor-go actor systems with remote, and the
// data plane that carries envelopes between PEs of different processes in
// batched frames over one authenticated TCP connection per process pair
// (pe.Remote). Every connection proves the job's secret.
//
// The runtime above sees none of it: PEs keep their global numbers, and a
// send to a PE of another process goes through the node's Remote.
package cluster

import (
	"errors"
	"fmt"
	"net"
	"os"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/remote"
	"github.com/vmihailenco/msgpack/v5"
	"go.uber.org/zap"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/charmgo/charmgo/pe"
)

// Config describes this process's place in the job.
type Config struct {
	Rank, Procs int // this process's number, and how many there are
	PEs         int // PEs in the job, numbered globally, an equal block per process
	Secret      Secret
	// Host is the address this process listens on (default 127.0.0.1:
	// loopback, so nothing outside the machine can reach the job).
	Host string
	// Rendezvous tells rank 0's control address to the others.
	Rendezvous Rendezvous
	// ConnectTimeout bounds the start: every process must have joined
	// and connected within it (default DefaultConnectTimeout).
	ConnectTimeout time.Duration
	// Types identifies the program's message types: processes of one
	// job must agree (pe.TypesDigest).
	Types uint64
	Log   *zap.Logger
	// ActorLog receives protoactor-go's own log (default: none).
	ActorLog *zap.Logger
}

// DefaultConnectTimeout is how long a job waits for all its processes.
const DefaultConnectTimeout = 60 * time.Second

// Member is one process of the job, as the others know it.
type Member struct {
	Rank    int    `msgpack:"r"`
	Host    string `msgpack:"h"` // host name, for messages
	PID     int    `msgpack:"p"` // OS process id, for messages
	Control string `msgpack:"c"` // protoactor-go remote address
	Data    string `msgpack:"d"` // data-plane TCP address
	Types   uint64 `msgpack:"t"`
}

func (m Member) String() string {
	return fmt.Sprintf("process %d (pid %d on %s)", m.Rank, m.PID, m.Host)
}

// Block gives the PEs rank r runs when n PEs are spread over procs
// processes: equal blocks, the first n%procs one PE larger.
func Block(n, procs, r int) (first, count int) {
	q, extra := n/procs, n%procs
	first = r*q + min(r, extra)
	count = q
	if r < extra {
		count++
	}
	return first, count
}

// PeerError ends the job in every process when one process ended it: with
// an error (Msg: its first line; that process prints the rest) or lost.
type PeerError struct {
	Member Member
	Msg    string
	Lost   bool
}

func (e *PeerError) Error() string {
	if e.Lost {
		return fmt.Sprintf("%v was lost: %s", e.Member, e.Msg)
	}
	return fmt.Sprintf("%v ended the job: %s", e.Member, e.Msg)
}

// Job is this process's membership in a running job.
type Job struct {
	cfg     Config
	log     *zap.Logger
	sys     *actor.ActorSystem
	rem     *remote.Remote
	members []Member
	pids    []*actor.PID
	links   []*link
	owner   []int // the rank running each PE
	first   int
	count   int
	dataLn  net.Listener
	ctl     chan control
	early   []control // taken during the start, for the run loop
	gen     atomic.Uint64

	node      *pe.Node
	ending    atomic.Bool // this process's run is over: peers going away is expected
	stopOnce  sync.Once
	mu        sync.Mutex
	results   map[int][]byte
	resultsCh chan struct{}
	released  chan struct{}
	relOnce   sync.Once
	lost      map[int]bool
	closeOnce sync.Once
}

type ctlKind uint8

const (
	ctlJoin    ctlKind = iota + 1 // → rank 0: Member
	ctlMembers                    // rank 0 → all: Members
	ctlReady                      // → rank 0: data links up
	ctlStart                      // rank 0 → all
	ctlStop                       // any → all: the run ended here (Code, Err)
	ctlResult                     // → rank 0: this process's statistics (Data)
	ctlRelease                    // rank 0 → all: results in, go
	ctlLost                       // local: a peer's actor system is gone (From)
	ctlRefused                    // rank 0 → a process: not admitted (Err)
)

// control is a control message, carried msgpack-encoded in a
// wrapperspb.BytesValue (protoactor-go's remote encodes protobuf only).
type control struct {
	Kind    ctlKind  `msgpack:"k"`
	From    int      `msgpack:"f"`
	Member  *Member  `msgpack:"m,omitempty"`
	Members []Member `msgpack:"ms,omitempty"`
	Code    int      `msgpack:"c,omitempty"`
	Err     string   `msgpack:"e,omitempty"`
	Lost    bool     `msgpack:"l,omitempty"`
	Data    []byte   `msgpack:"d,omitempty"`
}

// actorName is every process's control actor.
const actorName = "charmgo"

// Join starts this process's actor system and data listener, meets the
// other processes through the rendezvous, connects the data plane to
// each, and returns once every process did (the start barrier), or with
// an error naming what did not happen within the connect timeout.
func Join(cfg Config) (*Job, error) {
	if cfg.Procs < 1 || cfg.Rank < 0 || cfg.Rank >= cfg.Procs {
		return nil, fmt.Errorf("process %d of %d: no such process", cfg.Rank, cfg.Procs)
	}
	if cfg.PEs < cfg.Procs {
		return nil, fmt.Errorf("%d PEs over %d processes: every process needs a PE", cfg.PEs, cfg.Procs)
	}
	if cfg.Host == "" {
		cfg.Host = "127.0.0.1"
	}
	if cfg.ConnectTimeout <= 0 {
		cfg.ConnectTimeout = DefaultConnectTimeout
	}
	if cfg.Log == nil {
		cfg.Log = zap.NewNop()
	}
	if cfg.ActorLog == nil {
		cfg.ActorLog = zap.NewNop()
	}
	j := &Job{cfg: cfg, log: cfg.Log.With(zap.Int("rank", cfg.Rank)), ctl: make(chan control, 1024),
		results: map[int][]byte{}, resultsCh: make(chan struct{}, 1), released: make(chan struct{}), lost: map[int]bool{}}
	j.first, j.count = Block(cfg.PEs, cfg.Procs, cfg.Rank)
	j.owner = make([]int, cfg.PEs)
	for r := 0; r < cfg.Procs; r++ {
		f, c := Block(cfg.PEs, cfg.Procs, r)
		for i := f; i < f+c; i++ {
			j.owner[i] = r
		}
	}
	deadline := time.Now().Add(cfg.ConnectTimeout)
	if err := j.join(deadline); err != nil {
		j.Close()
		return nil, err
	}
	return j, nil
}

func (j *Job) join(deadline time.Time) error {
	cfg := j.cfg
	var err error
	if j.dataLn, err = net.Listen("tcp", net.JoinHostPort(cfg.Host, "0")); err != nil {
		return fmt.Errorf("data plane: listen on %s: %w", cfg.Host, err)
	}
	controlAddr := net.JoinHostPort(cfg.Host, "0")
	if cfg.Rank == 0 {
		if a := cfg.Rendezvous.Bind(); a != "" {
			controlAddr = a
		}
	}
	if err := j.startActors(controlAddr); err != nil {
		return err
	}
	host, _ := os.Hostname()
	me := Member{Rank: cfg.Rank, Host: host, PID: os.Getpid(), Control: j.sys.Address(), Data: j.dataLn.Addr().String(), Types: cfg.Types}
	j.members = make([]Member, cfg.Procs)
	j.pids = make([]*actor.PID, cfg.Procs)
	j.members[cfg.Rank], j.pids[cfg.Rank] = me, actor.NewPID(me.Control, actorName)
	if cfg.Rank == 0 {
		if err := cfg.Rendezvous.Publish(me.Control); err != nil {
			return fmt.Errorf("rendezvous: %w", err)
		}
		if err := j.admit(deadline); err != nil {
			return err
		}
	} else {
		addr, err := cfg.Rendezvous.Lookup(deadline)
		if err != nil {
			return fmt.Errorf("rendezvous: %w", err)
		}
		j.pids[0] = actor.NewPID(addr, actorName)
		j.send(0, control{Kind: ctlJoin, Member: &me})
		m, err := j.await(deadline, ctlMembers, "the list of the job's processes from process 0 at "+addr)
		if err != nil {
			return err
		}
		if len(m.Members) != cfg.Procs {
			return fmt.Errorf("rendezvous: process 0 lists %d processes, this one was told %d", len(m.Members), cfg.Procs)
		}
		copy(j.members, m.Members)
		for r, mm := range j.members {
			j.pids[r] = actor.NewPID(mm.Control, actorName)
		}
	}
	j.sys.Root.Send(j.pids[cfg.Rank], watchPeers{j})
	if err := j.connect(deadline); err != nil {
		return err
	}
	if cfg.Rank == 0 {
		for got := 1; got < cfg.Procs; got++ {
			if _, err := j.await(deadline, ctlReady, fmt.Sprintf("the data connections of %d more processes", cfg.Procs-got)); err != nil {
				return err
			}
		}
		for r := 1; r < cfg.Procs; r++ {
			j.send(r, control{Kind: ctlStart})
		}
	} else {
		j.send(0, control{Kind: ctlReady})
		if _, err := j.await(deadline, ctlStart, "the start from process 0"); err != nil {
			return err
		}
	}
	j.log.Debug("joined", zap.Int("first PE", j.first), zap.Int("PEs", j.count))
	return nil
}

// admit is rank 0's side of the rendezvous: it waits for every other
// process to join, checks they run the same program, and sends everyone
// the list.
func (j *Job) admit(deadline time.Time) error {
	cfg := j.cfg
	for got := 1; got < cfg.Procs; {
		m, err := j.await(deadline, ctlJoin, "")
		if err != nil {
			var missing []string
			for r := 1; r < cfg.Procs; r++ {
				if j.members[r].Control == "" {
					missing = append(missing, fmt.Sprint(r))
				}
			}
			return fmt.Errorf("rendezvous: process %s of %d did not join within %v", strings.Join(missing, ", "), cfg.Procs, cfg.ConnectTimeout)
		}
		if m.Member == nil {
			continue
		}
		who := *m.Member
		pid := actor.NewPID(who.Control, actorName)
		switch {
		case who.Rank <= 0 || who.Rank >= cfg.Procs:
			j.log.Warn("refused a process with a rank out of range", zap.Int("its rank", who.Rank), zap.String("host", who.Host))
			j.sys.Root.Send(pid, wrap(control{Kind: ctlRefused, Err: fmt.Sprintf("rank %d: the job has ranks 0..%d", who.Rank, cfg.Procs-1)}))
			continue
		case j.members[who.Rank].Control != "":
			j.log.Warn("refused a second process with one rank", zap.Int("its rank", who.Rank), zap.String("host", who.Host))
			j.sys.Root.Send(pid, wrap(control{Kind: ctlRefused, Err: fmt.Sprintf("rank %d has joined already", who.Rank)}))
			continue
		case who.Types != cfg.Types:
			err := fmt.Errorf("rendezvous: %v runs another program than process 0 (its message types differ)", who)
			j.sys.Root.Send(pid, wrap(control{Kind: ctlRefused, Err: err.Error()}))
			return err
		}
		j.members[who.Rank], j.pids[who.Rank] = who, pid
		got++
	}
	for r := 1; r < cfg.Procs; r++ {
		j.send(r, control{Kind: ctlMembers, Members: j.members})
	}
	return nil
}

// await takes control messages until one of kind want comes; a stop or a
// refusal ends the wait with an error, as does the deadline (what names
// what was awaited; "" gives a bare timeout error).
func (j *Job) await(deadline time.Time, want ctlKind, what string) (control, error) {
	t := time.NewTimer(time.Until(deadline))
	defer t.Stop()
	for {
		select {
		case m := <-j.ctl:
			switch m.Kind {
			case want:
				return m, nil
			case ctlRefused:
				return m, fmt.Errorf("rendezvous: process 0 refused this process: %s", m.Err)
			case ctlStop, ctlResult:
				// A process that got the start before this one may have
				// run the job to its end already (this process's PEs
				// had nothing to do): the run loop takes it up.
				j.early = append(j.early, m)
				continue
			case ctlLost:
				return m, fmt.Errorf("%v was lost during the start", j.members[m.From])
			}
			j.log.Debug("control message ignored during the start", zap.Uint8("kind", uint8(m.Kind)), zap.Int("from", m.From))
		case <-t.C:
			if what == "" {
				return control{}, errors.New("timeout")
			}
			return control{}, fmt.Errorf("start: no %s within %v", what, j.cfg.ConnectTimeout)
		}
	}
}

// connect makes the data plane: this process dials every lower rank and
// accepts every higher one.
func (j *Job) connect(deadline time.Time) error {
	cfg := j.cfg
	j.links = make([]*link, cfg.Procs)
	type accepted struct {
		rank int
		conn net.Conn
	}
	want := cfg.Procs - 1 - cfg.Rank
	acc := make(chan accepted, want)
	go j.acceptLoop(func(rank int, c net.Conn) { acc <- accepted{rank, c} })
	for r := 0; r < cfg.Rank; r++ {
		d := net.Dialer{Deadline: deadline}
		c, err := d.Dial("tcp", j.members[r].Data)
		if err != nil {
			return fmt.Errorf("data plane: connect to %v at %s: %w", j.members[r], j.members[r].Data, err)
		}
		if err := dialHandshake(c, cfg.Secret, uint32(cfg.Rank), uint32(r)); err != nil {
			c.Close()
			return fmt.Errorf("data plane: %v: %w", j.members[r], err)
		}
		setNoDelay(c)
		j.links[r] = newLink(r, c, &j.gen, j.first, j.count)
	}
	t := time.NewTimer(time.Until(deadline))
	defer t.Stop()
	for got := 0; got < want; got++ {
		select {
		case a := <-acc:
			j.links[a.rank] = newLink(a.rank, a.conn, &j.gen, j.first, j.count)
		case <-t.C:
			var missing []string
			for r := cfg.Rank + 1; r < cfg.Procs; r++ {
				if j.links[r] == nil {
					missing = append(missing, j.members[r].String())
				}
			}
			return fmt.Errorf("data plane: %s did not connect within %v", strings.Join(missing, ", "), cfg.ConnectTimeout)
		}
	}
	return nil
}

// acceptLoop admits data connections for as long as the job runs: only
// from higher ranks not connected yet, each proving the secret. Anything
// else is refused and logged; the job goes on.
func (j *Job) acceptLoop(got func(rank int, c net.Conn)) {
	var mu sync.Mutex
	seen := map[int]bool{}
	for {
		c, err := j.dataLn.Accept()
		if err != nil {
			return
		}
		go func() {
			id, err := acceptHandshake(c, j.cfg.Secret, uint32(j.cfg.Rank), func(id uint32) error {
				r := int(id)
				if id == CharmrunID || r <= j.cfg.Rank || r >= j.cfg.Procs {
					return fmt.Errorf("rank %d does not dial process %d", int32(id), j.cfg.Rank)
				}
				mu.Lock()
				defer mu.Unlock()
				if seen[r] {
					return fmt.Errorf("process %d is connected already", r)
				}
				return nil
			})
			if err != nil {
				j.log.Warn("refused a data connection", zap.String("from", c.RemoteAddr().String()), zap.Error(err))
				c.Close()
				return
			}
			mu.Lock()
			dup := seen[int(id)]
			seen[int(id)] = true
			mu.Unlock()
			if dup {
				c.Close()
				return
			}
			setNoDelay(c)
			got(int(id), c)
		}()
	}
}

func setNoDelay(c net.Conn) {
	if t, ok := c.(*net.TCPConn); ok {
		t.SetNoDelay(true)
	}
}

// PEs gives the PEs this process runs.
func (j *Job) PEs() (first, count int) { return j.first, j.count }

// Members lists the job's processes.
func (j *Job) Members() []Member { return j.members }

// Rank is this process's number.
func (j *Job) Rank() int { return j.cfg.Rank }

// Deliver implements pe.Remote: batch goes to the process running dst.
func (j *Job) Deliver(src, dst int, sys bool, batch []pe.Envelope) error {
	return j.links[j.owner[dst]].deliver(src, dst, batch)
}

// Run connects the job to this process's node: frames from the peers go
// to its PEs, and the end of the run, here or anywhere, ends it
// everywhere. Call it once the node exists, before it starts.
func (j *Job) Run(node *pe.Node) {
	j.node = node
	for r, l := range j.links {
		if l == nil {
			continue
		}
		go l.write(func(err error) { j.peerFailed(r, err.Error(), true) })
		go func() {
			err := l.read(node, j.first, j.count)
			if !j.ending.Load() {
				msg := "its connection closed"
				if err != nil && !errors.Is(err, net.ErrClosed) && err.Error() != "EOF" {
					msg = err.Error()
				}
				j.peerFailed(r, msg, true)
			}
		}()
	}
	go j.loop()
	go func() {
		<-node.Done()
		j.ending.Store(true)
		code, err := node.Outcome()
		var pErr *PeerError
		if errors.As(err, &pErr) {
			return // it came from there: the others know
		}
		msg := ""
		if err != nil {
			msg = err.Error()
		}
		for r := range j.members {
			if r != j.cfg.Rank {
				j.send(r, control{Kind: ctlStop, Code: code, Err: msg})
			}
		}
	}()
}

// EndWith ends the run here, if it is still going, once gone is closed
// (the launcher went away: no process may outlive it).
func (j *Job) EndWith(gone <-chan struct{}, why string) {
	go func() {
		<-gone
		if !j.ending.Load() {
			j.log.Error("ending the job", zap.String("why", why))
			if j.node != nil {
				j.node.Fail(fmt.Errorf("process %d: %s", j.cfg.Rank, why))
			} else {
				os.Exit(1)
			}
		}
	}()
}

// peerFailed ends the run here because of peer r.
func (j *Job) peerFailed(r int, msg string, lost bool) {
	if j.ending.Load() {
		return
	}
	j.log.Debug("peer failed", zap.Int("peer", r), zap.String("why", msg))
	j.node.Fail(&PeerError{Member: j.members[r], Msg: firstLine(msg), Lost: lost})
}

// loop handles control messages while the job runs.
func (j *Job) loop() {
	early := j.early
	j.early = nil
	for _, m := range early {
		j.handle(m)
	}
	for m := range j.ctl {
		j.handle(m)
	}
}

func (j *Job) handle(m control) {
	switch m.Kind {
	case ctlStop:
		if m.Err != "" {
			j.peerFailed(m.From, m.Err, m.Lost)
		} else {
			j.ending.Store(true)
			j.node.Stop(m.Code)
		}
	case ctlLost:
		j.mu.Lock()
		j.lost[m.From] = true
		j.mu.Unlock()
		j.signalResults()
		j.peerFailed(m.From, "its actor system is gone (the process died or its host is unreachable)", true)
		if m.From == 0 {
			j.relOnce.Do(func() { close(j.released) })
		}
	case ctlResult:
		j.mu.Lock()
		j.results[m.From] = m.Data
		j.mu.Unlock()
		j.signalResults()
	case ctlRelease:
		j.relOnce.Do(func() { close(j.released) })
	}
}

func (j *Job) signalResults() {
	select {
	case j.resultsCh <- struct{}{}:
	default:
	}
}

// Finish ends this process's part once its node stopped: every other
// process sends its result (encoded statistics) to process 0, which
// returns them by rank (its own included), waits at most timeout for
// them, and then releases the others. A process other than 0 returns nil
// once released (or once process 0 is gone).
func (j *Job) Finish(result []byte, timeout time.Duration) (map[int][]byte, error) {
	j.ending.Store(true)
	t := time.NewTimer(timeout)
	defer t.Stop()
	if j.cfg.Rank != 0 {
		j.send(0, control{Kind: ctlResult, Data: result})
		select {
		case <-j.released:
		case <-t.C:
			return nil, fmt.Errorf("process 0 did not acknowledge the end within %v", timeout)
		}
		return nil, nil
	}
	var err error
	for {
		j.mu.Lock()
		done := true
		for r := 1; r < j.cfg.Procs; r++ {
			if _, ok := j.results[r]; !ok && !j.lost[r] {
				done = false
			}
		}
		j.mu.Unlock()
		if done {
			break
		}
		select {
		case <-j.resultsCh:
			continue
		case <-t.C:
			err = fmt.Errorf("the statistics of some processes did not come within %v", timeout)
		}
		break
	}
	for r := 1; r < j.cfg.Procs; r++ {
		j.send(r, control{Kind: ctlRelease})
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	out := map[int][]byte{0: result}
	for r, b := range j.results {
		out[r] = b
	}
	return out, err
}

// Close ends the data plane and the actor system.
func (j *Job) Close() {
	j.closeOnce.Do(func() {
		j.ending.Store(true)
		if j.dataLn != nil {
			j.dataLn.Close()
		}
		for _, l := range j.links {
			if l != nil {
				l.close()
				l.conn.Close()
			}
		}
		if j.rem != nil {
			j.rem.Shutdown(false)
		}
		if j.sys != nil {
			j.sys.Shutdown()
		}
	})
}

// Lost lists the processes that went away during the run.
func (j *Job) Lost() []int {
	j.mu.Lock()
	defer j.mu.Unlock()
	var out []int
	for r := range j.lost {
		out = append(out, r)
	}
	sort.Ints(out)
	return out
}

func (j *Job) send(r int, m control) {
	m.From = j.cfg.Rank
	j.sys.Root.Send(j.pids[r], wrap(m))
}

func wrap(m control) *wrapperspb.BytesValue {
	b, err := msgpack.Marshal(&m)
	if err != nil {
		panic(fmt.Sprintf("cluster: encode control message: %v", err)) // plain fields: cannot fail
	}
	return &wrapperspb.BytesValue{Value: b}
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	return s
}
