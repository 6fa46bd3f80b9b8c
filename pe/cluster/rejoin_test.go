package cluster

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
)

// joinedRecorder is a Recovery that notes which replacements joined.
type joinedRecorder struct{ joined, lost []int }

func (r *joinedRecorder) ProcessLost(q int) bool { r.lost = append(r.lost, q); return true }
func (r *joinedRecorder) Replaces() bool         { return true }
func (r *joinedRecorder) Rejoined(q int)         { r.joined = append(r.joined, q) }
func (r *joinedRecorder) Action([]byte)          {}
func (r *joinedRecorder) Report(int, []byte)     {}

// Two processes of three lost close together, their replacements
// admitted together: process 0 hears, in any order, that its own link
// to each is up and that each has its links (to process 0 and to the
// other replacement) up. Whatever the order, both replacements join,
// once each, and only when everything is up. (On the code before, a
// ready replacement heard of before process 0's link to the other was
// taken as joined alone, and the other waited for ever: a hang seen with
// two processes SIGKILLed at once on a busy machine.)
func TestReplacementsAdmittedTogetherJoinInAnyOrder(t *testing.T) {
	type event struct{ replacement, from int }
	events := []event{{1, 0}, {1, 1}, {2, 0}, {2, 2}} // {r, 0}: process 0's link to r; {r, r}: r is ready
	var orders [][]event
	var permute func(prefix []event, rest []event)
	permute = func(prefix, rest []event) {
		if len(rest) == 0 {
			orders = append(orders, prefix)
			return
		}
		for i := range rest {
			next := append(append([]event{}, rest[:i]...), rest[i+1:]...)
			permute(append(append([]event{}, prefix...), rest[i]), next)
		}
	}
	permute(nil, events)
	require.Len(t, orders, 24)
	for _, order := range orders {
		t.Run(fmt.Sprint(order), func(t *testing.T) {
			rec := &joinedRecorder{}
			j := &Job{cfg: Config{Procs: 3}, log: zap.NewNop(), lost: map[int]bool{1: true, 2: true}, recovery: rec}
			for i, e := range order {
				j.replacementLinked(e.replacement, e.from)
				if i < len(order)-1 {
					require.Empty(t, rec.joined, "joined before every link was up")
				}
			}
			require.Equal(t, []int{1, 2}, rec.joined)
			require.Empty(t, j.lost)
		})
	}
}

// A replacement admitted alone, while another process is still lost,
// waits for that one's replacement; the links the running processes
// report count, and a report for a rank out of range is ignored.
func TestAReplacementWaitsForTheOtherLostProcess(t *testing.T) {
	rec := &joinedRecorder{}
	j := &Job{cfg: Config{Procs: 4}, log: zap.NewNop(), lost: map[int]bool{1: true}, recovery: rec}
	j.replacementLinked(1, 0)
	j.replacementLinked(1, 2)
	j.replacementLinked(7, 0)
	j.lost[3] = true // lost before process 1's replacement was ready
	j.replacementLinked(1, 1)
	require.Empty(t, rec.joined)
	j.replacementLinked(3, 0)
	j.replacementLinked(3, 1)
	j.replacementLinked(3, 2)
	require.Empty(t, rec.joined)
	j.replacementLinked(1, 3) // process 1's replacement runs: it reports its link to 3's
	require.Empty(t, rec.joined)
	j.replacementLinked(3, 3)
	require.Equal(t, []int{1, 3}, rec.joined)
}

// A notice of a lost process that comes after its replacement joined
// (its old link or actor system went down earlier; the notice waited in
// line) is of no process of the job: the replacement is not taken for
// lost. A loss of the replacement itself is.
func TestALateNoticeOfAReplacedProcessIsIgnored(t *testing.T) {
	rec := &joinedRecorder{}
	j := &Job{cfg: Config{Procs: 3}, log: zap.NewNop(), lost: map[int]bool{}, recovery: rec,
		members: []Member{{Rank: 0}, {Rank: 1, Inc: 1}, {Rank: 2}}, links: make([]atomic.Pointer[link], 3)}
	j.processLost(1, 0, "its connection closed")
	require.Empty(t, rec.lost)
	require.Empty(t, j.lost)
	j.processLost(1, 1, "its connection closed")
	require.Equal(t, []int{1}, rec.lost)
	require.True(t, j.lost[1])
	j.processLost(2, 0, "its connection closed")
	require.Equal(t, []int{1, 2}, rec.lost)
}

