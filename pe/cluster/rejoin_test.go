package cluster

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/charmgo/charmgo/pe"
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
// address at the start; once its connection ends (process 0 is gone),
// every process is told who steers next, a lookup waits until that one
// says it took over, and gets its address; a process that looked up the
// old one (joining meanwhile) is told the new one; the steward's
// admissions reach charmrun and every other process. A line that is no
// request is refused and the connection serves on.
func TestTheRendezvousFollowsTheSteward(t *testing.T) {
	srv, at := testRendezvous(t, 3)
	soon := func() time.Time { return time.Now().Add(5 * time.Second) }

	p0, p1, p2 := at(0, 0), at(1, 0), at(2, 0)
	require.NoError(t, p0.Publish("127.0.0.1:10"))
	for _, p := range []*Charmrun{p1, p2} {
		addr, err := p.Lookup(soon())
		require.NoError(t, err)
		require.Equal(t, "127.0.0.1:10", addr)
	}
	require.NoError(t, p1.line("Q nonsense")) // refused, logged: p1 goes on
	p0.Close()                                // process 0 is lost
	<-p0.Gone()
	for _, p := range []*Charmrun{p1, p2} {
		require.Equal(t, Notice{Lost: 0, LostInc: 0, Next: 1}, nextNotice(t, p))
	}

	// its replacement looks the steward up: it waits for the successor
	replacement := at(0, 1)
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
	m := Member{Rank: 0, Inc: 1, Host: "h", PID: 7, Control: "127.0.0.1:12", Data: "127.0.0.1:13", Types: 42}
	require.NoError(t, p1.Admitted(m))
	for _, p := range []*Charmrun{p2, replacement} {
		require.Equal(t, Notice{Joined: &m, Lost: -1, LostInc: -1, Next: -1}, nextNotice(t, p))
	}
	select {
	case r := <-srv.Listed():
		t.Fatalf("charmrun took process %d's replacement for in the job before it had its list", r)
	default:
	}
	listedAt(t, srv, replacement)
	select {
	case n := <-p1.Notices():
		t.Fatalf("the steward was told of its own admission: %+v", n)
	default:
	}
}

// A successor that does not know the job (a replacement its steward
// admitted, lost before the list came) steers only where a process that
// knows it is left to send it the list: of a job of two, process 0 lost,
// its successor admitting process 0's replacement and lost in turn, no
// process is named (-1: the job cannot go on, and charmrun runs it again
// from its checkpoint directory) unless the replacement had its list.
func TestTheRendezvousNamesNoSuccessorThatCannotKnowTheJob(t *testing.T) {
	for _, listed := range []bool{false, true} {
		t.Run(fmt.Sprint("listed ", listed), func(t *testing.T) {
			srv, at := testRendezvous(t, 2)
			soon := func() time.Time { return time.Now().Add(5 * time.Second) }
			p0, p1 := at(0, 0), at(1, 0)
			require.NoError(t, p0.Publish("127.0.0.1:10"))
			_, err := p1.Lookup(soon())
			require.NoError(t, err)
			p0.Close()
			<-p0.Gone()
			require.Equal(t, Notice{Lost: 0, LostInc: 0, Next: 1}, nextNotice(t, p1))
			require.NoError(t, p1.Succeed("127.0.0.1:11"))
			r0 := at(0, 1)
			_, err = r0.Lookup(soon())
			require.NoError(t, err)
			m := Member{Rank: 0, Inc: 1, Control: "127.0.0.1:12", Data: "127.0.0.1:13"}
			require.NoError(t, p1.Admitted(m))
			require.Equal(t, Notice{Joined: &m, Lost: -1, LostInc: -1, Next: -1}, nextNotice(t, r0))
			if listed {
				listedAt(t, srv, r0)
			}
			p1.Close()
			require.Equal(t, Notice{Lost: 1, LostInc: 0, Next: map[bool]int{false: -1, true: 0}[listed]}, nextNotice(t, r0))
		})
	}
}

// testRendezvous serves charmrun's rendezvous for a job of procs
// processes, closed when t ends, and makes each process's side of it (at).
func testRendezvous(t *testing.T, procs int) (srv *RendezvousServer, at func(rank, inc int) *Charmrun) {
	t.Helper()
	secret, err := NewSecret()
	require.NoError(t, err)
	srv, err = ServeRendezvous("127.0.0.1", secret, procs, zap.NewNop(), 0)
	require.NoError(t, err)
	t.Cleanup(srv.Close)
	return srv, func(rank, inc int) *Charmrun {
		return &Charmrun{Addr: srv.Addr(), Secret: secret, Rank: rank, Inc: inc}
	}
}

// listedAt: replacement p says it has its list, and charmrun's launcher
// hears it (within 5 s).
func listedAt(t *testing.T, srv *RendezvousServer, p *Charmrun) {
	t.Helper()
	require.NoError(t, p.Listed())
	select {
	case r := <-srv.Listed():
		require.Equal(t, p.Rank, r)
	case <-time.After(5 * time.Second):
		t.Fatal("charmrun did not hear the replacement had its list")
	}
}

// nextNotice is the next notice p gets from charmrun, within 5 s.
func nextNotice(t *testing.T, p *Charmrun) Notice {
	t.Helper()
	select {
	case n := <-p.Notices():
		return n
	case <-time.After(5 * time.Second):
		t.Fatalf("process %d was told nothing", p.Rank)
		return Notice{}
	}
}

