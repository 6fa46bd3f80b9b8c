// Package cluster owns a job that spans several OS processes: membership
// (which processes are in the job and which PEs each runs), their control
// traffic (the start barrier, exit, abort, results at the end) and failure
// detection, all over protoactor-go actor systems with remote, passed
// along a tree of the live processes (tree.go), and the data plane that
// carries envelopes between PEs of different processes in batched frames
// over one authenticated TCP connection per pair of processes that talk,
// opened on first use (pe.Remote). Every connection proves the job's
// secret.
//
// The runtime above sees none of it: PEs keep their global numbers, and a
// send to a PE of another process goes through the node's Remote.
package cluster

import (
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
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
	// HandshakeTimeout bounds how long a connection to one of this
	// process's listeners (data plane, control plane) may take to prove
	// the job's secret (default DefaultHandshakeTimeout).
	HandshakeTimeout time.Duration
	// HeartbeatTimeout: a process that sent no heartbeat for so long is
	// taken for hung (alive, so no connection breaks) and the job ends
	// (default DefaultHeartbeatTimeout; processes beat every tenth of it).
	HeartbeatTimeout time.Duration
	// Types identifies the program's message types: processes of one
	// job must agree (pe.TypesDigest).
	Types uint64
	Log   *zap.Logger
	// ActorLog receives protoactor-go's own log (default: none).
	ActorLog *zap.Logger
	// Incarnation is 0 for a process started with the job, n for the
	// n-th replacement of a lost one (the launcher's ReplacementEnv):
	// a replacement joins the running job instead of starting it.
	Incarnation int
}

// DefaultConnectTimeout is how long a job waits for all its processes.
const DefaultConnectTimeout = 60 * time.Second

// DefaultHeartbeatTimeout is how long a process may be silent before the
// others take it for hung.
const DefaultHeartbeatTimeout = 30 * time.Second

// Member is one process of the job, as the others know it.
type Member struct {
	Rank    int    `msgpack:"r"`
	Host    string `msgpack:"h"` // host name, for messages
	PID     int    `msgpack:"p"` // OS process id, for messages
	Control string `msgpack:"c"` // protoactor-go remote address
	Data    string `msgpack:"d"` // data-plane TCP address
	Types   uint64 `msgpack:"t"`
	Inc     int    `msgpack:"i,omitempty"` // incarnation: replacements count up
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
	cfg    Config
	log    *zap.Logger
	sys    *actor.ActorSystem
	rem    *remote.Remote
	links  []atomic.Pointer[link] // by rank: the data connection to each peer
	owner  []int                  // the rank running each PE
	first  int
	count  int
	dataLn net.Listener
	// dataGate and ctlGate: connections proving the job's secret to the
	// data and control listeners (MaxHandshakes each, MaxHandshakeQueue
	// more waiting)
	dataGate, ctlGate gate
	ctl               chan control
	early             []control // taken during the start, for the run loop
	// lostAtJoin: the processes the list this replacement joined with
	// says are lost (control.Lost): connect does not wait for them
	lostAtJoin []int
	gen        atomic.Uint64
	// linkUp tells connect and rejoin that a peer's data connection came.
	linkUp chan int

	node     *pe.Node
	recovery Recovery
	counts   controlCounts
	service  Service     // (guarded by mu)
	ending   atomic.Bool // this process's run is over: peers going away is expected
	mu       sync.Mutex  // guards what follows
	members  []Member
	pids     []*actor.PID
	results  map[int][]byte
	lost     map[int]bool // peers gone and not (yet) replaced
	// steward: the process that admits replacements and steers
	// recoveries (Recovery.Rejoined, Report): process 0, until it is
	// lost; then the process the rendezvous names to take over (see
	// stewardGone).
	steward int
	// the steward: for each replacement, which processes have their data
	// link to it up, and whether it said it is ready (its own are)
	linked    map[int]map[int]bool
	replReady map[int]bool
	clocks    chan control // process 0: clock replies, for ClockOffsets
	// the steward: replacements that asked to join while another lost
	// process's had not (see rejoin), and those admitted whose links are
	// not all up yet
	joining  []Member
	admitted map[int]bool
	nextGen  uint64      // the generation a rollback in progress takes
	stepped  bool        // a recovery step was taken here (Rolled): links attached now do not hold
	lastBeat []time.Time // when each peer's last heartbeat came
	// succession: the stewards found lost whose successor the
	// rendezvous has not named yet (stewardGone), and why each was lost
	succession map[int]string
	// hungKilled: the hung peers this process had killed, by incarnation
	// (one kill each: see killHung)
	hungKilled map[int]int
	// the tree this process passes heartbeats along (tree.go), as it
	// last computed it: its parent (-1: it is the root) and children;
	// progress: each child's subtree's part of the job's progress, as its
	// last heartbeat said; parentTotal: the job's, as the parent's did
	parent      int
	children    []int
	progress    []uint64
	parentTotal uint64
	// linkedInc: for each replacement, the incarnation whose first link
	// here was reported to the steward (linkStarted)
	linkedInc map[int]int
	// watching: the peers' control actors the control actor watches
	// (its own: only receive touches it)
	watching map[string]*actor.PID
	// watchedTree: the neighbours (children, then parent) the control
	// actor was last asked to watch
	watchedTree []int
	resultsCh   chan struct{}
	released    chan struct{}
	relOnce     sync.Once
	closeOnce   sync.Once
}

// controlCounts counts the control messages this process sent to others
// and received from them (JobStats).
type controlCounts struct {
	sent, received, beatsSent, beatsReceived atomic.Uint64
}

// JobStats is what this process's membership in the job cost it: the
// data links it holds up, and the control messages it exchanged (all, and
// of them heartbeats).
type JobStats struct {
	DataLinks                       int
	ControlSent, ControlReceived    uint64
	HeartbeatsSent, HeartbeatsRecvd uint64
}

// Stats says what this process's membership in the job has cost it so far.
func (j *Job) Stats() JobStats {
	st := JobStats{ControlSent: j.counts.sent.Load(), ControlReceived: j.counts.received.Load(),
		HeartbeatsSent: j.counts.beatsSent.Load(), HeartbeatsRecvd: j.counts.beatsReceived.Load()}
	for r := range j.links {
		if l := j.links[r].Load(); l != nil && !l.down.Load() && !l.isPending() {
			st.DataLinks++
		}
	}
	return st
}

// Recovery is what the layer above does when a process of the job is lost
// and when its replacement has joined. Without one, a lost process ends
// the job.
type Recovery interface {
	// ProcessLost: process r is gone (on every process that noticed).
	// It reports whether a replacement may come; if not, the job ends.
	ProcessLost(r int) bool
	// Rejoined: the replacement of process r is connected to every
	// process (on the steward only: Job.Steward): recovery can begin.
	Rejoined(r int)
	// Action: the steward decided a step of recovery (Broadcast); every
	// process takes it, the steward included, in the order sent.
	Action(data []byte)
	// Report: a process told the steward how its recovery goes (Report;
	// on the steward only).
	Report(from int, data []byte)
	// Replaces reports whether the launcher starts a replacement for a
	// lost process (then a hung one is killed, to be replaced).
	Replaces() bool
}

type ctlKind uint8