// The watchdog's dump says how far each replacement got: the steward
// names what it still waits for, another process the process it lost and
// the steward it waits for; nothing when no process is lost.
func TestWaitingSaysHowFarEachReplacementGot(t *testing.T) {
	j := &Job{cfg: Config{Procs: 4}, log: zap.NewNop(), lost: map[int]bool{}, recovery: &joinedRecorder{}}
	require.Empty(t, j.Waiting())
	j.lost[1], j.lost[2], j.lost[3] = true, true, true
	j.joining = []Member{{Rank: 2}}
	j.admitted = map[int]bool{1: true}
	j.replacementLinked(1, 1)
	j.replacementLinked(1, 0)
	require.Equal(t, "the replacement of process 1 was admitted; waiting for process 2's link to it, process 3's link to it; "+
		"the replacement of process 2 asked to join: it is admitted with those of the others lost; "+
		"process 3 was lost, and its replacement has not asked to join", j.Waiting())

	other := &Job{cfg: Config{Rank: 1, Procs: 3}, lost: map[int]bool{2: true}}
	require.Equal(t, "process 2 was lost, and process 0 has not said its replacement joined", other.Waiting())
	// process 0 lost, process 1 steers: process 2 waits for process 1
	third := &Job{cfg: Config{Rank: 2, Procs: 3}, steward: 1, lost: map[int]bool{0: true}}
	require.Equal(t, "process 0 was lost, and process 1 has not said its replacement joined", third.Waiting())
}

// A peer's connection ending as a dying process ends it reads in words;
// anything else, as it is.
func TestWhyAPeerIsTakenForLost(t *testing.T) {
	reset := &net.OpError{Op: "read", Net: "tcp", Err: os.NewSyscallError("read", syscall.ECONNRESET)}
	pipe := &net.OpError{Op: "write", Net: "tcp", Err: os.NewSyscallError("write", syscall.EPIPE)}
	for _, c := range []struct {
		err  error
		want string
	}{
		{nil, "its connection closed"},
		{io.EOF, "its connection closed"},
		{fmt.Errorf("reading frame: %w", net.ErrClosed), "its connection closed"},
		{reset, "its connection was reset"},
		{fmt.Errorf("sending to process 0: %w", pipe), "its connection was reset"},
		{errors.New("frame 3: bad length 99999999999"), "frame 3: bad length 99999999999"},
	} {
		require.Equal(t, c.want, lostWhy(c.err), "%v", c.err)
	}
}

// Charmrun's rendezvous follows the steward: process 0 publishes its
// address at the start; once its connection ends (process 0 is gone), a
// lookup waits until a successor says it took over, and gets its
// address; a process that looked up the old one (joining meanwhile) is
// told the new one; the steward's admissions reach charmrun. A line that
// is no request is refused and the connection serves on.
func TestTheRendezvousFollowsTheSteward(t *testing.T) {
	secret, err := NewSecret()
	require.NoError(t, err)
	srv, err := ServeRendezvous("127.0.0.1", secret, 3, zap.NewNop(), 0)
	require.NoError(t, err)
	defer srv.Close()
	at := func(r int) *Charmrun { return &Charmrun{Addr: srv.Addr(), Secret: secret, Rank: r} }
	soon := func() time.Time { return time.Now().Add(5 * time.Second) }

	p0, p1, p2 := at(0), at(1), at(2)
	require.NoError(t, p0.Publish("127.0.0.1:10"))
	for _, p := range []*Charmrun{p1, p2} {
		addr, err := p.Lookup(soon())
		require.NoError(t, err)
		require.Equal(t, "127.0.0.1:10", addr)
	}
	require.NoError(t, p1.line("X nonsense")) // refused, logged: p1 goes on
	p0.Close()                                // process 0 is lost
	<-p0.Gone()

	// its replacement looks the steward up: it waits for the successor
	replacement := at(0)
	got := make(chan string, 1)
	go func() {
		addr, err := replacement.Lookup(soon())
		require.NoError(t, err)
		got <- addr
	}()
	select {
	case a := <-got:
		t.Fatalf("the lookup got %q before a successor took over", a)
	case <-time.After(100 * time.Millisecond):
	}
	require.NoError(t, p1.Succeed("127.0.0.1:11"))
	select {
	case a := <-got:
		require.Equal(t, "127.0.0.1:11", a)
	case <-time.After(5 * time.Second):
		t.Fatal("the lookup did not get the successor's address")
	}
	select {
	case a := <-p2.Moved(): // it looked up process 0's
		require.Equal(t, "127.0.0.1:11", a)
	case <-time.After(5 * time.Second):
		t.Fatal("a process that looked up the lost steward was not told of its successor")
	}
	select {
	case a := <-p1.Moved():
		t.Fatalf("the successor was told of itself: %q", a)
	default:
	}
	require.NoError(t, p1.Admitted(0))
	select {
	case r := <-srv.Admitted():
		require.Equal(t, 0, r)
	case <-time.After(5 * time.Second):
		t.Fatal("charmrun did not hear of the admission")
	}
}