// Charmrun names the lost steward's successor: the lowest rank whose
// process is in the job (connected at the start, or admitted), so a
// replacement the steward admitted before it was lost may steer next,
// and one it had not is not, whatever the lost steward told each
// process. Every process hears it in the order of the admissions. A
// process that finds the steward gone first says so (Suspect): charmrun
// takes it for gone (a steward cut off from the others, not from
// charmrun) and names the next.
func TestTheRendezvousNamesOneSuccessor(t *testing.T) {
	for _, admitted := range []bool{false, true} {
		t.Run(fmt.Sprint("admitted ", admitted), func(t *testing.T) {
			srv, at := testRendezvous(t, 4)
			soon := func() time.Time { return time.Now().Add(5 * time.Second) }
			p := []*Charmrun{at(0, 0), at(1, 0), at(2, 0), at(3, 0)}
			require.NoError(t, p[0].Publish("127.0.0.1:10"))
			for _, q := range p[1:] {
				_, err := q.Lookup(soon())
				require.NoError(t, err)
			}
			p[1].Close() // process 1 is lost: not the steward, nobody is told
			<-p[1].Gone()
			r1 := at(1, 1) // its replacement looks the steward up
			_, err := r1.Lookup(soon())
			require.NoError(t, err)
			m := Member{Rank: 1, Inc: 1, Control: "127.0.0.1:12", Data: "127.0.0.1:13"}
			if admitted {
				require.NoError(t, p[0].Admitted(m))
				for _, q := range []*Charmrun{p[2], p[3], r1} {
					require.Equal(t, Notice{Joined: &m, Lost: -1, LostInc: -1, Next: -1}, nextNotice(t, q))
				}
			}
			p[0].Close()
			next := map[bool]int{false: 2, true: 1}[admitted]
			for _, q := range []*Charmrun{p[2], p[3], r1} {
				require.Equal(t, Notice{Lost: 0, LostInc: 0, Next: next}, nextNotice(t, q))
			}
			// the successor is lost before it said where it listens: the
			// one after it, found gone by another process first
			require.NoError(t, p[3].Suspect(next))
			after := map[bool]int{false: 3, true: 2}[admitted]
			for _, q := range []*Charmrun{p[2], p[3], r1} {
				if q.Rank != next {
					require.Equal(t, Notice{Lost: next, LostInc: map[bool]int{false: 0, true: 1}[admitted], Next: after}, nextNotice(t, q))
				}
			}
			if admitted {
				<-r1.Gone() // charmrun closed its connection
			} else {
				<-p[2].Gone()
			}
			select {
			case m := <-srv.Suspected(): // for the launcher to end it
				require.Equal(t, Ending{Rank: next, Inc: map[bool]int{false: 0, true: 1}[admitted]}, m)
			case <-time.After(5 * time.Second):
				t.Fatal("charmrun's launcher was not told of the steward found gone")
			}
			// the rest are in order: none left but the last
		})
	}
}

