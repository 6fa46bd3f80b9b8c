package cluster

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/charmgo/charmgo/pe"
)

func TestTreeNeighbours(t *testing.T) {
	none := func(int) bool { return false }
	lost := func(rs ...int) func(int) bool {
		return func(r int) bool {
			for _, q := range rs {
				if q == r {
					return true
				}
			}
			return false
		}
	}
	for _, tc := range []struct {
		name        string
		procs, rank int
		lost        func(int) bool
		parent      int
		children    []int
	}{
		{"alone", 1, 0, none, -1, nil},
		{"root of two", 2, 0, none, -1, []int{1}},
		{"leaf of two", 2, 1, none, 0, nil},
		{"root's children are the next fanout", 20, 0, none, -1, []int{1, 2, 3, 4, 5, 6, 7, 8}},
		{"second level", 20, 1, none, 0, []int{9, 10, 11, 12, 13, 14, 15, 16}},
		{"last of the second level", 20, 2, none, 0, []int{17, 18, 19}},
		{"a leaf", 20, 19, none, 2, nil},
		{"a lost parent is skipped", 20, 9, lost(1), 0, nil},
		{"the root lost: the lowest live rank is the root", 20, 1, lost(0), -1, []int{2, 3, 4, 5, 6, 7, 8, 9}},
		{"its children close up", 20, 2, lost(0), 1, []int{10, 11, 12, 13, 14, 15, 16, 17}},
		{"a lost child's place goes to the next live rank", 20, 0, lost(3), -1, []int{1, 2, 4, 5, 6, 7, 8, 9}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			parent, children := treeNeighbours(tc.procs, tc.rank, tc.lost)
			require.Equal(t, tc.parent, parent)
			require.Equal(t, tc.children, children)
		})
	}
}

// Every live process is in one tree: each but the root has a parent
// that lists it as a child, and a process has at most treeFanout + 1
// neighbours, whatever is lost.
func TestTreeSpansTheLiveProcesses(t *testing.T) {
	for _, procs := range []int{1, 2, 9, 10, 73, 256, 1000} {
		for _, gone := range [][]int{nil, {0}, {1, 2, 3}, {procs - 1}, {0, procs / 2}} {
			isLost := map[int]bool{}
			for _, r := range gone {
				if r < procs {
					isLost[r] = true
				}
			}
			lost := func(r int) bool { return isLost[r] }
			roots := 0
			for r := range procs {
				if isLost[r] {
					continue
				}
				parent, children := treeNeighbours(procs, r, lost)
				require.LessOrEqual(t, len(children), treeFanout)
				if parent < 0 {
					roots++
					continue
				}
				require.False(t, isLost[parent])
				_, siblings := treeNeighbours(procs, parent, lost)
				require.Contains(t, siblings, r, "procs %d lost %v: %d's parent %d", procs, gone, r, parent)
			}
			if len(isLost) < procs {
				require.Equal(t, 1, roots, "procs %d lost %v", procs, gone)
			}
		}
	}
}

// subtreeSize counts a process's subtree as the tree's own edges do: the
// root's is the job, and a process's is one more than its children's.
func TestSubtreeSizeCountsTheTree(t *testing.T) {
	none := func(int) bool { return false }
	for _, procs := range []int{1, 2, 8, 9, 10, 73, 256, 1000} {
		require.Equal(t, procs, subtreeSize(procs, 0), "procs %d", procs)
		for r := range procs {
			_, children := treeNeighbours(procs, r, none)
			want := 1
			for _, c := range children {
				want += subtreeSize(procs, c)
			}
			require.Equal(t, want, subtreeSize(procs, r), "procs %d, rank %d", procs, r)
		}
	}
}

// launchTwelve runs a job of 12 processes of this test binary, each the
// process env (set to 1) makes it: what they printed, what they said on
// standard error, and the job's exit code.
func launchTwelve(env string) (string, string, int) {
	var out, errb bytes.Buffer
	l := Launch{Path: os.Args[0], Name: "cluster test", Procs: 12, ConnectTimeout: 30 * time.Second,
		Env: []string{env + "=1", "GORACE=atexit_sleep_ms=0"}, Stdout: &out, Stderr: &errb}
	code := l.Run()
	return out.String(), errb.String(), code
}

// progressEnv makes the test binary a process of TestTheJobsProgressCrossesTheTree.
const progressEnv = "CLUSTER_TEST_PROGRESS"