// A successor takes over only when the launcher replaces processes and
// the rendezvous can point at another process than 0; it is the lowest
// rank left, as every process that noticed the loss finds.
func TestTheLowestRankLeftSucceedsTheSteward(t *testing.T) {
	for _, c := range []struct {
		name  string
		rv    Rendezvous
		lost  []int
		want  int  // the steward after
		takes bool // a successor took over
	}{
		{"charmrun's rendezvous", &Charmrun{}, []int{0}, 1, true},
		{"the successor lost too", &Charmrun{}, []int{0, 1}, 2, true},
		{"a fixed address", FixedAddress("127.0.0.1:9"), []int{0}, 0, false},
		{"a directory", Directory{Dir: t.TempDir(), Job: "1"}, []int{0}, 0, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			j := &Job{cfg: Config{Rank: 3, Procs: 4, Rendezvous: c.rv}, log: zap.NewNop(), lost: map[int]bool{}, recovery: &joinedRecorder{}}
			for _, r := range c.lost {
				j.lost[r] = true
			}
			require.Equal(t, c.takes, j.succeed(0))
			require.Equal(t, c.want, j.Steward())
		})
	}
}

// The lines of charmrun's rendezvous come from the job's processes
// (proven by the secret), but are parsed as bytes from the network:
// whatever they are, a request or an error, never a panic, and an
// address or rank that is accepted is one.
func FuzzRendezvousRequest(f *testing.F) {
	for _, s := range []string{"L", "P 127.0.0.1:80", "S [::1]:9", "J 2", "J -1", "J 99999999999999999999", "P", "S x", "L extra", ""} {
		f.Add(s, 0)
		f.Add(s, 1)
	}
	f.Fuzz(func(t *testing.T, line string, from int) {
		req, err := parseRequest(line, from, 3)
		if err != nil {
			return
		}
		switch req.kind {
		case 'P', 'S':
			_, _, err := net.SplitHostPort(req.addr)
			require.NoError(t, err)
			require.True(t, req.kind == 'S' || from == 0)
		case 'J':
			require.True(t, req.rank >= 0 && req.rank < 3)
		case 'L':
		default:
			t.Fatalf("kind %q", req.kind)
		}
	})
}

// A replacement admitted while another process was lost but not yet
// noticed (two processes SIGKILLed close together) finds that process's
// data port refusing: it takes it for lost once the job runs, its link
// down meanwhile, instead of ending the job with "connection refused"
// (a flaky line in charmrun's test of two processes lost at once). A
// process of the first start still fails: its peers must all be there.
func TestAReplacementTakesARefusingPeerForLost(t *testing.T) {
	refusing := func() string {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		addr := ln.Addr().String()
		ln.Close() // nothing listens there now
		return addr
	}
	job := func(inc int) *Job {
		cfg := Config{Procs: 3, PEs: 3, Rank: 2, Incarnation: inc}
		j := &Job{cfg: cfg, log: zap.NewNop(), links: make([]atomic.Pointer[link], 3), linkUp: make(chan int, 12), lost: map[int]bool{}}
		j.first, j.count = Block(cfg.PEs, cfg.Procs, cfg.Rank)
		j.members = []Member{{Rank: 0, Data: refusing(), Inc: 3}, {Rank: 1, Data: refusing(), Inc: 1}, {Rank: 2, Inc: inc}}
		return j
	}
	j := job(1)
	require.NoError(t, j.connect(time.Now().Add(5*time.Second)))
	for r := range 2 {
		l := j.links[r].Load()
		require.NotNil(t, l, "process %d's link", r)
		require.True(t, l.down.Load(), "process %d's link is down", r)
		require.NoError(t, l.deliver(2, r, nil), "what is sent to it is dropped")
	}
	require.Len(t, j.early, 2)
	for r, m := range j.early {
		require.Equal(t, ctlLost, m.Kind)
		require.Equal(t, r, m.From)
		require.Equal(t, j.members[r].Inc, m.Inc)
	}

	err := job(0).connect(time.Now().Add(5 * time.Second))
	require.ErrorIs(t, err, syscall.ECONNREFUSED, "at the first start")
}