// The lines of charmrun's rendezvous come from the job's processes
// (proven by the secret), but are parsed as bytes from the network:
// whatever they are, a request or an error, never a panic, and an
// address or rank that is accepted is one.
func FuzzRendezvousRequest(f *testing.F) {
	m, err := encodeMember(Member{Rank: 2, Inc: 1, Control: "127.0.0.1:1", Data: "127.0.0.1:2"})
	require.NoError(f, err)
	far, err := encodeMember(Member{Rank: 7, Inc: 1, Control: "127.0.0.1:1", Data: "127.0.0.1:2"})
	require.NoError(f, err)
	for _, s := range []string{"L", "P 127.0.0.1:80", "S [::1]:9", "J " + m, "J " + far, "J 2", "J -1", "X 1", "X -1", "X 3", "I 0", "I 4", "I -1", "I x", "K 1 0", "K 1 2", "K 3 0", "K 1 -1", "K 1", "K x y", "P", "S x", "L extra", "H", "H 1", ""} {
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
			require.Equal(t, req.rank, req.member.Rank)
			require.Positive(t, req.member.Inc)
		case 'X':
			require.True(t, req.rank >= 0 && req.rank < 3)
		case 'I':
			require.GreaterOrEqual(t, req.rank, 0)
		case 'K':
			require.True(t, req.rank >= 0 && req.rank < 3)
			require.GreaterOrEqual(t, req.inc, 0)
		case 'L', 'H':
			require.Contains(t, []string{"L", "L ", "H", "H "}, line, "a lookup, and a replacement's word that it has its list, take nothing")
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
// process of the first start dials nobody as it starts: its links open on
// first use (linkTo), when a refusing port is a lost process too.
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

	first := job(0)
	require.NoError(t, first.connect(time.Now().Add(5*time.Second)), "at the first start")
	for r := range first.links {
		require.Nil(t, first.links[r].Load(), "at the first start, no link to process %d yet", r)
	}
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
	require.NoError(t, first.connect(time.Now().Add(100*time.Millisecond)), "at the first start: nobody to wait for")
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

// A replacement dialing a lower rank the steward listed, when that process
// is killed as it answers (seen with process 0 SIGKILLed 20 ms after the
// process it was admitting): a reset connection is a process gone; any
// other failure is dialed again until a notice of the loss comes (then
// taken for lost), or the process answers (then linked). At the first
// start nothing is dialed (links open on first use).
func TestAReplacementTakesAPeerGoneAsItAnswersForLost(t *testing.T) {
	secret, err := NewSecret()
	require.NoError(t, err)
	serve := func(in ...string) string { return dataPort(t, secret, in...) }
	job := func(inc int, data string, notices ...control) *Job {
		cfg := Config{Procs: 2, PEs: 2, Rank: 1, Incarnation: inc, Secret: secret}
		j := &Job{cfg: cfg, log: zap.NewNop(), links: make([]atomic.Pointer[link], 2), linkUp: make(chan int, 4), lost: map[int]bool{}, ctl: make(chan control, 4)}
		j.first, j.count = Block(cfg.PEs, cfg.Procs, cfg.Rank)
		j.members = []Member{{Rank: 0, Data: data, Inc: 2}, {Rank: 1, Inc: inc}}
		for _, m := range notices {
			j.ctl <- m
		}
		return j
	}
	for _, c := range []struct {
		name    string
		answers []string
		notices []control
		linked  bool // up, not taken for lost
		early   []ctlKind
	}{
		{"reset as it answers", []string{"reset"}, nil, false, []ctlKind{ctlLost}},
		{"closed, then its loss noticed", []string{"close"}, []control{{Kind: ctlBeat, From: 0}, {Kind: ctlLost, From: 0, Inc: 1}, {Kind: ctlLost, From: 0, Inc: 2}}, false, []ctlKind{ctlBeat, ctlLost, ctlLost}},
		{"closed, then it answers", []string{"close", "close", "answer"}, nil, true, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			j := job(1, serve(c.answers...), c.notices...)
			require.NoError(t, j.connect(time.Now().Add(5*time.Second)))
			l := j.links[0].Load()
			require.NotNil(t, l)
			require.Equal(t, !c.linked, l.down.Load(), "process 0's link is down")
			var kinds []ctlKind
			for _, m := range j.early {
				kinds = append(kinds, m.Kind)
			}
			require.Equal(t, c.early, kinds, "the run loop's messages, in order")
		})
	}
	for _, answer := range []string{"reset", "close"} {
		require.NoError(t, job(0, serve(answer)).connect(time.Now().Add(5*time.Second)), "at the first start: %s", answer)
	}
	// dialed again until the deadline, then the error
	j := job(1, serve("close", "close", "close", "close", "close", "close", "close", "close"))
	err = j.connect(time.Now().Add(150 * time.Millisecond))
	require.ErrorContains(t, err, "data plane: ")
}

// dataPort listens on 127.0.0.1 and answers each connection by what in
// says: "reset" (a process killed with the hello unread), "close" (closed
// once the hello is read), "answer" (the handshake, as process 0).
func dataPort(t *testing.T, secret Secret, in ...string) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { ln.Close() })
	go func() {
		for _, what := range in {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			switch what {
			case "reset":
				c.(*net.TCPConn).SetLinger(0)
				c.Close()
			case "close":
				io.ReadFull(c, make([]byte, 4+4+nonceSize))
				c.Close()
			case "answer":
				acceptHandshake(c, secret, 0, DefaultHandshakeTimeout, func(uint32) error { return nil })
			}
		}
	}()
	return ln.Addr().String()
}

// A process dialing a replacement that joined (process 0's, here) when
// the replacement is killed as it answers: taken for lost, by a notice
// to the run loop with its incarnation, as a link that goes down is;
// after any other failure dialed again. One whose loss was noticed
// meanwhile, or that another replacement took the place of, is not
// dialed again: that notice speaks. (A failure used to end the job.)
func TestAProcessTakesAReplacementGoneAsItAnswersForLost(t *testing.T) {
	secret, err := NewSecret()
	require.NoError(t, err)
	job := func(steward bool, data string) (*Job, Member) {
		cfg := Config{Procs: 2, PEs: 2, Rank: 1, Secret: secret, ConnectTimeout: 5 * time.Second}
		j := &Job{cfg: cfg, log: zap.NewNop(), links: make([]atomic.Pointer[link], 2), linkUp: make(chan int, 4), lost: map[int]bool{}, ctl: make(chan control, 4)}
		j.first, j.count = Block(cfg.PEs, cfg.Procs, cfg.Rank)
		who := Member{Rank: 0, Data: data, Inc: 1}
		j.members = []Member{who, {Rank: 1}}
		if steward {
			// the steward keeps it lost and admitted until its links are up
			j.lost[0], j.admitted = true, map[int]bool{0: true}
		}
		return j, who
	}
	for _, steward := range []bool{false, true} {
		for _, answer := range []string{"reset", "close answer"} {
			t.Run(fmt.Sprintf("steward %v, %s", steward, answer), func(t *testing.T) {
				j, who := job(steward, dataPort(t, secret, strings.Fields(answer)...))
				j.dialJoined(who)
				if answer == "reset" {
					require.Len(t, j.ctl, 1)
					m := <-j.ctl
					require.Equal(t, control{Kind: ctlLost, From: 0, Inc: 1, Err: m.Err}, m)
					require.Contains(t, m.Err, "refused or reset")
					return
				}
				require.Empty(t, j.ctl)
				require.False(t, j.links[0].Load().down.Load(), "linked")
			})
		}
	}
	for name, supersede := range map[string]func(j *Job){
		"lost meanwhile":             func(j *Job) { j.lost[0] = true },
		"lost meanwhile, at steward": func(j *Job) { j.lost[0], j.admitted = true, map[int]bool{} },
		"replaced meanwhile":         func(j *Job) { j.members[0].Inc = 2 },
	} {
		t.Run(name, func(t *testing.T) {
			j, who := job(false, dataPort(t, secret, "close"))
			supersede(j)
			j.dialJoined(who)
			require.Empty(t, j.ctl)
			require.Nil(t, j.links[0].Load())
		})
	}
}