const (
	ctlJoin           ctlKind = iota + 1 // → the steward (rank 0 at the start): Member
	ctlMembers                           // the steward → a replacement, or rank 0 → its children in the tree at the start, each passing it on (Code: the steward plus one): Members
	ctlReady                             // a replacement → the steward: data links up; at the start, a process → its parent in the tree: it and its subtree (Code: how many) have the list
	ctlStart                             // rank 0 → its children in the tree, each passing it on
	ctlStop                              // any → its neighbours in the tree, each passing it on: the run ended (Code, Err; Orig, Gone)
	ctlResult                            // → rank 0: this process's statistics (Data)
	ctlRelease                           // rank 0 → its children in the tree, each passing it on: results in, go
	ctlLost                              // local: a peer's actor system is gone (From)
	ctlRefused                           // the steward → a process: not admitted (Err)
	ctlRejoin                            // the steward → all: a replacement joined (Member)
	ctlAction                            // the steward → all: a step of recovery (Data)
	ctlReport                            // → the steward: how a recovery goes (Data)
	ctlBeat                              // any → its neighbours in the tree: alive (Progress, Total)
	ctlCheckBeats                        // local: time to check the others' heartbeats
	ctlLinked                            // → the steward: this process's data link to a replacement is up (Code: its rank)
	ctlClock                             // rank 0 → a process: its clock, please (Gen: the request)
	ctlClockReply                        // → rank 0: the clock (Clock), for request Gen
	ctlDie                               // any → a process: end yourself by SIGKILL now (Err: why), an injected failure
	ctlKillHung                          // any → a process on a hung one's host: kill it by SIGKILL (Code: its rank, Inc: its incarnation, Err: why)
	ctlAdmittedNotice                    // local, from the rendezvous: the steward admitted a replacement (Member)
	ctlStewardGone                       // local, from the rendezvous: the steward, process Code, is gone; process Next steers (-1: none)
	ctlLostNotice                        // any → its neighbours in the tree, each passing on its first: process Code (incarnation Inc) was lost (Err: why)
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
	Data    []byte   `msgpack:"d,omitempty"`
	Gen     uint64   `msgpack:"g,omitempty"`
	// Clock (ctlClockReply): the sender's wall clock, Unix nanoseconds
	Clock int64 `msgpack:"ck,omitempty"`
	// Inc (ctlLost): the incarnation of the process that was lost, so a
	// late notice of a replaced one is told from a loss of its
	// replacement
	Inc int `msgpack:"i,omitempty"`
	// Progress (heartbeats, to the parent in the tree): the part of the
	// job's progress (PEs ran entry methods) of the sender's subtree, and
	// Total (to the children): the job's, as the sender knows it, for
	// the watchdogs (pe.Node.Progress)
	Progress uint64 `msgpack:"pg,omitempty"`
	Total    uint64 `msgpack:"tt,omitempty"`
	// Orig (ctlStop passed along the tree): 1 + the rank of the process
	// that ended the run (0: the sender), and Gone: it was lost (or hung)
	Orig int  `msgpack:"o,omitempty"`
	Gone bool `msgpack:"go,omitempty"`
	// Lost (ctlMembers, from a process that took the replacement it is
	// sent to for the steward: stewardGone): the processes it knows are
	// lost, which will not dial the replacement
	Lost []int `msgpack:"lo,omitempty"`
	// Next (ctlStewardGone): the lost steward's successor
	Next int `msgpack:"nx,omitempty"`
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
	// "Every interface" is this host's address: the others must be told
	// one they can reach.
	cfg.Host = ConcreteHost(cfg.Host)
	if cfg.ConnectTimeout <= 0 {
		cfg.ConnectTimeout = DefaultConnectTimeout
	}
	if cfg.HeartbeatTimeout <= 0 {
		cfg.HeartbeatTimeout = DefaultHeartbeatTimeout
	}
	if cfg.HandshakeTimeout <= 0 {
		cfg.HandshakeTimeout = DefaultHandshakeTimeout
	}
	if cfg.Log == nil {
		cfg.Log = zap.NewNop()
	}
	if cfg.ActorLog == nil {
		cfg.ActorLog = zap.NewNop()
	}
	j := &Job{cfg: cfg, log: cfg.Log.With(zap.Int("rank", cfg.Rank)), ctl: make(chan control, 1024), linkUp: make(chan int, 4*cfg.Procs),
		results: map[int][]byte{}, resultsCh: make(chan struct{}, 1), released: make(chan struct{}), lost: map[int]bool{},
		parent: -1, links: make([]atomic.Pointer[link], cfg.Procs), lastBeat: make([]time.Time, cfg.Procs), progress: make([]uint64, cfg.Procs),
		dataGate: newGate(MaxHandshakes, MaxHandshakeQueue), ctlGate: newGate(MaxHandshakes, MaxHandshakeQueue), clocks: make(chan control, 4)}
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
	// process 0 of the start holds the rendezvous; every other process,
	// a replacement of process 0 too, looks the steward up there
	starts := cfg.Rank == 0 && cfg.Incarnation == 0
	if starts {
		if a := cfg.Rendezvous.Bind(); a != "" {
			controlAddr = a
		}
	}
	if err := j.startActors(controlAddr); err != nil {
		return err
	}
	host, _ := os.Hostname()
	me := Member{Rank: cfg.Rank, Host: host, PID: os.Getpid(), Control: j.sys.Address(), Data: j.dataLn.Addr().String(), Types: cfg.Types, Inc: cfg.Incarnation}
	j.members = make([]Member, cfg.Procs)
	j.pids = make([]*actor.PID, cfg.Procs)
	j.members[cfg.Rank], j.pids[cfg.Rank] = me, actor.NewPID(me.Control, actorName)
	if starts {
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
		ask := func(addr string) {
			j.sys.Root.Send(actor.NewPID(addr, actorName), wrap(control{Kind: ctlJoin, From: cfg.Rank, Member: &me}))
		}
		ask(addr)
		var moved <-chan string
		if rv, ok := cfg.Rendezvous.(Succession); ok {
			moved = rv.Moved()
		}
		m, err := j.awaitMembers(deadline, addr, ask, moved)
		if err != nil {
			return err
		}
		if len(m.Members) != cfg.Procs || m.From < 0 || m.From >= cfg.Procs {
			return fmt.Errorf("rendezvous: process %d lists %d processes, this one was told %d", m.From, len(m.Members), cfg.Procs)
		}
		copy(j.members, m.Members)
		j.members[cfg.Rank] = me
		for r, mm := range j.members {
			j.pids[r] = actor.NewPID(mm.Control, actorName)
		}
		if cfg.Incarnation == 0 {
			// at the start, down the tree: the children have it from here
			_, children := treeNeighbours(cfg.Procs, cfg.Rank, func(int) bool { return false })
			for _, c := range children {
				j.send(c, control{Kind: ctlMembers, Members: j.members, Gen: m.Gen, Code: 1})
			}
		}
		j.steward = m.From
		if m.Code > 0 && m.Code <= cfg.Procs {
			// the list from a process that took this one for the steward
			// of a lost one, which admitted it and was lost before its
			// list came (stewardGone)
			j.steward = m.Code - 1
			for _, r := range m.Lost {
				if r >= 0 && r < cfg.Procs && r != cfg.Rank {
					j.lostAtJoin = append(j.lostAtJoin, r)
				}
			}
		}
		j.gen.Store(m.Gen)
		if rv, ok := cfg.Rendezvous.(Succession); ok {
			// (until then, were the steward lost, this process could not
			// tell the job: see Listed)
			if err := rv.Listed(); err != nil {
				return fmt.Errorf("rendezvous: %w", err)
			}
		}
	}
	j.tendNeighbours()
	go j.acceptLoop()
	if err := j.connect(deadline); err != nil {
		return err
	}
	if rv, ok := cfg.Rendezvous.(Succession); ok && cfg.Incarnation > 0 && j.steward == cfg.Rank {
		// (replacements look the steward up there)
		if err := rv.Succeed(j.sys.Address()); err != nil {
			return fmt.Errorf("rendezvous: %w", err)
		}
		j.log.Info("the others took this replacement for the steward of a lost one: it steers")
	}
	if cfg.Incarnation > 0 {
		// A replacement: the job runs already. The steward starts its
		// recovery once this process is connected to every other.
		j.send(j.stewardRank(), control{Kind: ctlReady})
		j.log.Debug("rejoined", zap.Int("incarnation", cfg.Incarnation), zap.Uint64("generation", j.gen.Load()))
		return nil
	}
	// The start barrier, along the tree over the processes (none is lost
	// yet): a process tells its parent once it and every process below it
	// has the list; process 0, once its children did, starts the job, and
	// each process passes the start on to its children.
	parent, children := treeNeighbours(cfg.Procs, cfg.Rank, func(int) bool { return false })
	ready := 1
	for range children {
		m, err := j.await(deadline, ctlReady, fmt.Sprintf("word that the %d processes below process %d in the tree have joined (%d have)", subtreeSize(cfg.Procs, cfg.Rank)-1, cfg.Rank, ready-1))
		if err != nil {
			return err
		}
		ready += max(m.Code, 0)
	}
	if cfg.Rank != 0 {
		j.send(parent, control{Kind: ctlReady, Code: ready})
		if _, err := j.await(deadline, ctlStart, "the start from process 0"); err != nil {
			return err
		}
	} else if ready != cfg.Procs {
		return fmt.Errorf("start: %d of %d processes said they joined", ready, cfg.Procs)
	}
	for _, c := range children {
		j.send(c, control{Kind: ctlStart})
	}
	j.log.Debug("joined", zap.Int("first PE", j.first), zap.Int("PEs", j.count))
	return nil
}

// subtreeSize is how many processes the subtree of rank holds in the
// tree over the procs processes of a job with none lost (its levels are
// runs of ranks).
func subtreeSize(procs, rank int) int {
	n := 0
	for lo, hi := rank, rank; lo < procs; lo, hi = lo*treeFanout+1, hi*treeFanout+treeFanout {
		n += min(hi, procs-1) - lo + 1
	}
	return n
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
	// down the tree, each process passing it on to its children
	_, children := treeNeighbours(cfg.Procs, cfg.Rank, func(int) bool { return false })
	for _, c := range children {
		j.send(c, control{Kind: ctlMembers, Members: j.members, Code: 1})
	}
	return nil
}

// awaitMembers waits for the job's list of processes from the steward it
// asked at addr, and asks again wherever the rendezvous says the steward
// moved meanwhile (the one it asked was lost: its successor took over).
func (j *Job) awaitMembers(deadline time.Time, addr string, ask func(string), moved <-chan string) (control, error) {
	for {
		m, err := j.awaitOr(deadline, ctlMembers, "the list of the job's processes from the steward at "+addr, moved)
		if !errors.Is(err, errMoved) {
			return m, err
		}
		addr = m.Err
		j.log.Info("the steward moved while this process joined; asking the next", zap.String("at", addr))
		ask(addr)
	}
}

// errMoved ends an awaitOr that the steward's move interrupted.
var errMoved = errors.New("the steward moved")

// await takes control messages until one of kind want comes; a stop or a
// refusal ends the wait with an error, as does the deadline (what names
// what was awaited; "" gives a bare timeout error).
func (j *Job) await(deadline time.Time, want ctlKind, what string) (control, error) {
	return j.awaitOr(deadline, want, what, nil)
}