// The job's progress reaches every process along the tree: in a job of 12
// processes of one PE, only process 0's PE runs entry methods (for a
// second and a half, a millisecond each), and process 11, a leaf under
// process 1, sees the job's progress move again and again while its own
// PE idles (its watchdog would otherwise take the job for stalled).
func TestTheJobsProgressCrossesTheTree(t *testing.T) {
	out, errs, code := launchTwelve(progressEnv)
	require.Equal(t, 0, code, errs)
	var moves int
	_, err := fmt.Sscanf(out[strings.Index(out, "moves "):], "moves %d", &moves)
	require.NoError(t, err, out)
	t.Logf("process 11 saw the job's progress move %d times", moves)
	require.GreaterOrEqual(t, moves, 3, "process 11 saw the job's progress move %d times", moves)
	checkModelAgainst(t, out, 12, time.Second)
}

// checkModelAgainst holds the membership model to what the processes of
// a real job (procs of them, no loss, this heartbeat timeout, whose PEs
// send to no other process) said they did ("stats rank sent received
// links nanoseconds" lines in out): each process has data links to its
// neighbours in the model's tree, and sent and got the model's
// heartbeats for as long as it ran, give or take a period at each end.
func checkModelAgainst(t *testing.T, out string, procs int, timeout time.Duration) {
	t.Helper()
	period := beatPeriod(timeout)
	seen := 0
	for _, line := range strings.Split(out, "\n") {
		var rank, sent, got, links int
		var ran time.Duration
		if _, err := fmt.Sscanf(line, "stats %d %d %d %d %d", &rank, &sent, &got, &links, &ran); err != nil {
			continue
		}
		seen++
		rep, err := SimulateMembership(ModelConfig{Procs: procs, HeartbeatTimeout: timeout, Latency: 100 * time.Microsecond, Duration: ran, Lost: -1, Seed: uint64(rank)})
		require.NoError(t, err)
		m := rep.Processes[rank]
		require.Equal(t, m.DataLinks, links, "process %d: data links", rank)
		t.Logf("process %d, %v: heartbeats sent %d (model %d), received %d (model %d), data links %d", rank, ran.Round(time.Millisecond), sent, m.BeatsSent, got, m.BeatsReceived, links)
		ticks := float64(ran) / float64(period)
		for what, c := range map[string][2]int{"sent": {sent, m.BeatsSent}, "received": {got, m.BeatsReceived}} {
			require.InDelta(t, float64(c[1]), float64(c[0]), 2*float64(m.Neighbours)+0.15*ticks*float64(m.Neighbours),
				"process %d: heartbeats %s (the model: %d in %v)", rank, what, c[1], ran)
		}
	}
	require.Equal(t, procs, seen, out)
}

// busyPE: process 0's PE sends itself a message a millisecond until its
// time is up, then ends the job; the others' PEs get nothing.
type busyPE struct{ until time.Time }

func (b busyPE) Handle(p *pe.PE, env *pe.Envelope) {
	p.Ran()
	if time.Now().After(b.until) {
		p.Node().Stop(0)
		return
	}
	time.Sleep(time.Millisecond) // an entry method's work
	p.Send(p.ID(), &pe.Envelope{Type: tokenType, Kind: pe.KindP2P, Payload: uint64(0)})
}

func progressProcess() int {
	rank, _, rv := jobProcess()
	procs, _ := strconv.Atoi(os.Getenv(ProcsEnv))
	// heartbeats every 100 ms
	j, err := Join(Config{Rank: rank, Procs: procs, PEs: procs, Secret: rv.Secret, ConnectTimeout: 20 * time.Second,
		HeartbeatTimeout: time.Second, Rendezvous: rv, Types: pe.TypesDigest()})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer j.Close()
	first, count := j.PEs()
	until := time.Now().Add(1500 * time.Millisecond)
	node, err := pe.NewNode(pe.Config{NumPEs: procs, FirstPE: first, LocalPEs: count, Remote: j},
		func(*pe.PE) pe.Handler { return busyPE{until: until} })
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	began := time.Now()
	j.Run(node)
	if rank == 0 {
		node.Inject(0, pe.Envelope{Type: tokenType, Kind: pe.KindP2P, Payload: uint64(0)})
	}
	node.Start()
	moves := make(chan int, 1) // process 11's count, sampled as the run goes
	ran := make(chan string, 1)
	go func() {
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		n, last := 0, node.Progress()
		var st JobStats // as the run goes: at its end, links close
		var at time.Duration
		for {
			select {
			case <-node.Done():
				ran <- fmt.Sprintf("stats %d %d %d %d %d", rank, st.HeartbeatsSent, st.HeartbeatsRecvd, st.DataLinks, at)
				moves <- n
				return
			case <-tick.C:
				st, at = j.Stats(), time.Since(began)
				if p := node.Progress(); p != last {
					n, last = n+1, p
				}
			}
		}
	}()
	code, ok := endProcess(rank, j, node)
	if !ok {
		return code
	}
	if rank == procs-1 {
		fmt.Println("moves", <-moves)
	}
	fmt.Println(<-ran)
	return code
}