// The steward asked to join by a replacement of a process it has not yet
// noticed lost (two processes killed within 10 ms on a busy machine)
// takes that process for lost and admits the replacement: the launcher
// starts one only once the process it replaces is gone. It used to
// refuse it ("rank 2 is not a lost process of this job"), which ended
// the job. A request of an incarnation not above the one it knows is
// still refused.
func TestTheStewardAdmitsAReplacementAskingBeforeTheLossIsNoticed(t *testing.T) {
	job := func() (*Job, *joinedRecorder) {
		rec := &joinedRecorder{}
		cfg := Config{Procs: 3, PEs: 3, Rank: 0}
		j := &Job{cfg: cfg, log: zap.NewNop(), sys: actor.NewActorSystem(), links: make([]atomic.Pointer[link], 3), lost: map[int]bool{}, recovery: rec,
			members: []Member{{Rank: 0}, {Rank: 1}, {Rank: 2, Inc: 1}}, lastBeat: make([]time.Time, 3)}
		for r := range 3 {
			j.pids = append(j.pids, actor.NewPID(fmt.Sprintf("127.0.0.1:%d", 9+r), actorName))
		}
		return j, rec
	}
	j, rec := job()
	j.rejoin(control{Kind: ctlJoin, From: 2, Member: &Member{Rank: 2, Inc: 2, Control: "127.0.0.1:7"}})
	require.Equal(t, []int{2}, rec.lost, "taken for lost first")
	require.True(t, j.admitted[2], "then admitted")
	require.Equal(t, 2, j.members[2].Inc)

	for _, inc := range []int{0, 1} {
		j, rec := job()
		j.rejoin(control{Kind: ctlJoin, From: 2, Member: &Member{Rank: 2, Inc: inc, Control: "127.0.0.1:7"}})
		require.Empty(t, rec.lost, "incarnation %d", inc)
		require.False(t, j.admitted[2], "incarnation %d", inc)
	}
}

// What charmrun pushes a process is parsed as bytes from the network:
// whatever a line is, an answer or an error, never a panic, and what is
// accepted is an address, an admitted replacement or a succession.
func FuzzRendezvousPush(f *testing.F) {
	m, err := encodeMember(Member{Rank: 2, Inc: 1, Control: "127.0.0.1:1", Data: "127.0.0.1:2"})
	require.NoError(f, err)
	for _, s := range []string{"A 127.0.0.1:80\n", "A x\n", "R " + m + "\n", "R !!\n", "R " + m[:len(m)/2] + "\n", "D 0 0 1\n", "D 0 2 -1\n", "D 1 0 1\n", "D -1 0 2\n", "D 0 -1 2\n", "D 0 1\n", "D 0 1 2 3\n", "Q\n", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, line string) {
		p, err := parsePush(line)
		if err != nil {
			return
		}
		switch {
		case p.addr != "":
			_, _, err := net.SplitHostPort(p.addr)
			require.NoError(t, err)
		case p.notice.Joined != nil:
			require.GreaterOrEqual(t, p.notice.Joined.Rank, 0)
			require.Positive(t, p.notice.Joined.Inc)
			require.NotEmpty(t, p.notice.Joined.Control)
		default:
			require.GreaterOrEqual(t, p.notice.LostInc, 0)
			require.GreaterOrEqual(t, p.notice.Lost, 0)
			require.GreaterOrEqual(t, p.notice.Next, -1)
			require.NotEqual(t, p.notice.Lost, p.notice.Next)
		}
	})
}

// succession is a rendezvous that can name a successor, recording what
// a process tells it.
type succession struct {
	FixedAddress
	succeeded []string
	suspected []int
	ended     [][2]int // EndHung: rank, incarnation
}

func (s *succession) Succeed(addr string) error { s.succeeded = append(s.succeeded, addr); return nil }
func (s *succession) Admitted(Member) error     { return nil }
func (s *succession) Listed() error             { return nil }
func (s *succession) Suspect(r int) error       { s.suspected = append(s.suspected, r); return nil }
func (s *succession) EndHung(r, inc int) error  { s.ended = append(s.ended, [2]int{r, inc}); return nil }
func (s *succession) Moved() <-chan string      { return nil }
func (s *succession) Notices() <-chan Notice    { return nil }