// awaitOr is await, ended also (errMoved; Err: the address) by a
// steward's move.
func (j *Job) awaitOr(deadline time.Time, want ctlKind, what string, moved <-chan string) (control, error) {
	t := time.NewTimer(time.Until(deadline))
	defer t.Stop()
	for {
		select {
		case m := <-j.ctl:
			switch m.Kind {
			case want:
				return m, nil
			case ctlRefused:
				return m, fmt.Errorf("rendezvous: process %d refused this process: %s", m.From, m.Err)
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
		case a := <-moved:
			return control{Err: a}, errMoved
		case <-t.C:
			if what == "" {
				return control{}, errors.New("timeout")
			}
			return control{}, fmt.Errorf("start: %s did not come within %v", what, j.cfg.ConnectTimeout)
		}
	}
}

// connect makes the data plane: this process dials every lower rank and
// waits for every higher one to dial it.
//
// A replacement that cannot reach a process the steward listed (lost
// since: two processes lost close together, the other not yet noticed
// when this one was admitted) takes that process for lost once the job
// runs, as it would have noticed it: its link is down meanwhile, and its
// replacement's comes as any other's (rejoined). See dialListed.
func (j *Job) connect(deadline time.Time) error {
	cfg := j.cfg
	if cfg.Incarnation == 0 {
		return nil // at the first start, links open on first use (linkTo)
	}
	for r := 0; r < cfg.Rank; r++ {
		if err := j.dialListed(r, deadline); err != nil {
			return err
		}
	}
	t := time.NewTimer(time.Until(deadline))
	defer t.Stop()
	var ctl chan control // a replacement's: a peer lost meanwhile will not dial
	if cfg.Incarnation > 0 {
		ctl = j.ctl
	}
	gone := map[int]bool{}
	for _, r := range j.lostAtJoin {
		if r > cfg.Rank && !gone[r] {
			// (its actor system may take seconds to be found gone)
			gone[r] = true
			j.lostWhileJoining(r, "lost before this replacement joined, as the process that sent its list said")
		}
	}
	for {
		missing := []string{}
		for r := cfg.Rank + 1; r < cfg.Procs; r++ {
			if l := j.links[r].Load(); !gone[r] && (l == nil || l.down.Load()) {
				missing = append(missing, j.member(r).String())
			}
		}
		if len(missing) == 0 {
			return nil
		}
		select {
		case <-j.linkUp:
		case m := <-ctl:
			// (every control message read here is the run loop's, in
			// order: early)
			j.early = append(j.early, m)
			if m.Kind == ctlLost && m.From > cfg.Rank && m.From < cfg.Procs && m.Inc == j.member(m.From).Inc {
				// lost after the steward listed it (the steward itself,
				// when it is lost as it admits this process): taken for
				// lost once the job runs, as a refused dial is
				j.log.Info("a process the steward listed was lost before it connected: taken for lost", zap.Int("process", m.From))
				gone[m.From] = true
				if l := j.links[m.From].Load(); l == nil {
					j.downLink(m.From)
				}
			}
		case <-t.C:
			return fmt.Errorf("data plane: %s did not connect within %v", strings.Join(missing, ", "), cfg.ConnectTimeout)
		}
	}
}

// peerGone reports whether a dial's error says the peer's process is
// gone: its port refused the connection, or reset it as it answered (a
// port still listening answers; a dead process's does not).
func peerGone(err error) bool {
	return errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

// dialListed connects the data plane to process r, of a lower rank. At
// the first start a failure ends the job. A replacement takes r for lost
// when its port refuses the connection or resets it (killed as it
// answered: seen with process 0 SIGKILLed 20 ms after the process it was
// admitting), and after any other failure dials again until the deadline,
// unless a notice of r's loss comes meanwhile. Every control message it
// reads is the run loop's, in order (early).
func (j *Job) dialListed(r int, deadline time.Time) error {
	for b := newBackoff(200 * time.Millisecond); ; {
		err := j.dial(r, deadline)
		switch {
		case err == nil:
			return nil
		case j.cfg.Incarnation == 0:
			return err
		case peerGone(err):
			j.log.Info("a process the steward listed refused or reset the connection: taken for lost", zap.Int("process", r), zap.Error(err))
			j.lostWhileJoining(r, "its data port refused or reset this replacement's connection (the process is gone)")
			return nil
		case !time.Now().Before(deadline):
			return err
		}
		j.log.Info("could not reach a process the steward listed: dialing again", zap.Int("process", r), zap.Error(err))
		t := time.NewTimer(b.wait(deadline))
		for waiting := true; waiting; {
			select {
			case m := <-j.ctl:
				j.early = append(j.early, m)
				if m.Kind == ctlLost && m.From == r && m.Inc == j.member(r).Inc {
					t.Stop()
					j.log.Info("a process the steward listed was lost before this replacement reached it: taken for lost", zap.Int("process", r))
					j.downLink(r)
					return nil
				}
			case <-t.C:
				waiting = false
			}
		}
	}
}

// linkTo opens the link to process r on first use: a pending link, which
// gathers what is sent to it while a dial makes its connection
// (dialLazily). Processes of the job link only to those they send to.
func (j *Job) linkTo(r int) *link {
	l := newPendingLink(r, &j.gen, j.first, j.count)
	j.mu.Lock()
	l.inc = j.members[r].Inc
	l.holding = j.cfg.Incarnation > 0 && !j.stepped
	lost := j.lost[r]
	j.mu.Unlock()
	if lost {
		l.down.Store(true) // (processLost makes its down link)
	}
	if !j.links[r].CompareAndSwap(nil, l) {
		return j.links[r].Load()
	}
	if !lost {
		go j.dialLazily(r, l)
	}
	return l
}

// dialLazily makes pending link l's connection to process r: dialed again
// after a failure (backoff, up to a second apart), until ConnectTimeout
// has passed, when r is taken for lost, as at once
// when its port refuses or resets the connection (the process is gone).
// A peer of a lower rank that dials this process at the same time wins:
// it refuses this dial, and its connection becomes l's (claim).
func (j *Job) dialLazily(r int, l *link) {
	deadline := time.Now().Add(j.cfg.ConnectTimeout)
	for b := newBackoff(time.Second); ; {
		if l.down.Load() || j.links[r].Load() != l || !l.isPending() || j.ending.Load() {
			return
		}
		c, err := j.dialConn(r, deadline)
		if err == nil {
			if !j.adopt(r, l, c) {
				c.Close()
			}
			return
		}
		if !l.isPending() || j.links[r].Load() != l {
			return // r's own dial made the link meanwhile
		}
		if !errors.Is(err, errRefused) && (peerGone(err) || !time.Now().Before(deadline)) {
			j.linkDown(l, lostWhy(err))
			return
		}
		j.log.Debug("dialing again", zap.Int("process", r), zap.Error(err))
		time.Sleep(b.wait(deadline))
	}
}

// adopt makes c the connection of pending link l to process r and runs
// it; it reports whether l took it.
func (j *Job) adopt(r int, l *link, c net.Conn) bool {
	j.mu.Lock()
	ok := j.links[r].Load() == l && !l.down.Load() && l.connect(c)
	j.mu.Unlock()
	if ok {
		j.linkStarted(r, l)
	}
	return ok
}

// claim decides, as the handshake of a connection from process r
// (incarnation inc, as it says) ends,
// whether this process takes it: when it has no link to r (or one that
// is down: r's replacement dials), as a new link; when its own dial to r
// is under way and r's rank is lower, as that link's connection (of two
// processes dialing each other, the lower rank's dial wins, and both
// decide so). Otherwise it refuses, and says why.
func (j *Job) claim(r, inc int, c net.Conn) (*link, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if known := j.members[r].Inc; inc < known {
		// a lost incarnation's late dial (a hung process being killed)
		return nil, fmt.Errorf("process %d dials as incarnation %d, replaced by %d", r, inc, known)
	}
	for {
		cur := j.links[r].Load()
		switch {
		case cur == nil || cur.down.Load():
			l := newLink(r, c, &j.gen, j.first, j.count)
			l.inc = inc
			l.holding = j.cfg.Incarnation > 0 && !j.stepped
			if !j.links[r].CompareAndSwap(cur, l) {
				continue // a pending link came meanwhile (linkTo)
			}
			if cur != nil {
				cur.shut()
			}
			return l, nil
		case cur.isPending() && r < j.cfg.Rank:
			if cur.connect(c) {
				cur.inc = inc
				return cur, nil
			}
			return nil, fmt.Errorf("process %d is connected already", r)
		case cur.isPending():
			return nil, fmt.Errorf("process %d dials process %d itself", j.cfg.Rank, r)
		default:
			return nil, fmt.Errorf("process %d is connected already", r)
		}
	}
}

// linkStarted runs link l to process r once it has its connection, and,
// for the first link to a replacement, tells the service and the
// steward (which starts the replacement's recovery once every process can
// send to it: what a PE sent before went nowhere, the old link was down).
func (j *Job) linkStarted(r int, l *link) {
	setNoDelay(l.conn)
	j.mu.Lock()
	running := j.node != nil
	report := false
	if running && l.inc > 0 && j.linkedInc[r] != l.inc {
		// a replacement's first link here, whether or not this process
		// heard yet that r was lost or that its replacement joined: the
		// link knows its incarnation from its handshake
		if j.linkedInc == nil {
			j.linkedInc = map[int]int{}
		}
		report = true
		j.linkedInc[r] = l.inc
	}
	j.mu.Unlock()
	if running {
		j.runLink(l)
	}
	if report {
		j.reportLinked(r)
	}
	select {
	case j.linkUp <- r:
	default: // (a replacement's connect waits on it; it rescans every link)
	}
}

// lostWhileJoining: this replacement takes process r, which the steward
// listed, for lost once the job runs (the run loop takes the notice,
// why): its link is down meanwhile, and its replacement's comes as any
// other's.
func (j *Job) lostWhileJoining(r int, why string) {
	j.downLink(r)
	j.early = append(j.early, control{Kind: ctlLost, From: r, Inc: j.member(r).Inc, Err: why})
}

// dial connects the data plane to process r (a replacement's, or to a
// replacement: every process links to it as it joins).
func (j *Job) dial(r int, deadline time.Time) error {
	c, err := j.dialConn(r, deadline)
	if err != nil {
		return err
	}
	j.attach(r, c)
	return nil
}

// dialConn opens a data connection to process r and proves the secret.
func (j *Job) dialConn(r int, deadline time.Time) (net.Conn, error) {
	m := j.member(r)
	d := net.Dialer{Deadline: deadline}
	c, err := d.Dial("tcp", m.Data)
	if err != nil {
		return nil, fmt.Errorf("data plane: connect to %v at %s: %w", m, m.Data, err)
	}
	if err := dialHandshake(c, j.cfg.Secret, dataID(j.cfg.Rank, j.cfg.Incarnation), uint32(r)); err != nil {
		c.Close()
		return nil, fmt.Errorf("data plane: %v: %w", m, err)
	}
	return c, nil
}

// downLink makes the link to process r one that is down: what is sent to
// r is dropped until its replacement's link takes its place (attach).
func (j *Job) downLink(r int) {
	c, other := net.Pipe()
	other.Close()
	l := newLink(r, c, &j.gen, j.first, j.count)
	l.down.Store(true)
	j.mu.Lock()
	l.inc = j.members[r].Inc
	j.mu.Unlock()
	if old := j.links[r].Swap(l); old != nil {
		old.shut()
	}
}

// attach makes c the data connection to process r: a new link, running
// at once if the job runs. A replacement's links hold what comes until
// its first recovery step is taken (Rolled); a link it attaches after
// that (to the replacement of another lost process) does not.
func (j *Job) attach(r int, c net.Conn) {
	l := newLink(r, c, &j.gen, j.first, j.count)
	j.mu.Lock()
	l.inc = j.members[r].Inc
	l.holding = j.cfg.Incarnation > 0 && !j.stepped
	old := j.links[r].Swap(l)
	j.mu.Unlock()
	if old != nil {
		old.shut()
	}
	j.linkStarted(r, l)
}

// reportLinked: this process's first link to the replacement of process
// r is up: the service hears of it, and the steward, which starts r's
// recovery once every process can send to it (what a PE sent before went
// nowhere: the old link was down).
func (j *Job) reportLinked(r int) {
	j.mu.Lock()
	svc := j.service
	j.mu.Unlock()
	if svc != nil {
		svc.Linked(r)
	}
	if st := j.stewardRank(); st == j.cfg.Rank {
		j.ctl <- control{Kind: ctlLinked, From: st, Code: r}
	} else {
		j.send(st, control{Kind: ctlLinked, From: j.cfg.Rank, Code: r})
	}
}

// replacementLinked (the steward) notes that process from has its data
// link to replacement r up, or (from == r) that r has all of its own, and
// starts r's recovery once both are true of every process.
func (j *Job) replacementLinked(r, from int) {
	if r < 0 || r >= j.cfg.Procs || from < 0 || from >= j.cfg.Procs {
		return
	}
	j.mu.Lock()
	if j.linked == nil {
		j.linked, j.replReady = map[int]map[int]bool{}, map[int]bool{}
	}
	if from == r {
		j.replReady[r] = true
	} else {
		if j.linked[r] == nil {
			j.linked[r] = map[int]bool{}
		}
		j.linked[r][from] = true
	}
	done := replacementsLinked(j.cfg.Procs, j.lost, j.linked, j.replReady)
	for _, q := range done {
		delete(j.lost, q)
		delete(j.linked, q)
		delete(j.replReady, q)
		delete(j.admitted, q)
	}
	j.mu.Unlock()
	if len(done) > 0 {
		j.tendNeighbours()
	}
	for _, q := range done {
		j.log.Info("a replacement joined", zap.Int("process", q))
		if j.recovery != nil {
			j.recovery.Rejoined(q)
		}
	}
}

// replacementsLinked lists the lost processes whose replacements every
// process can send to, given which process has its link to which
// replacement up (linked) and which replacements have their own (ready):
// all of them, or none while one is missing. Replacements admitted
// together connect to each other while they join, before they run (no
// ctlLinked): a ready one has its link to every other. All or none,
// because that shortcut holds only while both are still lost: a
// replacement taken as done first would leave the other waiting for a
// link nobody reports (a hang, seen with two processes SIGKILLed at
// once on a busy machine).
func replacementsLinked(procs int, lost map[int]bool, linked map[int]map[int]bool, ready map[int]bool) []int {
	var done []int
	for q := range lost {
		all := ready[q]
		for p := 0; p < procs && all; p++ {
			all = p == q || linked[q][p] || lost[p] && ready[p]
		}
		if !all {
			return nil
		}
		done = append(done, q)
	}
	slices.Sort(done)
	return done
}

// acceptLoop admits data connections for as long as the job runs: only
// from higher ranks with no live connection, each proving the secret.
// Anything else is refused and logged; the job goes on.
func (j *Job) acceptLoop() {
	for {
		c, err := j.dataLn.Accept()
		if err != nil {
			return
		}
		if !j.dataGate.reserve() {
			j.log.Debug("refused a data connection: too many proving the secret at once", zap.String("from", c.RemoteAddr().String()))
			c.Close()
			continue
		}
		go func() {
			// the handshake's time counts from the connection's arrival,
			// its wait for a turn included
			deadline := time.Now().Add(j.cfg.HandshakeTimeout)
			if !j.dataGate.enter(deadline) {
				j.log.Debug("dropped a data connection: its turn to prove the secret did not come within the handshake timeout", zap.String("from", c.RemoteAddr().String()))
				c.Close()
				return
			}
			var l *link
			var refused error // a process of the job the link rules turn away
			id, err := acceptHandshake(c, j.cfg.Secret, uint32(j.cfg.Rank), time.Until(deadline), func(id uint32) error {
				r, inc := splitDataID(id)
				if id == CharmrunID || r == j.cfg.Rank || r >= j.cfg.Procs {
					return fmt.Errorf("rank %d is no peer of process %d", r, j.cfg.Rank)
				}
				l, refused = j.claim(r, inc, c)
				return refused
			})
			j.dataGate.leave()
			from, _ := splitDataID(id)
			switch {
			case refused != nil:
				j.log.Debug("did not take a data connection", zap.Int("from", from), zap.Error(err))
				c.Close()
			case err != nil:
				j.log.Warn("refused a data connection", zap.String("from", c.RemoteAddr().String()), zap.Error(err))
				c.Close()
				if l != nil {
					j.linkDown(l, lostWhy(err)) // (its welcome could not be written: the peer went away)
				}
			default:
				j.linkStarted(from, l)
			}
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
func (j *Job) Members() []Member {
	j.mu.Lock()
	defer j.mu.Unlock()
	return slices.Clone(j.members)
}

func (j *Job) member(r int) Member {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.members[r]
}

// Replacement reports whether this process replaces a lost one.
func (j *Job) Replacement() bool { return j.cfg.Incarnation > 0 }

// SetRecovery makes rec recover from lost processes. Call it before Run.
func (j *Job) SetRecovery(rec Recovery) { j.recovery = rec }

// Rank is this process's number.
func (j *Job) Rank() int { return j.cfg.Rank }

// Deliver implements pe.Remote: batch goes to the process running dst.
// Messages for a process that is gone are dropped: what they carried is
// recovered by the rollback or the replay that follows its replacement.
func (j *Job) Deliver(src, dst int, sys bool, batch []pe.Envelope) error {
	r := j.owner[dst]
	l := j.links[r].Load()
	if l == nil {
		l = j.linkTo(r)
	}
	return l.deliver(src, dst, batch)
}

// Run connects the job to this process's node: frames from the peers go
// to its PEs, and the end of the run, here or anywhere, ends it
// everywhere. Call it once the node exists, before it starts.
func (j *Job) Run(node *pe.Node) {
	j.mu.Lock()
	j.node = node
	j.mu.Unlock()
	for r := range j.links {
		if l := j.links[r].Load(); l != nil && !l.down.Load() && !l.isPending() {
			j.runLink(l)
		}
	}
	j.tendNeighbours()
	go j.loop()
	if rv, ok := j.cfg.Rendezvous.(Succession); ok {
		go j.forwardNotices(rv.Notices(), node.Done())
	}
	go j.beat(node.Done())
	go func() {
		<-node.Done()
		j.ending.Store(true)
		j.passStop(node.Outcome())
	}()
}

// passStop tells this process's neighbours in the tree that the run
// ended (code, err), each of which tells its own: every process hears,
// and none sends more than one message a neighbour. An end that came
// from a peer is passed on in its name, except to it.
func (j *Job) passStop(code int, err error) {
	stop := control{Kind: ctlStop, Code: code}
	var pErr *PeerError
	switch {
	case errors.As(err, &pErr):
		stop.Orig, stop.Err, stop.Gone = pErr.Member.Rank+1, pErr.Msg, pErr.Lost
	case err != nil:
		stop.Err = err.Error()
	}
	j.mu.Lock()
	parent, children := j.treeLocked(time.Now())
	j.mu.Unlock()
	for _, r := range append(children, parent) {
		if r >= 0 && r != stop.Orig-1 {
			j.send(r, stop)
		}
	}
}

// treeLocked recomputes this process's neighbours in the tree (j.mu
// held) from the processes lost now, and gives a process that just
// became one a whole heartbeat timeout from now.
func (j *Job) treeLocked(now time.Time) (parent int, children []int) {
	parent, children = treeNeighbours(j.cfg.Procs, j.cfg.Rank, func(r int) bool { return j.lost[r] })
	was := func(r int) bool { return r == j.parent || slices.Contains(j.children, r) }
	for _, r := range append(children, parent) {
		if r >= 0 && !was(r) {
			j.lastBeat[r] = now
		}
	}
	if parent != j.parent {
		j.parentTotal = 0
	}
	j.parent, j.children = parent, children
	return parent, slices.Clone(children)
}

// tendNeighbours looks after this process's neighbours in the tree, as
// it changes: the control actor watches them (and no other peer: a
// neighbour's actor system found gone is a loss, ctlLost), and once the
// job runs, data links to them are open (a neighbour's end, killed or
// crashed, breaks its link at once, so the processes beside it find it
// lost, and their notice goes along the tree; a watch alone waits on
// protoactor-go, which may take seconds to find a process gone that it
// never reached).
func (j *Job) tendNeighbours() {
	if j.sys == nil {
		return // (a job without its actor system, as unit tests make)
	}
	j.mu.Lock()
	parent, children := j.treeLocked(time.Now())
	var pids []*actor.PID
	j.watchedTree = append(children, parent)
	for _, r := range j.watchedTree {
		if r >= 0 && j.pids[r] != nil {
			pids = append(pids, j.pids[r])
		}
	}
	me := j.pids[j.cfg.Rank]
	running := j.node != nil
	j.mu.Unlock()
	j.sys.Root.Send(me, watchPeers{pids})
	if !running {
		return // (Run links them)
	}
	for _, q := range append(children, parent) {
		if q >= 0 && j.links[q].Load() == nil {
			j.linkTo(q)
		}
	}
}

// runLink starts l's writer and reader, once (Run and a link's arrival
// may both start it).
func (j *Job) runLink(l *link) {
	if !l.running.CompareAndSwap(false, true) {
		return
	}
	go l.write(func(err error) { j.linkDown(l, lostWhy(err)) })
	go func() { j.linkDown(l, lostWhy(l.read(j.node, j.first, j.count, j.serve))) }()
}

// lostWhy says why a peer is taken for lost from how its data
// connection ended: in words where the peer's end went away (the usual
// way a process dies), else the error itself.
func lostWhy(err error) string {
	switch {
	case err == nil || errors.Is(err, net.ErrClosed) || errors.Is(err, io.EOF) || err.Error() == "EOF":
		return "its connection closed"
	case errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE):
		return "its connection was reset"
	}
	return err.Error()
}

// linkDown: l's connection failed or ended. Unless the job is ending or
// l was replaced already, its process is lost.
func (j *Job) linkDown(l *link, msg string) {
	if !l.down.CompareAndSwap(false, true) {
		return
	}
	l.shut()
	if j.ending.Load() || j.links[l.peer].Load() != l {
		return
	}
	j.ctl <- control{Kind: ctlLost, From: l.peer, Err: msg, Inc: l.inc}
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

// beat sends heartbeats to this process's neighbours in the tree, and
// has the loop check theirs, until done. A heartbeat to the parent
// carries this process's subtree's part of the job's progress, one to a
// child the job's, so that the progress of any process reaches every
// other within twice the tree's depth in heartbeats.
func (j *Job) beat(done <-chan struct{}) {
	every := beatPeriod(j.cfg.HeartbeatTimeout)
	t := time.NewTicker(every)
	defer t.Stop()
	now := time.Now()
	j.mu.Lock()
	for r := range j.lastBeat {
		j.lastBeat[r] = now
	}
	j.mu.Unlock()
	for {
		select {
		case <-done:
			return
		case <-t.C:
		}
		local := j.node.LocalProgress()
		j.mu.Lock()
		parent, children := j.treeLocked(time.Now())
		rewatch := !slices.Equal(j.watchedTree, append(children, parent))
		sub := local
		for _, c := range children {
			sub += j.progress[c]
		}
		known := j.parentTotal + sub
		j.mu.Unlock()
		if rewatch {
			j.tendNeighbours()
		}
		if parent >= 0 {
			j.send(parent, control{Kind: ctlBeat, Progress: sub})
		}
		for _, c := range children {
			j.send(c, control{Kind: ctlBeat, Total: known})
		}
		j.ctl <- control{Kind: ctlCheckBeats, From: j.cfg.Rank}
	}
}

// maxBeatEvery bounds the time between heartbeats (a tenth of the
// heartbeat timeout unless that is longer): the job's progress crosses
// the tree in a few of them.
const maxBeatEvery = time.Second

// checkBeats takes a neighbour in the tree that is silent for longer than the heartbeat
// timeout for hung: alive, so no connection breaks and no replacement
// comes by itself. It is killed, to be lost and replaced, when the
// launcher replaces processes and a process on its host can kill it
// (killHung); otherwise the job ends.
func (j *Job) checkBeats() {
	now := time.Now()
	j.mu.Lock()
	var hung []int
	parent, children := j.treeLocked(now)
	for _, r := range append(children, parent) {
		if r >= 0 && !j.lost[r] && silent(now, j.lastBeat[r], j.cfg.HeartbeatTimeout) {
			hung = append(hung, r)
		}
	}
	j.mu.Unlock()
	for _, r := range hung {
		why := fmt.Sprintf("no heartbeat for %v (--heartbeat-timeout): it hangs, or its host is cut off", j.cfg.HeartbeatTimeout)
		if !j.killHung(r, why) {
			j.peerFailed(r, why, true)
		}
	}
}

// killHung has hung process r killed by SIGKILL, by this process if it
// runs on r's host, else by a live one that does, else (none does: one
// process a host, as on a cluster) by charmrun, which started it
// (EndHung); it reports whether it could: the launcher replaces
// processes, and one of those can reach r. Its links then break, and it
// is lost and replaced as a crashed process is (process 0 too, when
// another can take over from it: see stewardGone). Once per incarnation:
// the heartbeats keep finding it silent until it is gone.
func (j *Job) killHung(r int, why string) bool {
	if j.recovery == nil || !j.recovery.Replaces() {
		return false
	}
	j.mu.Lock()
	hung := j.members[r]
	if hung.PID <= 0 || hung.PID == os.Getpid() {
		// (processes of one OS process, as tests run them: nothing to kill)
		j.mu.Unlock()
		return false
	}
	if j.hungKilled == nil {
		j.hungKilled = map[int]int{}
	}
	if inc, ok := j.hungKilled[r]; ok && inc == hung.Inc {
		j.mu.Unlock()
		return true
	}
	killer := -1
	if j.members[j.cfg.Rank].Host == hung.Host {
		killer = j.cfg.Rank
	} else {
		for q, m := range j.members {
			if q != r && q != j.cfg.Rank && !j.lost[q] && m.Host == hung.Host {
				killer = q
				break
			}
		}
	}
	rv, charmrun := j.cfg.Rendezvous.(Succession)
	if killer >= 0 {
		j.hungKilled[r] = hung.Inc
	}
	j.mu.Unlock()
	switch {
	case killer == -1 && charmrun:
		// none of the job's processes runs on its host: the launcher,
		// which started it there, ends it
		if err := rv.EndHung(r, hung.Inc); err != nil {
			j.log.Warn("could not ask charmrun to end a hung process", zap.Int("process", r), zap.Error(err))
			return false
		}
		j.mu.Lock()
		j.hungKilled[r] = hung.Inc
		j.mu.Unlock()
		return true
	case killer == -1:
		return false
	case killer == j.cfg.Rank:
		j.killLocal(r, hung, why)
	default:
		j.send(killer, control{Kind: ctlKillHung, Code: r, Inc: hung.Inc, Err: why})
	}
	return true
}

// killLocal kills hung process r (m), which runs on this host, by SIGKILL.
func (j *Job) killLocal(r int, m Member, why string) {
	then := "to be replaced"
	if _, ok := j.cfg.Rendezvous.(Succession); r == j.stewardRank() && !ok {
		then = fmt.Sprintf("which ends the job (process %d steers it, and nothing can take over from it)", r)
	}
	fmt.Fprintf(os.Stderr, "charmgo: process %d (pid %d on %s) is killed, %s: %s\n", r, m.PID, m.Host, then, why)
	if p, err := os.FindProcess(m.PID); err == nil {
		p.Kill()
	}
}

// onKillHung is ctlKillHung: kill process m.Code if it is still the
// incarnation the sender found hung, and runs on this host.
func (j *Job) onKillHung(m control) {
	j.mu.Lock()
	if m.Code < 0 || m.Code >= len(j.members) || j.lost[m.Code] {
		j.mu.Unlock()
		return
	}
	hung := j.members[m.Code]
	here := j.members[j.cfg.Rank].Host == hung.Host && hung.Inc == m.Inc && hung.PID > 0 && hung.PID != os.Getpid()
	j.mu.Unlock()
	if here {
		j.killLocal(m.Code, hung, m.Err)
	}
}

// processLost: process r, incarnation inc, is gone. The job ends, unless
// recovery expects a replacement. A notice that comes after r's
// replacement joined (its link or actor system went down before, the
// notice waited in line) is of no process of the job any more.
func (j *Job) processLost(r, inc int, why string) {
	j.mu.Lock()
	if !j.lost[r] && inc < j.members[r].Inc {
		j.mu.Unlock()
		j.log.Debug("a late notice of a replaced process's loss", zap.Int("process", r), zap.Int("incarnation", inc))
		return
	}
	again := j.lost[r]
	j.lost[r] = true
	delete(j.linked, r) // what an earlier replacement had linked
	delete(j.replReady, r)
	j.joining = slices.DeleteFunc(j.joining, func(o Member) bool { return o.Rank == r })
	delete(j.admitted, r)
	parent := j.parent
	j.mu.Unlock()
	j.tendNeighbours() // (the tree closes up over r)
	if again || j.ending.Load() {
		j.signalResults()
		if (r == 0 || r == parent) && j.ending.Load() {
			// Process 0, or the parent that passes its release on, is
			// gone at the end: nothing is coming (a second notice of a
			// loss during the run is not the end: process 0's
			// replacement releases the others then).
			j.release()
		}
		return
	}
	if l := j.links[r].Load(); l == nil {
		j.downLink(r) // (no link was opened to it: none will be now)
	} else if l.inc <= inc && l.down.CompareAndSwap(false, true) {
		// (a link of a later incarnation is r's replacement's, which
		// dialed before this notice came: it stays)
		l.shut()
	}
	if why == "" {
		why = "its actor system is gone (the process died or its host is unreachable)"
	}
	j.passLoss(r, inc, why)
	j.mu.Lock()
	svc := j.service
	j.mu.Unlock()
	if svc != nil {
		svc.Lost(r)
	}
	if rv, ok := j.cfg.Rendezvous.(Succession); ok && j.recovery != nil && j.recovery.Replaces() && r == j.stewardRank() {
		// who takes over, the rendezvous says, in the same order to
		// every process (stewardGone)
		j.mu.Lock()
		if j.succession == nil {
			j.succession = map[int]string{}
		}
		j.succession[r] = why
		j.mu.Unlock()
		j.log.Info("the steward was lost; the rendezvous names who takes over", zap.Int("lost", r), zap.String("why", why))
		if err := rv.Suspect(r); err != nil {
			j.log.Warn("could not tell the rendezvous of the steward's loss", zap.Error(err))
		}
		return
	}
	j.recoverOrEnd(r, why)
}

// passLoss passes this process's first notice of process r's loss
// (incarnation inc) on to its neighbours in the tree: not every process
// has a link to r, nor watches it, and each passes on its first.
func (j *Job) passLoss(r, inc int, why string) {
	if j.sys == nil {
		return // (a job without its actor system, as unit tests make)
	}
	j.mu.Lock()
	parent, children := j.treeLocked(time.Now())
	j.mu.Unlock()
	for _, q := range append(children, parent) {
		if q >= 0 {
			j.send(q, control{Kind: ctlLostNotice, Code: r, Inc: inc, Err: why})
		}
	}
}

// recoverOrEnd hands process r's loss to recovery, or ends the job if
// none expects a replacement (the steward's, without a successor).
func (j *Job) recoverOrEnd(r int, why string) {
	if j.recovery != nil && r != j.stewardRank() && j.recovery.ProcessLost(r) {
		j.log.Info("a process was lost; waiting for its replacement", zap.Int("process", r), zap.String("why", why))
		return
	}
	j.signalResults()
	j.peerFailed(r, why, true)
	if r == 0 {
		j.release()
	}
}

// stewardGone is the rendezvous's notice that the steward, process lost
// of incarnation inc, is gone, and process next steers from now on (-1:
// no process is left to). Every process takes these notices in one
// order, and the rendezvous chose next from what it was told in that
// order, so the processes agree on it whatever the lost steward told
// each of them before it went. The notice may come before this process
// found the steward gone itself (then it is lost from now: processLost),
// or after (then its loss waited for this: succession), and before this
// process heard that the steward it knows handed the steering back (then
// the hand-back finds process 0 lost: StewardBack).
func (j *Job) stewardGone(lost, inc, next int) {
	if lost < 0 || lost >= j.cfg.Procs || next < -1 || next >= j.cfg.Procs || j.ending.Load() {
		return
	}
	rv, _ := j.cfg.Rendezvous.(Succession)
	j.mu.Lock()
	if inc != j.members[lost].Inc {
		// of an incarnation this process does not know: a replacement
		// hears of its own predecessor, or of a process whose
		// replacement its list names
		j.mu.Unlock()
		j.log.Debug("a notice of a steward's loss of another incarnation", zap.Int("lost", lost), zap.Int("incarnation", inc), zap.Int("next", next))
		return
	}
	why, waited := j.succession[lost]
	delete(j.succession, lost)
	noticed := j.lost[lost]
	if next >= 0 {
		j.steward = next
	}
	members, gone := slices.Clone(j.members), j.lostRanks()
	if !slices.Contains(gone, lost) {
		gone = append(gone, lost)
	}
	j.mu.Unlock()
	if why == "" {
		why = "charmrun found its connection closed (the process is gone)"
	}
	switch {
	case next < 0:
		j.log.Error("the steward was lost and no process of the job is left to take over", zap.Int("lost", lost))
		if !noticed {
			j.processLost(lost, inc, why)
		}
		j.mu.Lock()
		j.steward = lost // (no successor: its loss ends the job)
		j.mu.Unlock()
		j.recoverOrEnd(lost, why+"; no process of the job is left to take over from it")
		return
	case next == j.cfg.Rank:
		if err := rv.Succeed(j.sys.Address()); err != nil {
			j.log.Error("could not take over from the steward", zap.Int("lost", lost), zap.Error(err))
			j.recoverOrEnd(lost, fmt.Sprintf("%s; process %d could not take over from it: %v", why, next, err))
			return
		}
		j.log.Info("the steward was lost; this process takes over", zap.Int("lost", lost))
		for q, m := range members {
			if q != j.cfg.Rank && m.Inc > 0 && !slices.Contains(gone, q) {
				// a replacement the lost steward admitted may not have
				// had its list yet (one that has it ignores this)
				j.sendList(q, next, members, gone)
			}
		}
	default:
		j.log.Info("the steward was lost; another takes over", zap.Int("lost", lost), zap.Int("steward", next))
		if members[next].Inc > 0 {
			// the successor may be a replacement the lost steward
			// admitted and was lost before its list came: from here,
			// with who steers (one that has it ignores it)
			j.sendList(next, next, members, gone)
		}
	}
	switch {
	case !noticed:
		j.processLost(lost, inc, why) // (not the steward now: recovery takes it)
	case waited:
		j.recoverOrEnd(lost, why)
	case j.recovery != nil:
		// taken for lost before the rendezvous said it steered (a
		// succession this process heard of after the loss): recovery
		// learns who steers now
		j.recovery.ProcessLost(lost)
	}
}

// sendList sends process to the job's list as a replacement needs it
// when the steward that admitted it was lost: members, who steers
// (steward: Code, plus one), and the processes lost, which will not dial
// it (one that has its list ignores this).
func (j *Job) sendList(to, steward int, members []Member, gone []int) {
	j.send(to, control{Kind: ctlMembers, Members: members, Gen: j.gen.Load(), Code: steward + 1, Lost: gone})
}

// lostRanks lists the processes lost and not yet replaced, in order
// (j.mu held): what a replacement's list says it need not wait for.
func (j *Job) lostRanks() []int {
	var gone []int
	for q, l := range j.lost {
		if l {
			gone = append(gone, q)
		}
	}
	slices.Sort(gone)
	return gone
}

// IsLost reports whether process r is lost and its replacement has not
// joined yet.
func (j *Job) IsLost(r int) bool {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.lost[r]
}

// Steward is the process that admits replacements and steers the job's
// recoveries: process 0, or the process that took over once it was lost.
func (j *Job) Steward() int { return j.stewardRank() }

func (j *Job) stewardRank() int {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.steward
}

// rejoin is the steward admitting the replacement of a lost process into
// the running job: the replacement gets the list and the job's generation,
// the others connect to it.
//
// Replacements of processes lost close together are admitted together,
// once the last of them asked: each gets a list that names the others'
// replacements (so they connect to each other, not to what was lost), and
// the processes that ran on are told of them all.
func (j *Job) rejoin(m control) {
	if m.Member == nil || j.stewardRank() != j.cfg.Rank {
		return
	}
	who := *m.Member
	pid := actor.NewPID(who.Control, actorName)
	j.mu.Lock()
	if who.Rank >= 0 && who.Rank < j.cfg.Procs && !j.lost[who.Rank] && j.members[who.Rank].Inc == who.Inc && who.Control == j.members[who.Rank].Control {
		// in already: the steward that admitted it was lost before its
		// list came, and this process took over (stewardGone); it asks
		// here, where the rendezvous points now
		members, gone := slices.Clone(j.members), j.lostRanks()
		j.mu.Unlock()
		j.log.Info("a replacement admitted by the lost steward asked again: its list", zap.Int("process", who.Rank))
		j.sendList(who.Rank, j.cfg.Rank, members, gone)
		return
	}
	if who.Rank >= 0 && who.Rank < j.cfg.Procs && !j.lost[who.Rank] && who.Inc > j.members[who.Rank].Inc && who.Types == j.cfg.Types {
		// a replacement asked before this process noticed the loss
		// (seen on a busy machine with two processes killed within
		// 10 ms): the launcher starts one only once the process it
		// replaces is gone
		inc := j.members[who.Rank].Inc
		j.mu.Unlock()
		j.log.Info("a replacement asked to join before the loss of the process it replaces was noticed", zap.Int("process", who.Rank))
		j.processLost(who.Rank, inc, "its replacement asked to join (the process is gone)")
		j.mu.Lock()
	}
	ok := who.Rank >= 0 && who.Rank < j.cfg.Procs && j.lost[who.Rank] && who.Inc > j.members[who.Rank].Inc && who.Types == j.cfg.Types &&
		!slices.ContainsFunc(j.joining, func(o Member) bool { return o.Rank == who.Rank })
	if !ok {
		j.mu.Unlock()
		j.log.Warn("refused a process that asked to join the running job", zap.Int("its rank", who.Rank), zap.Int("incarnation", who.Inc))
		j.sys.Root.Send(pid, wrap(control{Kind: ctlRefused, Err: fmt.Sprintf("rank %d is not a lost process of this job", who.Rank)}))
		return
	}
	j.joining = append(j.joining, who)
	for r := range j.lost {
		if !j.admitted[r] && !slices.ContainsFunc(j.joining, func(o Member) bool { return o.Rank == r }) {
			j.mu.Unlock()
			return // the replacement of another lost process has not asked yet
		}
	}
	joining := j.joining
	j.joining = nil
	if j.admitted == nil {
		j.admitted = map[int]bool{}
	}
	for _, w := range joining {
		j.members[w.Rank], j.pids[w.Rank] = w, actor.NewPID(w.Control, actorName)
		j.lastBeat[w.Rank] = time.Now()
		j.admitted[w.Rank] = true
	}
	members := slices.Clone(j.members)
	j.mu.Unlock()
	j.tendNeighbours()
	// the others hear of the replacements first, and (through a
	// rendezvous that can name a successor) in one order with the
	// steward's loss: if this process is lost in between, they agree on
	// who is in and who takes over, and the successor sends a
	// replacement the list it did not get (stewardGone)
	rv, _ := j.cfg.Rendezvous.(Succession)
	for _, w := range joining {
		if rv != nil {
			if err := rv.Admitted(w); err != nil {
				j.log.Warn("could not tell the rendezvous of a replacement", zap.Int("process", w.Rank), zap.Error(err))
			}
			continue
		}
		for r := range j.cfg.Procs {
			if r != j.cfg.Rank && !slices.ContainsFunc(joining, func(o Member) bool { return o.Rank == r }) {
				j.send(r, control{Kind: ctlRejoin, Member: &w})
			}
		}
	}
	for _, w := range joining {
		j.send(w.Rank, control{Kind: ctlMembers, Members: members, Gen: j.gen.Load()})
		if w.Rank < j.cfg.Rank {
			// a higher rank dials (process 0's replacement, when its
			// successor steers)
			go j.dialJoined(w)
		}
	}
}

// forwardNotices hands the rendezvous's notices to the run loop, in
// their order, until the run is done.
func (j *Job) forwardNotices(notices <-chan Notice, done <-chan struct{}) {
	for {
		select {
		case n := <-notices:
			if n.Joined != nil {
				j.ctl <- control{Kind: ctlAdmittedNotice, Member: n.Joined}
			} else {
				j.ctl <- control{Kind: ctlStewardGone, Code: n.Lost, Inc: n.LostInc, Next: n.Next}
			}
		case <-done:
			return
		}
	}
}

// admittedNotice is the rendezvous's notice that the steward admitted
// who: a process that knows it already (the steward, who itself, or one
// that had it from the steward before) has nothing to do.
func (j *Job) admittedNotice(who Member) {
	j.mu.Lock()
	known := who.Rank < 0 || who.Rank >= j.cfg.Procs || j.members[who.Rank].Inc >= who.Inc
	j.mu.Unlock()
	if !known {
		j.rejoined(who)
	}
}

// rejoined: the replacement of a lost process joined; a process of a
// higher rank connects its data plane to it.
func (j *Job) rejoined(who Member) {
	j.mu.Lock()
	delete(j.lost, who.Rank)
	j.members[who.Rank], j.pids[who.Rank] = who, actor.NewPID(who.Control, actorName)
	j.lastBeat[who.Rank] = time.Now()
	// a link to it up already (its dial came before this notice) was
	// reported as it started (linkStarted: its handshake said its
	// incarnation)
	j.mu.Unlock()
	j.tendNeighbours()
	if j.cfg.Rank > who.Rank {
		go j.dialJoined(who)
	}
}

// dialJoined connects the data plane to who, a replacement of a lower
// rank that joined. If it cannot, the job fails, unless the replacement
// is gone: its port refuses or resets the connection (it is taken for
// lost, as a link that goes down is), or its loss or a later
// replacement's join was noticed meanwhile (that notice speaks for it).
// Any other failure is dialed again until the connect timeout.
func (j *Job) dialJoined(who Member) {
	deadline := time.Now().Add(j.cfg.ConnectTimeout)
	for b := newBackoff(200 * time.Millisecond); ; {
		err := j.dial(who.Rank, deadline)
		if err == nil {
			return
		}
		if errors.Is(err, errRefused) {
			// it dials this process itself (a link it opened on first
			// use): that connection is the link, and claim takes it
			return
		}
		j.mu.Lock()
		// (the steward keeps a replacement lost and admitted until its
		// links are up; a notice of its loss ends the admission)
		superseded := j.members[who.Rank].Inc != who.Inc || j.lost[who.Rank] && !j.admitted[who.Rank]
		j.mu.Unlock()
		switch {
		case superseded:
			return
		case peerGone(err):
			j.ctl <- control{Kind: ctlLost, From: who.Rank, Inc: who.Inc, Err: "its data port refused or reset the connection as it joined (the process is gone)"}
			return
		case !time.Now().Before(deadline):
			j.peerFailed(who.Rank, err.Error(), true)
			return
		}
		j.log.Info("could not reach a replacement that joined: dialing again", zap.Int("process", who.Rank), zap.Error(err))
		time.Sleep(b.wait(deadline)) // (a goroutine of its own: nothing to wait on but time)
	}
}

// Waiting says what this process waits for from the others while a lost
// process is replaced, for the watchdog's dump, or "" when it waits for
// nothing: the steward says how far each replacement got (asked to join,
// admitted, which links are up), the others which process they lost.
func (j *Job) Waiting() string {
	j.mu.Lock()
	defer j.mu.Unlock()
	var parts []string
	for _, r := range slices.Sorted(maps.Keys(j.lost)) {
		joining := slices.ContainsFunc(j.joining, func(o Member) bool { return o.Rank == r })
		_, succeeding := j.succession[r]
		switch {
		case succeeding:
			parts = append(parts, fmt.Sprintf("process %d, the steward, was lost, and the rendezvous has not said who takes over", r))
		case j.cfg.Rank != j.steward:
			parts = append(parts, fmt.Sprintf("process %d was lost, and process %d has not said its replacement joined", r, j.steward))
		case joining:
			parts = append(parts, fmt.Sprintf("the replacement of process %d asked to join: it is admitted with those of the others lost", r))
		case !j.admitted[r]:
			parts = append(parts, fmt.Sprintf("process %d was lost, and its replacement has not asked to join", r))
		default:
			var missing []string
			if !j.replReady[r] {
				missing = append(missing, "its own links")
			}
			for p := 0; p < j.cfg.Procs; p++ {
				if p != r && !j.linked[r][p] && !(j.lost[p] && j.replReady[p]) {
					missing = append(missing, fmt.Sprintf("process %d's link to it", p))
				}
			}
			if len(missing) == 0 {
				missing = append(missing, "the replacements of the others lost")
			}
			parts = append(parts, fmt.Sprintf("the replacement of process %d was admitted; waiting for %s", r, strings.Join(missing, ", ")))
		}
	}
	return strings.Join(parts, "; ")
}

// Broadcast sends a recovery step to every process (the steward only):
// each takes it with Recovery.Action, in the order sent.
func (j *Job) Broadcast(data []byte) {
	for r := range j.cfg.Procs {
		j.send(r, control{Kind: ctlAction, Data: data})
	}
}

// Report tells the steward how a recovery goes here (Recovery.Report).
func (j *Job) Report(data []byte) { j.send(j.stewardRank(), control{Kind: ctlReport, Data: data}) }

// onReport is ctlReport: the steward takes it; another process passes
// it on, once, to the steward it knows (its sender's step went past a
// hand-back: StewardBack), its sender named in Code (plus one).
func (j *Job) onReport(m control) {
	from := m.From
	if m.Code > 0 {
		from = m.Code - 1
	}
	if st := j.stewardRank(); st == j.cfg.Rank {
		j.recovery.Report(from, m.Data)
	} else if m.Code == 0 && st != m.From {
		j.send(st, control{Kind: ctlReport, Data: m.Data, Code: from + 1})
	}
}

// HandBack, on the successor of a lost process 0 that steers the job,
// hands the steering back to process 0's replacement, if no process is
// lost or joining: it stops steering at once (a replacement that asks
// it to join from now on is told where process 0 is by the rendezvous,
// once process 0 took over) and broadcasts step, a recovery step that
// says so (every process then calls StewardBack, in the order of the
// steps). It reports whether it did.
func (j *Job) HandBack(step []byte) bool {
	j.mu.Lock()
	quiet := j.steward == j.cfg.Rank && j.cfg.Rank != 0 && len(j.joining) == 0 && len(j.admitted) == 0
	for _, lost := range j.lost {
		quiet = quiet && !lost
	}
	if quiet {
		j.steward = 0
	}
	j.mu.Unlock()
	if quiet {
		j.log.Info("handing the steering of the job back to process 0")
		j.Broadcast(step)
	}
	return quiet
}

// StewardBack: the successor of a lost process 0 handed the steering of
// the job back to process 0's replacement (HandBack). Process 0 steers
// from now on, and points the rendezvous at itself, so that a
// replacement finds it there — unless it was lost again meanwhile: then
// the process the rendezvous named to take over steers (stewardGone).
// It reports whether process 0 steers.
func (j *Job) StewardBack() (bool, error) {
	j.mu.Lock()
	back := !j.lost[0]
	if back {
		j.steward = 0
	}
	j.mu.Unlock()
	rv, ok := j.cfg.Rendezvous.(Succession)
	if !back || j.cfg.Rank != 0 || !ok {
		return back, nil
	}
	if err := rv.Succeed(j.sys.Address()); err != nil {
		return true, fmt.Errorf("process 0 steers the job again, and could not tell the rendezvous: %w", err)
	}
	j.log.Info("the steering of the job came back to this process")
	return true, nil
}

// RollBack runs rollback (which rolls the node back: pe.Node.RollBack)
// as the job's generation gen: frames sent before it, by any process,
// are dropped wherever they arrive after it; frames of gen that arrive
// before it are held until it is done.
func (j *Job) RollBack(gen uint64, rollback func()) {
	for r := range j.links {
		if l := j.links[r].Load(); l != nil {
			l.hold()
		}
	}
	j.mu.Lock()
	j.nextGen = gen
	j.mu.Unlock()
	rollback()
	j.Rolled()
}

// RolledBack implements the node's rollback hook: every PE stopped, so
// what is queued for other processes is dropped, and frames go out with
// the next generation.
func (j *Job) RolledBack() {
	j.mu.Lock()
	gen := j.nextGen
	j.mu.Unlock()
	for r := range j.links {
		if l := j.links[r].Load(); l != nil {
			l.dropQueued()
		}
	}
	if gen > j.gen.Load() {
		j.gen.Store(gen)
	}
}

// Rolled releases what the links held during a recovery step: frames of
// the job's generation go to the PEs, older ones are dropped.
func (j *Job) Rolled() {
	j.mu.Lock()
	j.stepped = true
	j.mu.Unlock()
	for r := range j.links {
		if l := j.links[r].Load(); l != nil {
			l.release(j.node)
		}
	}
}

// Generation is the job's rollback generation.
func (j *Job) Generation() uint64 { return j.gen.Load() }

// peerFailed ends the run here because of peer r.
func (j *Job) peerFailed(r int, msg string, lost bool) {
	if j.ending.Load() {
		return
	}
	if lost {
		// gone or hung: its statistics will not come at the end
		j.mu.Lock()
		j.lost[r] = true
		j.mu.Unlock()
		j.signalResults()
	}
	j.log.Debug("peer failed", zap.Int("peer", r), zap.String("why", msg))
	j.node.Fail(&PeerError{Member: j.member(r), Msg: firstLine(msg), Lost: lost})
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
			from := m.From
			if m.Orig > 0 && m.Orig <= j.cfg.Procs {
				from = m.Orig - 1
			}
			j.peerFailed(from, m.Err, m.Gone)
		} else {
			j.ending.Store(true)
			j.node.Stop(m.Code)
		}
	case ctlLost:
		j.processLost(m.From, m.Inc, m.Err)
	case ctlLostNotice:
		if m.Code >= 0 && m.Code < j.cfg.Procs && m.Code != j.cfg.Rank {
			j.processLost(m.Code, m.Inc, m.Err)
		}
	case ctlJoin:
		j.rejoin(m)
	case ctlRejoin:
		if m.Member != nil {
			// (only the steward admits: one that took over while this
			// process had not yet noticed the loss of the one before)
			j.mu.Lock()
			j.steward = m.From
			j.mu.Unlock()
			j.rejoined(*m.Member)
		}
	case ctlReady:
		j.replacementLinked(m.From, m.From)
	case ctlLinked:
		j.replacementLinked(m.Code, m.From)
	case ctlAdmittedNotice:
		if m.Member != nil {
			j.admittedNotice(*m.Member)
		}
	case ctlStewardGone:
		j.stewardGone(m.Code, m.Inc, m.Next)
	case ctlAction:
		if j.recovery != nil {
			j.recovery.Action(m.Data)
		}
	case ctlBeat:
		j.mu.Lock()
		j.lastBeat[m.From] = time.Now()
		switch {
		case m.From == j.parent:
			j.parentTotal = m.Total
		case slices.Contains(j.children, m.From):
			j.progress[m.From] = m.Progress
		}
		remote := j.parentTotal
		for _, c := range j.children {
			remote += j.progress[c]
		}
		node := j.node
		j.mu.Unlock()
		if node != nil {
			node.SetRemoteProgress(remote)
		}
	case ctlCheckBeats:
		j.checkBeats()
	case ctlDie:
		j.die(m.Err)
	case ctlKillHung:
		j.onKillHung(m)
	case ctlClock:
		j.send(m.From, control{Kind: ctlClockReply, Gen: m.Gen, Clock: time.Now().UnixNano()})
	case ctlClockReply:
		select {
		case j.clocks <- m:
		default: // nobody waits any more
		}
	case ctlReport:
		if j.recovery != nil {
			j.onReport(m)
		}
	case ctlResult:
		j.mu.Lock()
		j.results[m.From] = m.Data
		j.mu.Unlock()
		j.signalResults()
	case ctlRelease:
		j.release()
	}
}

// release ends this process's part at the end (Finish), once process 0
// has the results, and passes the release on to its children in the tree.
// Each process exits once released, perhaps before its releases left
// (protoactor-go drops what its writers hold when the actor system
// stops): a child that does not hear it sees its parent gone instead,
// which releases it as well (processLost), since it watches its parent.
func (j *Job) release() {
	j.relOnce.Do(func() {
		j.mu.Lock()
		_, children := j.treeLocked(time.Now())
		j.mu.Unlock()
		for _, c := range children {
			j.send(c, control{Kind: ctlRelease})
		}
		close(j.released)
	})
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
// them, and then releases the others, along the tree. A process other
// than 0 returns nil once released (or once process 0, or its parent in
// the tree, is gone).
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
	j.release()
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
		for r := range j.links {
			if l := j.links[r].Load(); l != nil {
				l.shut()
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

// KillProcess injects a failure: process rank ends itself by SIGKILL, as
// a crash would end it (the job sees it lost and replaces it), and says
// why on its standard error first.
func (j *Job) KillProcess(rank int, why string) {
	if rank == j.cfg.Rank {
		j.die(why)
		return
	}
	j.send(rank, control{Kind: ctlDie, Err: why})
}

func (j *Job) die(why string) {
	fmt.Fprintf(os.Stderr, "charmgo: process %d (pid %d) ends itself by SIGKILL: %s\n", j.cfg.Rank, os.Getpid(), why)
	if p, err := os.FindProcess(os.Getpid()); err == nil {
		p.Kill()
	}
	select {} // the signal is on its way: nothing more runs here
}

func (j *Job) send(r int, m control) {
	m.From = j.cfg.Rank
	j.counts.sent.Add(1)
	if m.Kind == ctlBeat {
		j.counts.beatsSent.Add(1)
	}
	j.mu.Lock()
	pid := j.pids[r]
	j.mu.Unlock()
	j.sys.Root.Send(pid, wrap(m))
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

// ClockOffsets estimates, on process 0, how far each process's wall
// clock is from process 0's (their clock minus this one's), as NTP does:
// rounds requests over the control plane to each, and from the one with
// the shortest round trip, the reply's clock less the middle of the
// round trip. The error is at most half that round trip (tens of
// microseconds on a LAN). A process that does not answer within timeout
// has no entry.
func (j *Job) ClockOffsets(rounds int, timeout time.Duration) map[int]time.Duration {
	out := map[int]time.Duration{0: 0}
	if j.cfg.Rank != 0 {
		return out
	}
	var seq uint64
	for r := 1; r < j.cfg.Procs; r++ {
		best := time.Duration(-1)
		var off time.Duration
		for i := 0; i < rounds; i++ {
			seq++
			sent := time.Now()
			j.send(r, control{Kind: ctlClock, Gen: seq})
			deadline := time.After(timeout)
		wait:
			for {
				select {
				case m := <-j.clocks:
					if m.Gen != seq || m.From != r {
						continue // a late reply to an earlier request
					}
					back := time.Now()
					rtt := back.Sub(sent)
					if best < 0 || rtt < best {
						mid := sent.Add(rtt / 2)
						best, off = rtt, time.Duration(m.Clock-mid.UnixNano())
					}
					break wait
				case <-deadline:
					break wait
				}
			}
		}
		if best >= 0 {
			out[r] = off
		}
	}
	return out
}