// lostNoticeEnv makes the test binary a process of TestEveryProcessHearsOfALoss.
const lostNoticeEnv = "CLUSTER_TEST_LOSTNOTICE"

// Every process hears of a loss, whether or not it has a data link to the
// lost process or watches it: in a job of 12 processes whose PEs send
// nothing (so no data link opens), process 11, a leaf under process 1,
// ends itself by SIGKILL, and the recovery of every other process is told
// (the first notice each has goes on along the tree); process 0, told,
// ends the run.
func TestEveryProcessHearsOfALoss(t *testing.T) {
	out, errs, _ := launchTwelve(lostNoticeEnv) // (not exit 0: a process was killed by a signal)
	var killed int64
	_, err := fmt.Sscanf(out[strings.Index(out, "killed at "):], "killed at %d", &killed)
	require.NoError(t, err, out)
	first, last := time.Duration(1<<62), time.Duration(0)
	for r := range 11 {
		at := strings.Index(out, fmt.Sprintf("process %d heard that process 11 was lost (at ", r))
		require.GreaterOrEqual(t, at, 0, "process %d did not hear: %s", r, errs)
		var ns int64
		_, err := fmt.Sscanf(out[at:], fmt.Sprintf("process %d heard that process 11 was lost (at %%d)", r), &ns)
		require.NoError(t, err)
		d := time.Duration(ns - killed)
		first, last = min(first, d), max(last, d)
	}
	// A death is found as links break (the membership model has it at a
	// message's latency, all knowing within a notice a level of the
	// tree); here, on a host whose cores 12 processes share, within a
	// fraction of the heartbeat timeout.
	t.Logf("process 11 killed: the first process knew %v later, the last %v", first, last)
	require.Less(t, last, 10*time.Second)
}

// noticeRecovery says which losses its process heard of; process 0 ends
// the run once it heard of one.
type noticeRecovery struct {
	rank int
	node *pe.Node
}

func (r noticeRecovery) ProcessLost(q int) bool {
	fmt.Printf("process %d heard that process %d was lost (at %d)\n", r.rank, q, time.Now().UnixNano())
	if r.rank == 0 {
		r.node.Stop(0)
	}
	return true
}
func (noticeRecovery) Rejoined(int)       {}
func (noticeRecovery) Action([]byte)      {}
func (noticeRecovery) Report(int, []byte) {}
func (noticeRecovery) Replaces() bool     { return false }

type idlePE struct{}

func (idlePE) Handle(*pe.PE, *pe.Envelope) {}

func lostNoticeProcess() int {
	rank, _, rv := jobProcess()
	procs, _ := strconv.Atoi(os.Getenv(ProcsEnv))
	j, err := Join(Config{Rank: rank, Procs: procs, PEs: procs, Secret: rv.Secret, ConnectTimeout: 20 * time.Second,
		Rendezvous: rv, Types: pe.TypesDigest()})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer j.Close()
	first, count := j.PEs()
	node, err := pe.NewNode(pe.Config{NumPEs: procs, FirstPE: first, LocalPEs: count, Remote: j},
		func(*pe.PE) pe.Handler { return idlePE{} })
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	j.SetRecovery(noticeRecovery{rank: rank, node: node})
	j.Run(node)
	node.Start()
	if rank == procs-1 {
		fmt.Printf("killed at %d\n", time.Now().UnixNano())
		syscall.Kill(os.Getpid(), syscall.SIGKILL)
	}
	code, _ := endProcess(rank, j, node)
	return code
}

// A backoff's waits double up to their bound, each drawn from the upper
// half of its step, and none goes past the deadline.
func TestBackoffDoublesWithJitter(t *testing.T) {
	b := newBackoff(200 * time.Millisecond)
	far := time.Now().Add(time.Hour)
	for _, step := range []time.Duration{10, 20, 40, 80, 160, 200, 200} {
		step *= time.Millisecond
		w := b.wait(far)
		require.GreaterOrEqual(t, w, step/2)
		require.LessOrEqual(t, w, step)
	}
	require.Zero(t, b.wait(time.Now().Add(-time.Second)), "past the deadline: no wait")
	require.LessOrEqual(t, b.wait(time.Now().Add(time.Millisecond)), time.Millisecond)
}