// A process that finds the steward lost does not pick its successor
// itself: it tells the rendezvous, and waits for it to name one (the
// processes would disagree when the steward was lost while it told them
// of a replacement, some taking the replacement for in and the lowest
// rank, the others not). Recovery hears of the loss once the successor
// is named, whichever comes first, the notice or the loss; a loss the
// rendezvous names a successor for later (it was taken for an ordinary
// loss) reaches recovery again, so it learns who steers. The successor
// takes over at the rendezvous, and sends the replacements it knows of
// their list, in case the lost steward had not.
func TestTheRendezvousNamesTheSuccessorEveryProcessTakes(t *testing.T) {
	job := func(rank int) (*Job, *joinedRecorder, *succession) {
		rec, rv := &joinedRecorder{}, &succession{FixedAddress: "127.0.0.1:9"}
		cfg := Config{Procs: 4, PEs: 4, Rank: rank, Rendezvous: rv}
		j := &Job{cfg: cfg, log: zap.NewNop(), sys: actor.NewActorSystem(), links: make([]atomic.Pointer[link], 4), lost: map[int]bool{}, recovery: rec,
			members: []Member{{Rank: 0}, {Rank: 1, Inc: 1}, {Rank: 2}, {Rank: 3}}, lastBeat: make([]time.Time, 4)}
		for r := range 4 {
			j.pids = append(j.pids, actor.NewPID(fmt.Sprintf("127.0.0.1:%d", 9+r), actorName))
		}
		return j, rec, rv
	}
	t.Run("the loss first", func(t *testing.T) {
		j, rec, rv := job(3)
		j.processLost(0, 0, "its connection closed")
		require.Empty(t, rec.lost, "recovery waits for the successor")
		require.Equal(t, []int{0}, rv.suspected)
		require.Equal(t, 0, j.Steward())
		require.Contains(t, j.Waiting(), "process 0, the steward, was lost, and the rendezvous has not said who takes over")
		j.stewardGone(0, 0, 1) // the replacement of 1 the lost steward admitted
		require.Equal(t, 1, j.Steward())
		require.Equal(t, []int{0}, rec.lost)
		require.Empty(t, rv.succeeded)
		j.processLost(0, 0, "its actor system is gone") // a second notice
		require.Equal(t, []int{0}, rec.lost)
	})
	t.Run("the notice first", func(t *testing.T) {
		j, rec, rv := job(3)
		j.stewardGone(0, 0, 2)
		require.Equal(t, 2, j.Steward())
		require.True(t, j.IsLost(0))
		require.Equal(t, []int{0}, rec.lost)
		require.Empty(t, rv.suspected)
		j.processLost(0, 0, "its connection closed")
		require.Equal(t, []int{0}, rec.lost)
	})
	t.Run("this process takes over", func(t *testing.T) {
		j, rec, rv := job(2)
		j.processLost(0, 0, "its connection closed")
		j.stewardGone(0, 0, 2)
		require.Equal(t, 2, j.Steward())
		require.Equal(t, []string{j.sys.Address()}, rv.succeeded)
		require.Equal(t, []int{0}, rec.lost)
	})
	t.Run("a loss taken for an ordinary one, then named the steward's", func(t *testing.T) {
		// the successor (1) is lost before this process heard it was
		// named: an ordinary loss first; then the rendezvous's notices
		j, rec, rv := job(3)
		j.processLost(0, 0, "its connection closed")
		j.processLost(1, 1, "its connection closed")
		require.Equal(t, []int{1}, rec.lost)
		j.stewardGone(0, 0, 1)
		j.stewardGone(1, 1, 2)
		require.Equal(t, 2, j.Steward())
		require.Equal(t, []int{1, 0, 1}, rec.lost, "the loss of 0 once named; that of 1 again, for who steers")
		require.Equal(t, []int{0}, rv.suspected)
	})
	t.Run("a replacement told of earlier stewards' losses", func(t *testing.T) {
		// process 0's replacement, which has its list from process 2,
		// hears of its predecessor's loss and of process 1's (the
		// successor before 2): neither is of a process it knows. (Taken
		// for the loss of process 1's replacement, it stalled the job.)
		j, rec, rv := job(0)
		j.cfg.Incarnation, j.members[0].Inc, j.steward = 1, 1, 2
		j.stewardGone(0, 0, 1)
		require.Equal(t, 2, j.Steward(), "its predecessor's successor is not its steward")
		j.stewardGone(1, 0, 2)
		require.Empty(t, rec.lost)
		require.False(t, j.IsLost(1))
		require.Equal(t, 2, j.Steward())
		require.Empty(t, rv.succeeded)
	})
	t.Run("the steward lost before the hand-back reached this process", func(t *testing.T) {
		// process 1 steered, handed the steering back to process 0's
		// replacement, which was lost at once: the rendezvous's notice
		// (of the incarnation this process knows) comes before the
		// hand-back; the hand-back then finds process 0 lost
		j, rec, _ := job(3)
		j.members[0].Inc, j.steward = 1, 1
		j.stewardGone(0, 1, 2)
		require.Equal(t, 2, j.Steward())
		require.Equal(t, []int{0}, rec.lost)
		back, err := j.StewardBack()
		require.NoError(t, err)
		require.False(t, back)
		require.Equal(t, 2, j.Steward())
	})
}

// endingEnv makes the test binary a process of TestAReplacementJoiningAsTheJobEndsIsDismissed
// (the value: a directory for its marker file).
const endingEnv = "CLUSTER_TEST_ENDING"

// endingProcess: process 0 publishes an address and exits with 0 (the
// job's end) once process 1's replacement has looked the steward up;
// process 1 is killed by SIGKILL once it looked it up; its replacement
// looks it up, says so, and waits for ever, as one waiting for its list
// from a steward that ended would.
func endingProcess(dir string) int {
	rank, inc, rv := jobProcess()
	marker := filepath.Join(dir, "replacement")
	switch {
	case rank == 0:
		if err := rv.Publish("127.0.0.1:1"); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		waitForFile(marker)
		return 0
	case inc == 0:
		if _, err := rv.Lookup(time.Now().Add(10 * time.Second)); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		syscall.Kill(os.Getpid(), syscall.SIGKILL)
	default:
		if _, err := rv.Lookup(time.Now().Add(10 * time.Second)); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		os.WriteFile(marker, nil, 0o600)
	}
	select {}
}

// A process lost as the job ends is replaced, and the replacement is
// still joining when the others exit with 0: charmrun ends it and
// returns, instead of waiting for it (it waited for a steward's address
// until its connect timeout, 65 s, then ended the job with exit 1).
func TestAReplacementJoiningAsTheJobEndsIsDismissed(t *testing.T) {
	errs := launchTwo(t, endingEnv, "charmrun waited for a replacement of a job that ended")
	require.Contains(t, errs, "charmrun: process 1 was killed by SIGKILL; starting its replacement")
}