// A replacement waiting for a higher rank to dial it stops waiting once
// that process is lost (the steward that admitted it, lost as it did):
// it takes it for lost once the job runs, its link down meanwhile,
// instead of ending the job when the connect timeout runs out (seen
// with process 0 and its successor SIGKILLed within 50 ms). Every
// control message read meanwhile is the run loop's, in order. A process
// of the first start still waits for all.
func TestAReplacementStopsWaitingForALostPeer(t *testing.T) {
	job := func(inc int) *Job {
		cfg := Config{Procs: 3, PEs: 3, Rank: 0, Incarnation: inc}
		j := &Job{cfg: cfg, log: zap.NewNop(), links: make([]atomic.Pointer[link], 3), linkUp: make(chan int, 12), lost: map[int]bool{}, ctl: make(chan control, 8)}
		j.first, j.count = Block(cfg.PEs, cfg.Procs, cfg.Rank)
		j.members = []Member{{Rank: 0, Inc: inc}, {Rank: 1, Inc: 2}, {Rank: 2, Inc: 0}}
		j.ctl <- control{Kind: ctlLost, From: 1, Inc: 2}
		j.ctl <- control{Kind: ctlBeat, From: 2}
		j.ctl <- control{Kind: ctlLost, From: 1, Inc: 1} // (an earlier incarnation's: not this one)
		j.ctl <- control{Kind: ctlLost, From: 2, Inc: 0}
		return j
	}
	j := job(1)
	require.NoError(t, j.connect(time.Now().Add(5*time.Second)))
	for r := 1; r < 3; r++ {
		l := j.links[r].Load()
		require.NotNil(t, l, "process %d's link", r)
		require.True(t, l.down.Load(), "process %d's link is down", r)
	}
	require.Equal(t, []ctlKind{ctlLost, ctlBeat, ctlLost, ctlLost}, []ctlKind{j.early[0].Kind, j.early[1].Kind, j.early[2].Kind, j.early[3].Kind})
	require.Len(t, j.early, 4)

	first := job(0)
	err := first.connect(time.Now().Add(100 * time.Millisecond))
	require.ErrorContains(t, err, "did not connect within", "at the first start")
	require.Len(t, first.ctl, 4, "nothing read")
}

// A replacement whose list came from a process that took it for the
// steward says which processes are lost: it does not wait for them to
// dial it (their actor systems may take seconds to be found gone).
func TestAReplacementDoesNotWaitForProcessesItsListSaysAreLost(t *testing.T) {
	cfg := Config{Procs: 3, PEs: 3, Rank: 0, Incarnation: 1}
	j := &Job{cfg: cfg, log: zap.NewNop(), links: make([]atomic.Pointer[link], 3), linkUp: make(chan int, 12), lost: map[int]bool{}, ctl: make(chan control, 8)}
	j.first, j.count = Block(cfg.PEs, cfg.Procs, cfg.Rank)
	j.members = []Member{{Rank: 0, Inc: 1}, {Rank: 1, Inc: 2}, {Rank: 2, Inc: 0}}
	j.lostAtJoin = []int{1, 2}
	require.NoError(t, j.connect(time.Now().Add(100*time.Millisecond)))
	require.Len(t, j.early, 2)
	for i, r := range []int{1, 2} {
		require.Equal(t, ctlLost, j.early[i].Kind)
		require.Equal(t, r, j.early[i].From)
		require.Equal(t, j.members[r].Inc, j.early[i].Inc)
		require.True(t, j.links[r].Load().down.Load())
	}
}