// launchTwo runs a job of two processes of the test binary, each told
// its part by the environment variable env (a directory for markers),
// and returns what charmrun's launcher wrote to standard error; the job
// must end with 0 within 20 s, else the test fails with stuck.
func launchTwo(t *testing.T, env, stuck string) string {
	t.Helper()
	var out, errb bytes.Buffer
	l := Launch{Path: os.Args[0], Name: "cluster test", Procs: 2, ConnectTimeout: 30 * time.Second, Replace: true,
		Env: []string{env + "=" + t.TempDir()}, Stdout: &out, Stderr: &errb}
	done := make(chan int, 1)
	go func() { done <- l.Run() }()
	select {
	case code := <-done:
		require.Equal(t, 0, code, errb.String())
	case <-time.After(20 * time.Second):
		t.Fatalf("%s: %s", stuck, errb.String())
	}
	return errb.String()
}

// jobProcess is a test job's process as the launcher started it: its
// rank, incarnation and rendezvous (without a secret it ends, exit 2).
func jobProcess() (rank, inc int, rv *Charmrun) {
	rank, _ = strconv.Atoi(os.Getenv(RankEnv))
	inc, _ = strconv.Atoi(os.Getenv(ReplacementEnv))
	secret, err := ParseSecret(os.Getenv(SecretEnv))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	return rank, inc, &Charmrun{Addr: os.Getenv(CharmrunEnv), Secret: secret, Rank: rank, Inc: inc}
}

// waitForFile waits until f exists (a file is all a test job's processes
// share).
func waitForFile(f string) {
	for {
		if _, err := os.Stat(f); err == nil {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// unlistedEnv makes the test binary a process of
// TestAReplacementWithoutItsListLeftAloneEndsTheJob (the value: a
// directory for its marker files).
const unlistedEnv = "CLUSTER_TEST_UNLISTED"

// unlistedProcess: process 0 publishes an address and is killed by
// SIGKILL once process 1 looked it up; process 1 takes over when
// charmrun names it, admits process 0's replacement once that looked the
// steward up, and is killed by SIGKILL as soon as the replacement heard
// of its admission from charmrun, before any list went; the replacement
// waits for ever, as one waiting for its list would.
func unlistedProcess(dir string) int {
	rank, inc, rv := jobProcess()
	looked, replacement, heard := filepath.Join(dir, "looked"), filepath.Join(dir, "replacement"), filepath.Join(dir, "heard")
	soon := time.Now().Add(10 * time.Second)
	switch {
	case rank == 0 && inc == 0:
		if err := rv.Publish("127.0.0.1:1"); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		waitForFile(looked)
		syscall.Kill(os.Getpid(), syscall.SIGKILL)
	case rank == 1:
		if _, err := rv.Lookup(soon); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		os.WriteFile(looked, nil, 0o600)
		if n := <-rv.Notices(); n.Next != 1 {
			fmt.Fprintf(os.Stderr, "charmrun named process %d to succeed process 0\n", n.Next)
			return 1
		}
		if err := rv.Succeed("127.0.0.1:2"); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		waitForFile(replacement)
		if err := rv.Admitted(Member{Rank: 0, Inc: inc + 1, Control: "127.0.0.1:3", Data: "127.0.0.1:4"}); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		waitForFile(heard) // (charmrun read the admission)
		syscall.Kill(os.Getpid(), syscall.SIGKILL)
	default:
		if _, err := rv.Lookup(soon); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		os.WriteFile(replacement, nil, 0o600)
		for n := range rv.Notices() {
			if n.Joined != nil {
				os.WriteFile(heard, nil, 0o600)
			}
		}
	}
	select {}
}

// A job of two: process 0 lost, its successor lost as it admitted process
// 0's replacement, before the replacement had its list. Nobody left knows
// the job: the replacement cannot steer, and charmrun, which took it for
// in the job, started a replacement of process 1 that waited for a
// steward until its connect timeout (1m5s), and the job ended with exit
// 1 (not "lost", so not run again from --ckpt-dir). Now a replacement is
// in the job only once it has its list: process 1 is not replaced, and
// the job ends at once, lost, as when both are lost at once.
func TestAReplacementWithoutItsListLeftAloneEndsTheJob(t *testing.T) {
	var out, errb bytes.Buffer
	l := Launch{Path: os.Args[0], Name: "cluster test", Procs: 2, ConnectTimeout: 30 * time.Second, Replace: true,
		Env: []string{unlistedEnv + "=" + t.TempDir()}, Stdout: &out, Stderr: &errb}
	type ended struct {
		code int
		lost string
	}
	done := make(chan ended, 1)
	go func() {
		code, lost := l.RunJob()
		done <- ended{code, lost}
	}()
	select {
	case e := <-done:
		require.NotEqual(t, 0, e.code, errb.String())
		require.Equal(t, "process 1 was killed by SIGKILL", e.lost, errb.String())
	case <-time.After(20 * time.Second):
		t.Fatalf("charmrun replaced a process with none left in the job to admit it: %s", errb.String())
	}
	require.Contains(t, errb.String(), "charmrun: process 0 was killed by SIGKILL; starting its replacement")
	require.NotContains(t, errb.String(), "process 1 was killed by SIGKILL; starting its replacement")
}

// hungEnv makes the test binary a process of TestCharmrunEndsAHungProcessNoneOfTheOthersCanKill
// (the value: a directory for its marker file).
const hungEnv = "CLUSTER_TEST_HUNG"

// hungProcess: process 1 looks the steward up and hangs; process 0, once
// it has, asks charmrun to end it (as a process that found it hung on a
// host none of the others shares does), and exits with 0 (the job's end)
// once process 1's replacement has looked the steward up too.
func hungProcess(dir string) int {
	rank, inc, rv := jobProcess()
	hung, replaced := filepath.Join(dir, "hung"), filepath.Join(dir, "replaced")
	if rank == 0 {
		if err := rv.Publish("127.0.0.1:1"); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		waitForFile(hung)
		if err := rv.EndHung(1, 0); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		waitForFile(replaced)
		return 0
	}
	if _, err := rv.Lookup(time.Now().Add(10 * time.Second)); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if inc == 0 {
		os.WriteFile(hung, nil, 0o600)
	} else {
		os.WriteFile(replaced, nil, 0o600)
	}
	select {}
}

// A process hung on a host none of the others shares (one process a
// host, as on a cluster) is ended by charmrun, which started it there,
// when another asks (EndHung), and replaced; it used to end the job. A
// request of another incarnation than the one connected is ignored.
func TestCharmrunEndsAHungProcessNoneOfTheOthersCanKill(t *testing.T) {
	errs := launchTwo(t, hungEnv, "the hung process was not ended")
	require.Contains(t, errs, "charmrun: process 1 hangs (no heartbeat), on a host no other process of the job shares; charmrun ends it, to be replaced\n")
	require.Contains(t, errs, "charmrun: process 1 was killed by SIGKILL; starting its replacement")

	secret, err := NewSecret()
	require.NoError(t, err)
	srv, err := ServeRendezvous("127.0.0.1", secret, 2, zap.NewNop(), 0)
	require.NoError(t, err)
	defer srv.Close()
	p0, p1 := &Charmrun{Addr: srv.Addr(), Secret: secret, Rank: 0}, &Charmrun{Addr: srv.Addr(), Secret: secret, Rank: 1, Inc: 2}
	require.NoError(t, p0.Publish("127.0.0.1:10"))
	_, err = p1.Lookup(time.Now().Add(5 * time.Second))
	require.NoError(t, err)
	require.NoError(t, p0.EndHung(1, 1)) // of an incarnation gone
	require.NoError(t, p0.EndHung(1, 2))
	select {
	case e := <-srv.Suspected():
		require.Equal(t, Ending{Rank: 1, Inc: 2, Hung: true}, e)
	case <-time.After(5 * time.Second):
		t.Fatal("charmrun's launcher was not asked to end the hung process")
	}
	<-p1.Gone() // its connection closed
	select {
	case e := <-srv.Suspected():
		t.Fatalf("asked twice: %+v", e)
	default:
	}
}

// A process that finds another hung, when none of the job's processes
// shares its host, asks charmrun to end it (once per incarnation); under
// a rendezvous that cannot (srun, mpirun) it cannot, and the job ends.
func TestAHungProcessOnAHostOfItsOwnIsEndedByCharmrun(t *testing.T) {
	job := func(rv Rendezvous) *Job {
		cfg := Config{Procs: 3, PEs: 3, Rank: 0, Rendezvous: rv}
		return &Job{cfg: cfg, log: zap.NewNop(), lost: map[int]bool{}, recovery: &joinedRecorder{},
			members: []Member{{Rank: 0, Host: "a", PID: 1}, {Rank: 1, Host: "b", PID: 2, Inc: 3}, {Rank: 2, Host: "c", PID: 3}}}
	}
	rv := &succession{FixedAddress: "127.0.0.1:9"}
	j := job(rv)
	require.True(t, j.killHung(1, "no heartbeat"))
	require.True(t, j.killHung(1, "no heartbeat"), "asked already")
	require.Equal(t, [][2]int{{1, 3}}, rv.ended)
	require.False(t, job(FixedAddress("127.0.0.1:9")).killHung(1, "no heartbeat"))
}

// claim's rules for a data connection from process r as its handshake
// ends: taken as a new link when there is none (or the one there is
// down: r's replacement dials); when this process's own dial to r is
// under way, taken as that link's connection only from a lower rank (of
// two processes dialing each other the lower rank's connection wins, and
// the other side refuses its own); refused when a link is up.
func TestClaimKeepsTheLowerRanksConnection(t *testing.T) {
	job := func() *Job {
		cfg := Config{Procs: 4, PEs: 4, Rank: 2}
		j := &Job{cfg: cfg, log: zap.NewNop(), links: make([]atomic.Pointer[link], 4), lost: map[int]bool{},
			members: []Member{{Rank: 0}, {Rank: 1}, {Rank: 2}, {Rank: 3}}}
		j.first, j.count = Block(cfg.PEs, cfg.Procs, cfg.Rank)
		return j
	}
	conn := func() net.Conn {
		a, b := net.Pipe()
		t.Cleanup(func() { a.Close(); b.Close() })
		return a
	}
	j := job()
	l, err := j.claim(3, 0, conn())
	require.NoError(t, err, "no link yet: taken")
	require.Same(t, l, j.links[3].Load())
	_, err = j.claim(3, 0, conn())
	require.ErrorContains(t, err, "connected already")

	pending := newPendingLink(1, &j.gen, j.first, j.count)
	j.links[1].Store(pending)
	c := conn()
	l, err = j.claim(1, 0, c)
	require.NoError(t, err, "a lower rank's connection, as this process dials it: taken as that link's")
	require.Same(t, pending, l)
	require.False(t, pending.isPending())
	require.Same(t, c, pending.conn)
	require.False(t, j.adopt(1, pending, conn()), "this process's own dial, done after: not taken")

	higher := newPendingLink(3, &j.gen, j.first, j.count)
	j.links[3].Store(higher)
	_, err = j.claim(3, 0, conn())
	require.ErrorContains(t, err, "dials process 3 itself", "a higher rank's, as this process dials it: refused")
	require.True(t, higher.isPending())

	down := newPendingLink(0, &j.gen, j.first, j.count)
	down.down.Store(true)
	j.links[0].Store(down)
	l, err = j.claim(0, 1, conn())
	require.NoError(t, err, "a link that is down: the replacement's connection replaces it")
	require.NotSame(t, down, l)
	require.False(t, l.down.Load())
	require.Equal(t, 1, l.inc, "the incarnation its handshake said")

	j.members[3].Inc = 2
	j.links[3].Load().down.Store(true)
	_, err = j.claim(3, 1, conn())
	require.ErrorContains(t, err, "process 3 dials as incarnation 1, replaced by 2", "a lost incarnation's late dial: refused")
}

// A data id carries the dialer's rank and incarnation, and is never
// charmrun's.
func TestDataIDsCarryTheIncarnation(t *testing.T) {
	for _, c := range []struct{ rank, inc int }{{0, 0}, {1, 0}, {16383, 0}, {3, 1}, {65535, 0x7FFF}, {7, 12}} {
		id := dataID(c.rank, c.inc)
		require.NotEqual(t, uint32(CharmrunID), id)
		r, inc := splitDataID(id)
		require.Equal(t, c, struct{ rank, inc int }{r, inc})
	}
}

// A process that hears of process 2's loss after 2's replacement already
// dialed it (the old link broke, the replacement's connection came, and
// the notice waited in line behind them) keeps the replacement's link,
// and reported it to the steward as it came. It used to shut whatever
// link it had to the lost process, the replacement's included: nothing
// dialed again, the steward waited for that report for ever, and the
// replacement's PEs never began (a stall seen under load in
// TestProcessLostWhileAnotherRecovers, pessimist, 1 run in 10).
func TestALossHeardAfterTheReplacementDialedKeepsItsLink(t *testing.T) {
	rec := &joinedRecorder{}
	cfg := Config{Procs: 3, PEs: 3, Rank: 0} // (the steward: its report goes to its own loop)
	j := &Job{cfg: cfg, log: zap.NewNop(), sys: actor.NewActorSystem(), links: make([]atomic.Pointer[link], 3), lost: map[int]bool{}, recovery: rec,
		members: []Member{{Rank: 0}, {Rank: 1}, {Rank: 2}}, lastBeat: make([]time.Time, 3), ctl: make(chan control, 16)}
	for r := range 3 {
		j.pids = append(j.pids, actor.NewPID(fmt.Sprintf("127.0.0.1:%d", 9+r), actorName))
	}
	j.first, j.count = Block(cfg.PEs, cfg.Procs, cfg.Rank)
	node, err := pe.NewNode(pe.Config{NumPEs: 3, FirstPE: j.first, LocalPEs: j.count, Remote: j}, func(*pe.PE) pe.Handler { return idlePE{} })
	require.NoError(t, err)
	j.node = node

	old := newLink(2, nil, &j.gen, j.first, j.count)
	old.inc = 0
	old.down.Store(true) // its connection broke: the process died
	j.links[2].Store(old)
	a, b := net.Pipe()
	t.Cleanup(func() { a.Close(); b.Close() })
	l, err := j.claim(2, 1, a) // the replacement, incarnation 1, dials
	require.NoError(t, err)
	j.linkStarted(2, l)
	require.Len(t, j.ctl, 1)
	require.Equal(t, control{Kind: ctlLinked, From: 0, Code: 2}, <-j.ctl, "reported to the steward as it came")

	j.processLost(2, 0, "its connection closed")
	require.Same(t, l, j.links[2].Load())
	require.False(t, l.down.Load(), "the replacement's link stays up")
	require.Equal(t, []int{2}, rec.lost)
}

// A second process for a rank whose process stays connected is refused
// once the handshake timeout passed; a replacement that connects before
// the lost process's connection was read to its end waits for it
// (TestTheRendezvousNamesOneSuccessor, under load, was refused).
func TestTheRendezvousRefusesASecondProcessForOneRank(t *testing.T) {
	secret, err := NewSecret()
	require.NoError(t, err)
	srv, err := ServeRendezvous("127.0.0.1", secret, 2, zap.NewNop(), 300*time.Millisecond)
	require.NoError(t, err)
	t.Cleanup(srv.Close)
	at := func(rank int) *Charmrun { return &Charmrun{Addr: srv.Addr(), Secret: secret, Rank: rank} }
	soon := func() time.Time { return time.Now().Add(5 * time.Second) }
	require.NoError(t, at(0).Publish("127.0.0.1:10"))
	first := at(1)
	_, err = first.Lookup(soon())
	require.NoError(t, err)
	_, err = at(1).Lookup(soon())
	require.Error(t, err, "a second process 1, the first still connected")
	first.Close()
	<-first.Gone()
	addr, err := at(1).Lookup(soon())
	require.NoError(t, err, "process 1's replacement")
	require.Equal(t, "127.0.0.1:10", addr)
}
