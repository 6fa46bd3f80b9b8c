package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/charmgo/charmgo/internal/testbuild"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/charmgo/charmgo/chare"
	"github.com/charmgo/charmgo/pe/cluster"
)

// The tests' programs, built once for the whole test binary (each build
// links a binary of several MB).
var programs *testbuild.Programs

func TestMain(m *testing.M) { os.Exit(testbuild.Run(m, &programs)) }

func buildLeanMD(t *testing.T) string { return programs.Build(t, "../../apps/leanmd", "leanmd") }

// buildCharmrun builds charmrun itself, for tests that kill it.
func buildCharmrun(t *testing.T) string { return programs.Build(t, ".", "charmrun") }

func TestCharmrunRunsLeanMD(t *testing.T) {
	bin := buildLeanMD(t)
	var out, errb bytes.Buffer
	code := run([]string{"+p2", "--watchdog", "30s", bin, "2", "2", "2", "3", "--progress", "1"}, &out, &errb)
	require.Equal(t, 0, code, errb.String())
	s := out.String()
	for _, want := range []string{"LENNARD JONES MOLECULAR DYNAMICS START UP ...", "Cell Array Dimension X:2 Y:2 Z:2 of size 15 15 30",
		"Final Step Count:3", "Cells: 2 X 2 X 2 .... created", "Computes: 304 .... created", "Starting simulation ....",
		"Step 1 Benchmark Time", "Step 3 Benchmark Time", "Energy conservation test passed", "Total application time",
		"atoms 1322, cells 8, computes 304, steps 3, PEs 2"} {
		require.Contains(t, s, want)
	}
}

// Bad input: one clear line naming the argument and the range, exit 2, no
// stack trace — from charmrun and from the program itself.
func TestBadInput(t *testing.T) {
	bin := buildLeanMD(t)
	cases := []struct {
		args []string
		want string
	}{
		{[]string{bin, "3", "x", "3"}, `leanmd: argument Y: "x" is not a whole number (want 1 to 64)`},
		{[]string{bin, "-3", "3", "3"}, "leanmd: argument X: -3 is out of range (want 1 to 64)"},
		{[]string{bin, "3", "3", "3", "0"}, "leanmd: argument steps: 0 is out of range"},
		{[]string{"+p20000", bin}, "leanmd: flag +p: 20000 is out of range (want 1 to 16384)"},
		{[]string{bin, "--frobnicate"}, "leanmd: unknown flag --frobnicate: neither the program's nor the runtime's (see --help)"},
		{[]string{bin, "-progres", "5"}, "leanmd: unknown flag -progres: neither the program's nor the runtime's (did you mean --progress? see --help)"},
		{[]string{"+pmany", bin}, `leanmd: flag +p: "many" is not a whole number`},
		{[]string{bin, "--progress", "0"}, "leanmd: flag --progress:"},
		{[]string{bin, "--kernel", "avx9"}, `leanmd: flag --kernel: "avx9" is not a kernel (auto, avx512, avx2, scalar)`},
		{[]string{"++n", "2", "++ppn", "2", "+p", "3", bin}, "charmrun: flags +p 3, ++n 2, ++ppn 2: 2 processes of 2 PEs are 4 PEs, not 3"},
		{[]string{"++n", "0", bin}, "charmrun: ++n 0: want a whole number from 1 to 16384"},
		{[]string{"++n", "2", "++nodelist", "/no/such/file", bin}, "charmrun: ++nodelist /no/such/file: open /no/such/file: no such file"},
		{[]string{"--restart", "/no/such/dir", bin}, "leanmd: flag --restart: /no/such/dir does not exist"},
		{[]string{"--ft", "camel", "--kill", "1@0", bin, "2", "2", "2", "3"}, "leanmd: flag --kill: PE 1 at step 0 can never happen: the program runs steps 1 to 3"},
		{[]string{"--frobnicate", bin}, "charmrun: unknown option --frobnicate before the program"},
		{[]string{"++bogus", bin}, "charmrun: unknown charmrun option ++bogus"},
		{[]string{"./no-such-program"}, "charmrun: program ./no-such-program:"},
		{nil, "charmrun: no program to run"},
		// refused once, before any process of a job starts (each process
		// used to print it, then charmrun or a peer a line of its own)
		{[]string{"++n", "2", "--ft", "team", "--teams", "3", "++ppn", "2", bin, "3", "3", "3", "10"}, "leanmd: flag --teams 3: teams {0-2} {3} on 4 PEs: PE 1's checkpoint copy would be held in its own team"},
		{[]string{"++n", "2", "++ppn", "1", "--teams", "auto", "--ft", "team", bin, "3", "3", "3", "10"}, "leanmd: flag --teams auto: chosen teams are for one process"},
		{[]string{"++n", "2", "++ppn", "1", "--kill", "5@3", bin, "3", "3", "3", "10"}, "leanmd: flag --kill: PE 5, but the run has 2 PEs (0..1)"},
		{[]string{"++n", "2", "++ppn", "1", bin, "3", "x", "3"}, `leanmd: argument Y: "x" is not a whole number (want 1 to 64)`},
		// refused before the program's banner
		{[]string{"+p4", bin, "--kill", "1@50", "3", "3", "3", "10"}, "leanmd: flag --kill: PE 1 at step 50 can never happen: the program runs steps 1 to 10"},
	}
	for _, c := range cases {
		var out, errb bytes.Buffer
		code := run(c.args, &out, &errb)
		require.Equal(t, 2, code, "%v: %s", c.args, errb.String())
		msg := strings.TrimSpace(errb.String())
		require.True(t, strings.HasPrefix(msg, c.want), "%v: got %q", c.args, msg)
		require.NotContains(t, msg, "\n", "one line")
		require.NotContains(t, msg, "goroutine")
		require.Empty(t, out.String(), "%v: nothing printed before the refusal", c.args)
	}
}

func TestHelp(t *testing.T) {
	var out, errb bytes.Buffer
	require.Equal(t, 0, run([]string{"--help"}, &out, &errb))
	require.Contains(t, out.String(), "usage: charmrun")
	bin := buildLeanMD(t)
	out.Reset()
	require.Equal(t, 0, run([]string{bin, "--help"}, &out, &errb))
	for _, want := range []string{"usage: leanmd", "--original-physics", "--progress N", "+p N, --pes N", "--wire-check"} {
		require.Contains(t, out.String(), want)
	}
}

// Every runtime flag can go before the program (charmrun passes it on),
// and a package directory is built and run: the README's example works
// in a fresh clone.
func TestRuntimeFlagsBeforeTheProgramAndAPackage(t *testing.T) {
	dir := t.TempDir()
	var out, errb bytes.Buffer
	code := run([]string{"+p", "2", "--ft", "camel", "--kill", "1@2", "--ckpt-dir", dir, "--watchdog=30s", "--wire-check",
		"../../apps/leanmd", "2", "2", "2", "3", "20", "20", "2"}, &out, &errb)
	require.Equal(t, 0, code, errb.String())
	require.Contains(t, out.String(), "atoms 1322, cells 8, computes 304, steps 3, PEs 2")
	require.Contains(t, out.String(), "fault tolerance: camel, 1 failures, 1 PEs rolled back")
	require.Contains(t, errb.String(), "PE 1 failed (injected: PE 1 at step 2); it recovers alone (camel)")
	_, err := os.Stat(filepath.Join(dir, "LATEST"))
	require.NoError(t, err, "--ckpt-dir reached the program")

	out.Reset()
	errb.Reset()
	require.Equal(t, 2, run([]string{"+p2", t.TempDir()}, &out, &errb))
	require.Contains(t, errb.String(), "is a directory without Go files")
}

// The program takes runtime flags anywhere on its line, so charmrun reads
// the ones it acts on after the program too: --ckpt-dir (a job that
// cannot go on runs again from it; given after the program it was
// ignored, and such a job ended), --listen, --connect-timeout. Running
// again, it drops the injected faults wherever they were given (after
// the program they were injected again), up to "--".
func TestRuntimeFlagsAfterTheProgramCountForCharmrun(t *testing.T) {
	dir := t.TempDir()
	l, err := parse([]string{"++n", "2", "./prog", "3", "--ckpt-dir", dir, "--kill", "1@5", "--kill-file=f", "--connect-timeout", "7s", "--listen=0.0.0.0", "--", "--kill", "x"})
	require.NoError(t, err)
	require.Equal(t, dir, l.ckptDir)
	require.Equal(t, 7*time.Second, l.timeout)
	require.Equal(t, "0.0.0.0", l.listen)
	var again []string
	var errb bytes.Buffer
	restartOnce(l, "process 0 was killed by SIGKILL", &errb, func(args []string) (int, string) { again = args; return 0, "" })
	require.Contains(t, errb.String(), "it runs again, once, as it started")
	require.Equal(t, []string{"+p", "2", "++n", "2", "++ppn", "1", "3", "--ckpt-dir", dir, "--connect-timeout", "7s", "--listen=0.0.0.0", "--", "--kill", "x"}, again)

	_, err = parse([]string{"./prog", "--connect-timeout", "soon"})
	require.ErrorContains(t, err, `flag --connect-timeout: "soon" is not a positive duration`)
}

// failureFree is the energies of LeanMD run with params in one process
// of 2 PEs, without a failure: what a run that recovers must end with,
// on any PE count and layout (TestLeanMDOverProcesses checks that they
// do not depend on them). Each params' run is made once for the test
// binary: a dozen tests compare with the same two.
func failureFree(t *testing.T, leanmd string, params []string) string {
	t.Helper()
	v, _ := references.LoadOrStore(leanmd+" "+strings.Join(params, " "), &reference{})
	r := v.(*reference)
	r.once.Do(func() {
		var out, errb bytes.Buffer
		if code := run(append([]string{"+p2", leanmd}, params...), &out, &errb); code != 0 {
			r.err = fmt.Sprintf("the failure-free run %v: exit %d: %s", params, code, errb.String())
			return
		}
		r.energies = energies(t, out.String())
	})
	require.Empty(t, r.err)
	return r.energies
}

// references is the failure-free runs made so far (failureFree).
var references sync.Map

type reference struct {
	once     sync.Once
	energies string
	err      string
}

// plainTierOnly skips t under the race detector (raceOn says why).
func plainTierOnly(t *testing.T) {
	t.Helper()
	if raceOn {
		t.Skip("processes built without the race detector: the README's test command runs this in its plain tier")
	}
}

// energies are the lines of LeanMD's summary that must be bitwise equal
// between runs.

func energies(t *testing.T, out string) string {
	t.Helper()
	var e []string
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, "kinetic energy:") || strings.Contains(l, "potential energy:") {
			e = append(e, l)
		}
	}
	require.Len(t, e, 2, out)
	return strings.Join(e, "\n")
}

// LeanMD on several processes ends with the one-process run's energies,
// bitwise, and its summary says how the PEs were spread.
func TestLeanMDOverProcesses(t *testing.T) {
	bin := buildLeanMD(t)
	leanmd := func(args ...string) (string, string) {
		var out, errb bytes.Buffer
		code := run(append(args, "--watchdog", "60s", bin, "3", "3", "3", "21"), &out, &errb)
		require.Equal(t, 0, code, "%v: %s", args, errb.String())
		return out.String(), errb.String()
	}
	want := map[int]string{}
	pes := []string{"2", "3", "4"}
	layouts := []struct {
		args    []string
		summary string
	}{
		{[]string{"++n", "2", "++ppn", "2"}, "2 processes: 2 PEs (0..1) on"},
		{[]string{"++n", "2", "++ppn", "1"}, "2 processes: 1 PEs (0..0) on"},
		{[]string{"++n", "3", "++ppn", "1"}, "3 processes: 1 PEs (0..0) on"},
		{[]string{"+p", "4", "++ppn", "2"}, "2 processes: 2 PEs (0..1) on"},
	}
	if raceOn { // the launcher in this binary, under the detector: one job
		pes, layouts = pes[:1], layouts[:1]
	}
	for _, p := range pes {
		out, _ := leanmd("+p" + p)
		n, _ := strconv.Atoi(p)
		want[n] = energies(t, out)
	}
	if !raceOn {
		require.Equal(t, want[2], want[3], "the energies do not depend on the PE count either")
		require.Equal(t, want[2], want[4])
	}
	for _, c := range layouts {
		js := filepath.Join(t.TempDir(), "summary.json")
		out, errs := leanmd(append(c.args, "--summary-json", js)...)
		require.Equal(t, want[2], energies(t, out), "%v", c.args)
		require.Contains(t, out, c.summary)
		require.Equal(t, 1, strings.Count(out, "Summary"), "only process 0 reports")
		require.Empty(t, errs)

		// the summary as data: process 0 gathered every process's PEs,
		// and LeanMD's results say what its text does
		s := readSummary(t, js)
		procs, ppn := len(s.Layout.Processes), s.Layout.Processes[0].PEs
		require.Equal(t, c.summary[:1], strconv.Itoa(procs), "%v", c.args)
		require.Len(t, s.PEs, s.Layout.PEs)
		require.Equal(t, procs*ppn, s.Layout.PEs)
		var sent uint64
		for _, p := range s.PEs {
			require.Positive(t, p.Samples, "%v: PE %d was sampled in its own process", c.args, p.PE)
			require.Positive(t, p.Handled)
			require.Positive(t, p.SentBytes, "%v: PE %d's bytes came from its process", c.args, p.PE)
			sent += p.SentBytes
		}
		m := s.Messages
		require.Equal(t, m.P2P.Bytes+m.Multicasts.Bytes+m.Contributions.Bytes+m.Broadcasts.Bytes, sent, "%v", c.args)
		require.NotNil(t, s.Steps, "cell (0,0,0) began each step")
		require.Equal(t, 21, s.Steps.Last)
		res := map[string]string{}
		for _, r := range s.Results {
			res[r.Name] = string(r.Value)
		}
		var ke1 float64
		require.NoError(t, json.Unmarshal([]byte(res["kinetic_energy_last"]), &ke1))
		require.Contains(t, want[2], fmt.Sprintf("last step %.17g", ke1), "the JSON's energy is the text's, bitwise")
	}
}

// fakeShell is a remote shell for tests: it runs the command on this
// machine, except on host "unreachable" (it fails as ssh does) and on host
// "hung" (it never runs it).
func fakeShell(t *testing.T) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "fake-ssh")
	script := `#!/bin/sh
host=$1; shift
case $host in
unreachable) echo "ssh: Could not resolve hostname $host" >&2; exit 255;;
hung) exec sleep 600;;
esac
exec sh -c "$1"
`
	require.NoError(t, os.WriteFile(p, []byte(script), 0o755))
	return p
}

func nodelist(t *testing.T, hosts ...string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "nodelist")
	s := "# a Charm++ node list\ngroup main ++shell ssh\n"
	for _, h := range hosts {
		s += "host " + h + "\n"
	}
	require.NoError(t, os.WriteFile(p, []byte(s), 0o644))
	return p
}

// ++nodelist starts the processes through the remote shell; a host that
// cannot be reached, or a process that never joins within the connect
// timeout, ends the job with one line naming the process and its host.
func TestNodelistAndItsErrors(t *testing.T) {
	bin := buildLeanMD(t)
	shell := fakeShell(t)
	var out, errb bytes.Buffer
	code := run([]string{"++nodelist", nodelist(t, "nodeA", "nodeB"), "++remote-shell", shell, "++n", "2", "--listen", "0.0.0.0", bin, "2", "2", "2", "3"}, &out, &errb)
	require.Equal(t, 0, code, errb.String())
	require.Contains(t, out.String(), "2 processes: 1 PEs (0..0) on")

	for _, c := range []struct {
		hosts []string
		want  string
	}{
		{[]string{"nodeA", "unreachable"}, "charmrun: process 1 on unreachable exited with code 255 before it joined the job (the remote shell could not reach the host?)"},
		{[]string{"hung", "nodeB"}, "charmrun: process 0 on hung did not join the job within 3s (--connect-timeout)"},
	} {
		out.Reset()
		errb.Reset()
		code := run([]string{"++nodelist", nodelist(t, c.hosts...), "++remote-shell", shell, "++n", "2", "--connect-timeout", "3s", bin, "2", "2", "2", "3"}, &out, &errb)
		require.NotEqual(t, 0, code)
		require.Contains(t, errb.String(), c.want)
	}
}

// job is charmrun running LeanMD in a test.
type job struct {
	cmd  *exec.Cmd
	kids map[int]int // charmrun's children by rank
	out  *lockedBuffer
	err  *lockedBuffer
	done chan struct{} // closed when charmrun's output ended
}

type lockedBuffer struct {
	mu   sync.Mutex
	b    bytes.Buffer
	grew chan struct{} // signalled after writes (made on first use)
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	n, err := l.b.Write(p)
	grew := l.grown()
	l.mu.Unlock()
	select {
	case grew <- struct{}{}:
	default:
	}
	return n, err
}

// grown is the channel writes signal; l.mu is held.
func (l *lockedBuffer) grown() chan struct{} {
	if l.grew == nil {
		l.grew = make(chan struct{}, 1)
	}
	return l.grew
}

// waitFor waits until what was written holds s, failing the test after
// limit.
func (l *lockedBuffer) waitFor(t *testing.T, s string, limit time.Duration) {
	t.Helper()
	timeout := time.After(limit)
	for {
		l.mu.Lock()
		has, grew := strings.Contains(l.b.String(), s), l.grown()
		l.mu.Unlock()
		if has {
			return
		}
		select {
		case <-grew:
		case <-timeout:
			require.FailNow(t, "not written within "+limit.String(), "%q:\n%s", s, l.String())
		}
	}
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// startJob starts charmrun with args on LeanMD with params, and returns
// once LeanMD printed a line containing until, with charmrun's children.
func startJob(t *testing.T, charmrun, leanmd string, args, params []string, until string) *job {
	t.Helper()
	cmd := exec.Command(charmrun, append(append(args, leanmd), params...)...)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	j := &job{cmd: cmd, kids: map[int]int{}, out: &lockedBuffer{}, err: &lockedBuffer{}, done: make(chan struct{})}
	cmd.Stderr = j.err
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	sc := bufio.NewScanner(stdout)
	seen := false
	for sc.Scan() {
		j.out.Write(append(sc.Bytes(), '\n'))
		if strings.Contains(sc.Text(), until) {
			seen = true
			break
		}
	}
	if !seen {
		cmd.Wait()
		require.FailNow(t, "the job ended before it printed "+until, "%v:\n%s%s", args, j.out.String(), j.err.String())
	}
	go func() {
		io.Copy(j.out, stdout)
		close(j.done)
	}()
	j.findKids(t)
	return j
}

// findKids finds charmrun's children by rank (a job of one process,
// which has none: its only child is process 0).
func (j *job) findKids(t *testing.T) {
	t.Helper()
	j.kids = map[int]int{}
	var unranked []int
	defer func() {
		if len(j.kids) == 0 && len(unranked) == 1 {
			j.kids[0] = unranked[0]
		}
	}()
	dirs, err := os.ReadDir("/proc")
	require.NoError(t, err)
	for _, d := range dirs {
		pid, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", d.Name(), "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: the command may hold spaces
		f := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
		if len(f) < 2 || f[1] != strconv.Itoa(j.cmd.Process.Pid) || f[0] == "Z" {
			continue // (a child killed and not reaped yet is not its rank's)
		}
		env, _ := os.ReadFile(filepath.Join("/proc", d.Name(), "environ"))
		ranked := false
		for _, kv := range bytes.Split(env, []byte{0}) {
			if r, ok := strings.CutPrefix(string(kv), cluster.RankEnv+"="); ok {
				n, _ := strconv.Atoi(r)
				j.kids[n] = pid
				ranked = true
			}
		}
		if !ranked {
			unranked = append(unranked, pid)
		}
	}
}

// signal sends sig to the process of rank r (found by startJob: a pid of
// 0 would signal this test's whole process group).
func (j *job) signal(t *testing.T, r int, sig syscall.Signal) {
	t.Helper()
	pid := j.kids[r]
	require.Positive(t, pid, "no process of rank %d among charmrun's children", r)
	require.NoError(t, syscall.Kill(pid, sig))
}

// wait waits for charmrun to end and gives its exit code.
func (j *job) wait(t *testing.T) int {
	t.Helper()
	<-j.done
	err := j.cmd.Wait()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode()
	}
	require.NoError(t, err)
	return 0
}

// waitWithin is wait, failing the test (and ending the job) if charmrun
// has not ended within limit.
func (j *job) waitWithin(t *testing.T, limit time.Duration) int {
	t.Helper()
	select {
	case <-j.done:
	case <-time.After(limit):
		j.cmd.Process.Kill()
		require.FailNow(t, "the job did not end within "+limit.String(), "%s%s", j.out.String(), j.err.String())
	}
	return j.wait(t)
}

// waitGone waits, without polling, until process pid has exited.
func waitGone(t *testing.T, pid int) {
	t.Helper()
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		require.ErrorIs(t, err, unix.ESRCH) // gone already
		return
	}
	defer unix.Close(fd)
	fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
	deadline := time.Now().Add(20 * time.Second)
	n, err := unix.Poll(fds, 20_000)
	for errors.Is(err, unix.EINTR) { // the Go runtime's own signals (preemption) interrupt it
		n, err = unix.Poll(fds, max(int(time.Until(deadline).Milliseconds()), 0))
	}
	require.NoError(t, err)
	require.Equal(t, 1, n, "process %d outlived the job", pid)
}

// No process outlives its job: SIGKILL of charmrun ends every process.
func TestNoOrphansWhenCharmrunIsKilled(t *testing.T) {
	plainTierOnly(t)
	cr, leanmd := buildCharmrun(t), buildLeanMD(t)
	j := startJob(t, cr, leanmd, []string{"++n", "2", "++ppn", "1"}, []string{"3", "3", "3", "1000000"}, "Starting simulation")
	require.Len(t, j.kids, 2)
	require.NoError(t, j.cmd.Process.Signal(syscall.SIGKILL))
	for _, pid := range j.kids {
		waitGone(t, pid)
	}
}

// A process killed by SIGKILL mid-run is replaced by charmrun, and the job
// recovers: under --ft none every PE rolls back to the last checkpoint;
// under scmel and camel with one PE per process only the replacement
// does, and under team (a process is a team) only the replacement's PEs.
// Either way the run ends with the failure-free energies, bitwise.
//
// Under the race detector one case runs, with charmrun and LeanMD built
// with the detector too: the launcher replacing a
// process, the job's membership and links, the recovery's messages
// between processes.
func TestAKilledProcessIsReplaced(t *testing.T) {
	cr, leanmd := buildCharmrun(t), buildLeanMD(t)
	params := []string{"2", "2", "2", "41", "20", "20", "10", "--progress", "1"}
	if raceOn {
		cr, leanmd = programs.BuildRace(t, ".", "charmrun"), programs.BuildRace(t, "../../apps/leanmd", "leanmd")
	}
	want := failureFree(t, leanmd, params)
	for i, c := range []struct {
		args      []string
		notice    string
		ft        string
		survivors int // the recovery's line names them (0: a global rollback)
	}{
		{[]string{"++n", "2", "++ppn", "2", "--ft", "none"}, "charmgo: process 1 (PEs 2..3) was lost; every PE rolls back to checkpoint", "none, 1 failures, 4 PEs rolled back", 0},
		{[]string{"++n", "2", "++ppn", "1", "--ft", "camel"}, "charmgo: process 1 (PE 1) was lost; its replacement recovers alone (camel)", "camel, 1 failures, 1 PEs rolled back", 1},
		{[]string{"++n", "3", "++ppn", "1", "--ft", "scmel"}, "charmgo: process 1 (PE 1) was lost; its replacement recovers alone (scmel)", "scmel, 1 failures, 1 PEs rolled back", 2},
		// a process is a team (--teams process, the default): its PEs
		// roll back together, alone
		{[]string{"++n", "2", "++ppn", "2", "--ft", "team"}, "charmgo: process 1 (PEs 2..3) was lost; its PEs are one team: its replacement recovers them from the last checkpoint (team)", "team, 1 failures, 2 PEs rolled back", 2},
		{[]string{"++n", "2", "++ppn", "2", "--ft", "camel", "--teams", "process"}, "charmgo: process 1 (PEs 2..3) was lost; its PEs are one team: its replacement recovers them from the last checkpoint (camel+teams)", "camel+teams, 1 failures, 2 PEs rolled back", 2},
		// without teams a process of two PEs is two failures at once,
		// which camel does not replay: every PE rolls back, and the line
		// says what recovers the process alone
		{[]string{"++n", "2", "++ppn", "2", "--ft", "camel"}, "(2 PEs at once: camel recovers one PE at a time, so every PE rolls back; with --teams process each process is a team, which recovers alone)", "camel, 1 failures, 4 PEs rolled back", 0},
	} {
		if raceOn && i != 1 {
			continue // camel, 2 processes of 1 PE
		}
		j := startJob(t, cr, leanmd, append(c.args, "--watchdog", "60s"), params, "Step 15 Benchmark")
		j.signal(t, 1, syscall.SIGKILL)
		require.Equal(t, 0, j.wait(t), "%v: %s", c.args, j.err.String())
		require.Contains(t, j.err.String(), "charmrun: process 1 was killed by SIGKILL; starting its replacement")
		require.Contains(t, j.err.String(), c.notice)
		require.Contains(t, j.out.String(), "fault tolerance: "+c.ft)
		if c.survivors > 0 {
			// the replacement's PEs told process 0 what they heard
			require.Regexp(t, fmt.Sprintf(`recoveries: .* ms \(%d survivors sent [1-9]\d* logged messages again;`, c.survivors), j.out.String(), "%v", c.args)
		}
		require.Equal(t, want, energies(t, j.out.String()), "%v", c.args)
	}
}

// A process that hangs (stopped here) for longer than the heartbeat
// timeout keeps its connections, so nothing breaks by itself: the others
// find it silent, a process on its host kills it by SIGKILL, charmrun
// replaces it as a crashed one, and the run ends with the failure-free
// energies, bitwise.
func TestAHungProcessIsReplaced(t *testing.T) {
	plainTierOnly(t)
	cr, leanmd := buildCharmrun(t), buildLeanMD(t)
	params := []string{"2", "2", "2", "41", "20", "20", "10", "--progress", "1"}
	want := failureFree(t, leanmd, params)
	type hungCase struct {
		args []string
		hung int // the process stopped
	}
	// (process 11 of 12: a leaf of the heartbeats' tree, watched by its
	// parent, process 1, alone)
	cases := []hungCase{{[]string{"++n", "2", "++ppn", "1", "--ft", "camel"}, 1}, {[]string{"++n", "2", "++ppn", "1", "--ft", "camel"}, 0},
		{[]string{"++n", "12", "++ppn", "1", "--ft", "camel"}, 11}}
	if os.Getenv("FT_LONG") != "" { // (the suite's time: one protocol is the same path)
		for _, ft := range []string{"none", "pessimist", "team"} {
			cases = append(cases, hungCase{[]string{"++n", "2", "++ppn", "2", "--ft", ft}, 1}, hungCase{[]string{"++n", "2", "++ppn", "2", "--ft", ft}, 0})
		}
	}
	for _, c := range cases {
		j := startJob(t, cr, leanmd, append(c.args, "--heartbeat-timeout", "2s", "--watchdog", "60s"), params, "Step 15 Benchmark")
		j.signal(t, c.hung, syscall.SIGSTOP)
		require.Equal(t, 0, j.waitWithin(t, 60*time.Second), "%v: %s", c.args, j.err.String())
		require.Regexp(t, fmt.Sprintf(`charmgo: process %d \(pid \d+ on \S+\) is killed, to be replaced: no heartbeat for 2s`, c.hung), j.err.String(), "%v", c.args)
		require.Contains(t, j.err.String(), fmt.Sprintf("charmrun: process %d was killed by SIGKILL; starting its replacement", c.hung), "%v", c.args)
		require.Equal(t, want, energies(t, j.out.String()), "%v", c.args)
	}
}

// Process 0 steers the job (it admits replacements and decides how the
// job recovers); when it is lost, charmrun names the lowest rank left in
// the job to take over, which tells charmrun's rendezvous where it
// listens, admits process 0's replacement and rolls every
// PE back to the last checkpoint (it does not know what process 0 knew
// of recoveries under way: a global rollback needs none of it), then
// hands the steering back to process 0's replacement, which recovers
// the job's later losses as process 0 did: alone, or by teams, not by a
// global rollback. The run ends with the failure-free energies,
// bitwise, under every protocol; so does one whose successor, or
// another process, is lost in turn once process 0 steers again. Lost close together,
// process 0 and its successor leave the next process to steer: with
// --ckpt-dir the job recovers from there, without it, PE 0's snapshot
// went with both copies and the job ends with a line saying so.
func TestTheStewardsLossIsReplaced(t *testing.T) {
	plainTierOnly(t)
	cr, leanmd := buildCharmrun(t), buildLeanMD(t)
	params := []string{"2", "2", "2", "61", "20", "20", "10", "--progress", "1"}
	want := failureFree(t, leanmd, params)
	type stewardCase struct {
		name   string
		layout []string
		ft     []string
		then   int    // the process killed next (-1: none)
		after  string // what the second kill waits for, on charmrun's standard error (or output: "out:…")
		code   int
		lines  []string
		// summary: in the summary, if not "" (the successor's recoveries
		// and process 0's replacement's, together)
		summary string
	}
	threeByOne := []string{"++n", "3", "++ppn", "1"}
	const handedBack = "charmgo: process 0 steers the job again (process 1 handed it back once the rollback was done)"
	cases := []stewardCase{
		{"camel", threeByOne, []string{"--ft", "camel"}, -1, "", 0, []string{
			"charmgo: process 0 (PE 0) was lost; waiting for its replacement (process 1 steers the job from now on)",
			"charmrun: process 0 was killed by SIGKILL; starting its replacement",
			"charmgo: process 0 (PE 0) was lost (process 1 steers the job in place of a lost one, which took what it knew of the job's recoveries with it: every PE rolls back); every PE rolls back to checkpoint",
			handedBack}, ""},
		// (once the run goes on: until process 0's replacement restored
		// PE 0, PE 1 holds the one copy of its snapshot left)
		{"the successor lost in turn", threeByOne, []string{"--ft", "pessimist"}, 1, "out:Step 33 Benchmark", 0, []string{
			handedBack, "charmgo: process 1 (PE 1) was lost; its replacement recovers alone (pessimist)"}, "fault tolerance: pessimist, 2 failures, 4 PEs rolled back"},
		{"another process lost once process 0 steers again", threeByOne, []string{"--ft", "camel"}, 2, "out:Step 33 Benchmark", 0, []string{
			handedBack, "charmgo: process 2 (PE 2) was lost; its replacement recovers alone (camel)"}, "fault tolerance: camel, 2 failures, 4 PEs rolled back"},
		{"process 0 and its successor close together, from the checkpoint directory", threeByOne, []string{"--ft", "team", "--ckpt-dir", t.TempDir()}, 1, "process 0 was killed", 0, []string{
			"(process 2 steers the job from now on)"}, ""},
		{"process 0 and its successor close together", threeByOne, []string{"--ft", "scmel"}, 1, "process 0 was killed", 1, []string{
			"no copy of PE 0's snapshot of checkpoint 2 survives"}, ""},
	}
	if os.Getenv("FT_LONG") != "" {
		// (CI's margin: camel's case above takes the same way)
		cases = append(cases, stewardCase{"another process lost once process 0 steers again, spmd", threeByOne, []string{"--ft", "spmd"}, 2, "out:Step 33 Benchmark", 0, []string{
			handedBack, "charmgo: process 2 (PE 2) was lost; its replacement recovers alone (spmd)"}, "fault tolerance: spmd, 2 failures, 4 PEs rolled back"})
		for _, ft := range []string{"none", "scmel", "team", "pessimist"} {
			cases = append(cases, stewardCase{ft + ", 3×1", threeByOne, []string{"--ft", ft}, -1, "", 0, nil, ""})
		}
		for _, ft := range []string{"none", "camel", "team", "pessimist"} {
			cases = append(cases, stewardCase{ft + ", 2×2", []string{"++n", "2", "++ppn", "2"}, []string{"--ft", ft}, -1, "", 0, nil, ""})
		}
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			j := startJob(t, cr, leanmd, append(append(slices.Clone(c.layout), "--watchdog", "30s"), c.ft...), params, "Step 25 Benchmark")
			j.signal(t, 0, syscall.SIGKILL)
			if c.then >= 0 {
				if what, ok := strings.CutPrefix(c.after, "out:"); ok {
					j.out.waitFor(t, what, 20*time.Second)
				} else {
					j.err.waitFor(t, c.after, 20*time.Second)
				}
				j.signal(t, c.then, syscall.SIGKILL)
			}
			require.Equal(t, c.code, j.waitWithin(t, 40*time.Second), j.err.String())
			for _, l := range c.lines {
				require.Contains(t, j.err.String(), l)
			}
			if c.code == 0 {
				require.Contains(t, j.out.String(), "fault tolerance: "+c.ft[1])
				require.Contains(t, j.out.String(), c.summary)
				require.Equal(t, want, energies(t, j.out.String()))
			}
		})
	}
}

// Two processes lost close together never leave the job hanging: it
// recovers, or it ends with a line that says which losses it could not
// survive, within 30 s. One after the other (the second once the first
// caught up) each recovers alone (a replacement's link to the next
// replacement used to hold what came through it for ever). Both at once
// are one failure of both processes' PEs, which the protocols do not
// recover alone: every PE rolls back, from --ckpt-dir here (their
// replacements are admitted together: the second used to wait for the
// first's links, which waited for it); without a directory PE 1's
// snapshot, held by PEs 1 and 2, is gone with them, and the job says so.
// The second lost while the first's replacement recovers, within a
// second of it: the same (with a directory the job recovers, bitwise).
func TestTwoProcessesLostCloseTogether(t *testing.T) {
	plainTierOnly(t)
	cr, leanmd := buildCharmrun(t), buildLeanMD(t)
	params := []string{"2", "2", "2", "61", "20", "20", "10", "--progress", "1"}
	want := failureFree(t, leanmd, params)
	for _, c := range []struct {
		name    string
		args    []string
		after   string // what the second kill waits for ("": nothing)
		code    int
		notices []string
	}{
		{"one after the other", []string{"--ft", "camel"}, "PE 1 caught up", 0, []string{
			"charmgo: process 1 (PE 1) was lost; its replacement recovers alone (camel)",
			"charmgo: process 2 (PE 2) was lost; its replacement recovers alone (camel)"}},
		// the second while the first recovers: the two copies of PE 1's
		// snapshot went with them (PE 2 holds the second)
		{"the second during the first's recovery", []string{"--ft", "scmel"}, "process 1 was killed", 1, []string{
			"and no copy of PE 1's snapshot of checkpoint 2 survives (each PE's snapshot is held by it and its buddy); give --ckpt-dir to keep one on disk"}},
		{"the second during the first's recovery, from the checkpoint directory", []string{"--ft", "pessimist", "--ckpt-dir", t.TempDir()}, "process 1 was killed", 0, nil},
		{"at once, from the checkpoint directory", []string{"--ft", "team", "--ckpt-dir", t.TempDir()}, "", 0, []string{
			"charmgo: process 1 (PE 1) was lost, and process 2 (PE 2) was lost (2 processes at once: team recovers one failure at a time, so every PE rolls back); every PE rolls back to checkpoint"}},
		{"at once, no copy of a snapshot left", []string{"--ft", "camel"}, "", 1, []string{
			"leanmd: process 1 (PE 1) was lost, and process 2 (PE 2) was lost (2 processes at once: camel recovers one failure at a time, so every PE rolls back), and no copy of PE 1's snapshot of checkpoint 2 survives"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			j := startJob(t, cr, leanmd, append([]string{"++n", "3", "++ppn", "1", "--watchdog", "20s"}, c.args...), params, "Step 25 Benchmark")
			j.signal(t, 1, syscall.SIGKILL)
			if c.after != "" {
				j.err.waitFor(t, c.after, 20*time.Second)
			}
			j.signal(t, 2, syscall.SIGKILL)
			require.Equal(t, c.code, j.waitWithin(t, 30*time.Second), j.err.String())
			for _, n := range c.notices {
				require.Contains(t, j.err.String(), n)
			}
			if c.code == 0 {
				require.Equal(t, want, energies(t, j.out.String()))
			}
		})
	}
}

// The steward lost as it admits the replacement of another process, on
// four processes: it may have told some of the others of the
// replacement and not the rest, and the replacement may be dialing it.
// The others agree on who takes over (the rendezvous names it), and the
// job ends with the failure-free energies. (With the steward lost 0-100
// ms after the replacement started, 4 runs in 30 ended with exit 1:
// the replacement failed on a connection the dying steward reset, or
// was refused by a steward that had not yet noticed the loss.)
func TestTheStewardLostAsItAdmitsAReplacement(t *testing.T) {
	plainTierOnly(t)
	cr, leanmd := buildCharmrun(t), buildLeanMD(t)
	params := []string{"2", "2", "2", "61", "20", "20", "10", "--progress", "1"}
	want := failureFree(t, leanmd, params)
	protocols := [][]string{{"--ft", "camel"}}
	if os.Getenv("FT_LONG") != "" { // (the suite's time: the membership is the same under each)
		protocols = append(protocols, []string{"--ft", "none"}, []string{"--ft", "scmel"}, []string{"--ft", "team", "--teams", "process"},
			[]string{"--ft", "spmd", "--teams", "1"}, []string{"--ft", "pessimist"})
	}
	for _, ft := range protocols {
		t.Run(strings.Join(ft[1:], " "), func(t *testing.T) {
			j := startJob(t, cr, leanmd, append([]string{"++n", "4", "++ppn", "1", "--watchdog", "20s", "--ckpt-dir", t.TempDir()}, ft...), params, "Step 25 Benchmark")
			j.signal(t, 2, syscall.SIGKILL)
			j.err.waitFor(t, "process 2 was killed by SIGKILL; starting its replacement", 20*time.Second)
			j.signal(t, 0, syscall.SIGKILL)
			require.Equal(t, 0, j.waitWithin(t, 30*time.Second), j.err.String())
			require.Equal(t, want, energies(t, j.out.String()))
		})
	}
}

// What cannot be replaced ends the job at once, with a line that says
// so: every process of a job lost at once (none is left to admit the
// replacements), and any process of a job whose launcher does not
// replace processes (srun, mpirun).
func TestALossThatCannotBeReplacedEndsTheJob(t *testing.T) {
	plainTierOnly(t)
	cr, leanmd := buildCharmrun(t), buildLeanMD(t)
	j := startJob(t, cr, leanmd, []string{"++n", "2", "++ppn", "1"}, []string{"3", "3", "3", "1000000"}, "Starting simulation")
	j.signal(t, 0, syscall.SIGKILL)
	j.signal(t, 1, syscall.SIGKILL)
	require.NotEqual(t, 0, j.waitWithin(t, 20*time.Second))
	require.Regexp(t, `charmrun: process [01] was killed by SIGKILL\n`, j.err.String())

	// A job of one process: charmrun says what ended it. A signal it
	// passed on (^C) ends it as asked, without that line.
	for _, c := range []struct {
		sig  syscall.Signal
		line bool
	}{{syscall.SIGKILL, true}, {syscall.SIGINT, false}} {
		j := startJob(t, cr, leanmd, []string{"+p2"}, []string{"3", "3", "3", "1000000"}, "Starting simulation")
		if c.sig == syscall.SIGINT {
			require.NoError(t, j.cmd.Process.Signal(c.sig)) // to charmrun, which passes it on
		} else {
			j.signal(t, 0, c.sig)
		}
		require.NotEqual(t, 0, j.wait(t))
		require.Equal(t, c.line, strings.Contains(j.err.String(), "charmrun: process 0 was killed by "+unix.SignalName(c.sig)), "%v: %s", c.sig, j.err.String())
	}

	// Under srun nothing replaces a process: one killed, or one that
	// hangs (stopped here: it keeps its connections, and the heartbeat
	// timeout finds it), ends the job.
	for _, hang := range []bool{false, true} {
		secret, err := cluster.NewSecret()
		require.NoError(t, err)
		dir := t.TempDir()
		cmds := make([]*exec.Cmd, 2)
		errs := make([]lockedBuffer, 2)
		var stdout io.Reader
		for r := range cmds {
			cmd := exec.Command(leanmd, "--rendezvous-dir", dir, "--heartbeat-timeout", "2s", "3", "3", "3", "1000000")
			cmd.Env = append(os.Environ(), fmt.Sprintf("SLURM_PROCID=%d", r), "SLURM_NTASKS=2", "SLURM_JOB_ID=9", cluster.SecretEnv+"="+secret.String())
			cmd.Stderr = &errs[r]
			if r == 0 {
				stdout, err = cmd.StdoutPipe()
				require.NoError(t, err)
			}
			require.NoError(t, cmd.Start())
			cmds[r] = cmd
			t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
		}
		sc := bufio.NewScanner(stdout)
		for sc.Scan() && !strings.Contains(sc.Text(), "Starting simulation") {
		}
		go io.Copy(io.Discard, stdout)
		if hang {
			require.NoError(t, cmds[1].Process.Signal(syscall.SIGSTOP))
		} else {
			require.NoError(t, cmds[1].Process.Kill())
		}
		err = cmds[0].Wait()
		require.Error(t, err, "process 0 ends, and not with 0")
		require.Contains(t, errs[0].String(), "leanmd: process 1 (pid ")
		if hang {
			require.Contains(t, errs[0].String(), "no heartbeat for 2s (--heartbeat-timeout)")
		} else {
			require.Contains(t, errs[0].String(), "was lost")
		}
	}
}

// A job that loses what cannot be replaced and was given --ckpt-dir runs
// again, once, from the last checkpoint complete there, or as it started
// if none is yet; the faults injected into the first run are not
// injected again. What cannot be replaced: the one process of a job of
// one, and every process of a job lost at once. Either way the run ends
// with the failure-free energies, bitwise. A second such loss ends the
// job.
func TestAJobThatCannotGoOnRunsAgainFromItsCheckpointDirectory(t *testing.T) {
	plainTierOnly(t)
	cr, leanmd := buildCharmrun(t), buildLeanMD(t)
	params := []string{"2", "2", "2", "41", "20", "20", "10", "--progress", "1"}
	want := failureFree(t, leanmd, params)
	type restartCase struct {
		name   string
		args   []string
		from   string
		until  string   // what the first run prints before it is killed
		layout []string // processes and PEs
		ranks  []int    // the processes killed at once
	}
	onePE2 := []string{"+p2"}
	cases := []restartCase{
		// (the kill lands after step 25, before or after checkpoint 3)
		{"a job of one process, killed by a signal", []string{"--ft", "none"}, `from checkpoint [23] in `, "Step 25 Benchmark", onePE2, []int{0}},
		{"before any checkpoint, as it started", []string{"--ft", "camel"}, `as it started \(no checkpoint is complete in --ckpt-dir: `, "Step 3 Benchmark", onePE2, []int{0}},
		{"every process at once", []string{"--ft", "camel"}, `from checkpoint [23] in `, "Step 25 Benchmark", []string{"++n", "2", "++ppn", "1"}, []int{0, 1}},
	}
	if os.Getenv("FT_LONG") != "" { // (the suite's time: the same path under each protocol)
		// SIGKILL of the one process of 3 PEs under every protocol
		for _, ft := range [][]string{{"--ft", "scmel"}, {"--ft", "camel"}, {"--ft", "team", "--teams", "1"}, {"--ft", "pessimist"}} {
			cases = append(cases, restartCase{"killed by a signal, under " + ft[1], ft, `from checkpoint [23] in `, "Step 25 Benchmark", []string{"++n", "1", "++ppn", "3"}, []int{0}})
		}
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			args := append(append(slices.Clone(c.layout), "--watchdog", "60s", "--ckpt-dir", dir), c.args...)
			j := startJob(t, cr, leanmd, args, params, c.until)
			for _, r := range c.ranks {
				j.signal(t, r, syscall.SIGKILL)
			}
			require.Equal(t, 0, j.waitWithin(t, 60*time.Second), j.err.String())
			require.Regexp(t, `charmrun: the job cannot go on \(process [01] was killed by SIGKILL\); it runs again, once, `+c.from, j.err.String())
			require.Equal(t, 1, strings.Count(j.err.String(), "it runs again"), "and once")
			require.Equal(t, want, energies(t, j.out.String()))
		})
	}
	t.Run("lost again, it ends", func(t *testing.T) {
		args := []string{"+p2", "--watchdog", "60s", "--ckpt-dir", t.TempDir()}
		j := startJob(t, cr, leanmd, args, params, "Step 25 Benchmark")
		j.signal(t, 0, syscall.SIGKILL)
		j.err.waitFor(t, "it runs again, once", 60*time.Second)
		j.out.waitFor(t, "Step 30 Benchmark", 60*time.Second) // the first run ended before step 30
		j.findKids(t)
		j.signal(t, 0, syscall.SIGKILL)
		require.NotEqual(t, 0, j.waitWithin(t, 60*time.Second))
		require.Contains(t, j.err.String(), "charmrun: the job ran again once already; it ends (process 0 was killed by SIGKILL)")
	})
}

// A checkpoint written by two processes restarts in one, and one written
// by one process restarts on two processes of two PEs: the energies are
// the uninterrupted run's, bitwise.
func TestRestartOnAnotherProcessCount(t *testing.T) {
	bin := buildLeanMD(t)
	leanmd := func(flags []string, params ...string) string {
		var out, errb bytes.Buffer
		args := append(append(append([]string{}, flags...), "--watchdog", "60s", bin), params...)
		code := run(args, &out, &errb)
		require.Equal(t, 0, code, "%v: %s", args, errb.String())
		return out.String()
	}
	params := []string{"3", "3", "3", "21", "20", "20", "10"}
	want := energies(t, leanmd([]string{"+p2"}, params...))
	for _, c := range []struct{ write, restart []string }{
		{[]string{"++n", "2", "++ppn", "1"}, []string{"+p", "1"}},
		{[]string{"+p", "3"}, []string{"++n", "2", "++ppn", "2"}},
	} {
		dir := t.TempDir()
		out := leanmd(append(c.write, "--ckpt-dir", dir), params...)
		require.Equal(t, want, energies(t, out), "%v", c.write)
		out = leanmd(append(c.restart, "--restart", dir))
		require.Equal(t, want, energies(t, out), "%v from %v", c.restart, c.write)
	}
}

// Under a launcher of its own (srun, mpirun), every process is started
// by it and takes its rank from the launcher's environment; they meet
// through a file in a shared directory or at an address given to all.
func TestProcessesUnderAnotherLauncher(t *testing.T) {
	bin := buildLeanMD(t)
	secret, err := cluster.NewSecret()
	require.NoError(t, err)
	free := func() string {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		defer l.Close()
		return l.Addr().String()
	}
	var want string
	for _, c := range []struct {
		rankVar, sizeVar string
		extraEnv         []string
		flags            []string
	}{
		{"SLURM_PROCID", "SLURM_NTASKS", []string{"SLURM_JOB_ID=77", "SLURM_STEP_ID=0"}, []string{"--rendezvous-dir", t.TempDir()}},
		{"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", nil, []string{"--rendezvous", free()}},
		{"PMI_RANK", "PMI_SIZE", []string{"CHARMGO_JOB_ID=pmi-job"}, []string{"--rendezvous-dir", t.TempDir()}},
	} {
		outs := make([]bytes.Buffer, 2)
		errs := make([]bytes.Buffer, 2)
		cmds := make([]*exec.Cmd, 2)
		for r := range cmds {
			cmd := exec.Command(bin, append(c.flags, "++ppn", "2", "--watchdog", "60s", "3", "3", "3", "11")...)
			cmd.Env = append(os.Environ(), append(c.extraEnv, fmt.Sprintf("%s=%d", c.rankVar, r), c.sizeVar+"=2",
				cluster.SecretEnv+"="+secret.String())...)
			cmd.Stdout, cmd.Stderr = &outs[r], &errs[r]
			require.NoError(t, cmd.Start())
			cmds[r] = cmd
		}
		for r, cmd := range cmds {
			require.NoError(t, cmd.Wait(), "%s=%d: %s", c.rankVar, r, errs[r].String())
		}
		require.Contains(t, outs[0].String(), "2 processes: 2 PEs (0..1) on")
		require.Empty(t, outs[1].String(), "process 1 reports nothing")
		if want == "" {
			want = energies(t, outs[0].String())
		}
		require.Equal(t, want, energies(t, outs[0].String()), c.rankVar)
	}
	// Without a rendezvous, or a secret, a process says what it needs.
	cmd := exec.Command(bin, "3", "3", "3", "11")
	cmd.Env = append(os.Environ(), "SLURM_PROCID=0", "SLURM_NTASKS=2", cluster.SecretEnv+"="+secret.String())
	out, err := cmd.CombinedOutput()
	require.Error(t, err)
	require.Contains(t, string(out), "leanmd: process 0 of 2: no rendezvous: give --rendezvous HOST:PORT")
	cmd = exec.Command(bin, "--rendezvous-dir", t.TempDir(), "3", "3", "3", "11")
	cmd.Env = append(os.Environ(), "SLURM_PROCID=0", "SLURM_NTASKS=2", "SLURM_JOB_ID=5")
	out, err = cmd.CombinedOutput()
	require.Error(t, err)
	require.Contains(t, string(out), "several processes need the job's secret in CHARMGO_JOB_SECRET")
}

// Under charmrun each process writes its own profiles, FILE.N for rank N.
func TestProfilesPerProcess(t *testing.T) {
	bin := buildLeanMD(t)
	dir := t.TempDir()
	var out, errb bytes.Buffer
	code := run([]string{"++n", "2", "++ppn", "1", "--cpuprofile", filepath.Join(dir, "cpu"), "--memprofile", filepath.Join(dir, "mem"),
		bin, "2", "2", "2", "3"}, &out, &errb)
	require.Equal(t, 0, code, errb.String())
	for _, f := range []string{"cpu.0", "cpu.1", "mem.0", "mem.1"} {
		st, err := os.Stat(filepath.Join(dir, f))
		require.NoError(t, err)
		require.Positive(t, st.Size(), f)
	}
}

// --trace under charmrun: each process records its own PEs, process 0
// merges the parts on its clock and removes them; the merged trace holds
// every entry method a one-process run of the same program runs, each on
// its own process's lanes.
func TestTraceOverProcesses(t *testing.T) {
	bin := buildLeanMD(t)
	type event struct {
		Name string   `json:"name"`
		Cat  string   `json:"cat"`
		Ph   string   `json:"ph"`
		Ts   float64  `json:"ts"`
		Dur  *float64 `json:"dur"`
		Pid  int      `json:"pid"`
		Tid  int      `json:"tid"`
	}
	type traceFile struct {
		OtherData struct {
			Schema  string           `json:"schema"`
			PEs     int              `json:"pes"`
			Offsets map[string]int64 `json:"clock_offsets_ns"`
			Missing []int            `json:"missing_processes"`
		} `json:"otherData"`
		TraceEvents []event `json:"traceEvents"`
	}
	traced := func(args ...string) (traceFile, map[string]int, string) {
		dir := t.TempDir()
		path := filepath.Join(dir, "run.json")
		var out, errb bytes.Buffer
		code := run(append(args, "--watchdog", "60s", "--trace", path, bin, "2", "2", "2", "6"), &out, &errb)
		require.Equal(t, 0, code, "%v: %s", args, errb.String())
		b, err := os.ReadFile(path)
		require.NoError(t, err)
		var tf traceFile
		require.NoError(t, json.Unmarshal(b, &tf))
		require.Equal(t, chare.TraceSchema, tf.OtherData.Schema)
		require.Empty(t, tf.OtherData.Missing)
		left, err := os.ReadDir(dir)
		require.NoError(t, err)
		require.Len(t, left, 1, "the processes' parts are removed once merged: %v", left)
		counts := map[string]int{}
		for _, e := range tf.TraceEvents {
			if e.Cat == "entry" {
				counts[e.Name]++
			}
		}
		return tf, counts, energies(t, out.String())
	}
	_, want, energy := traced("+p4")
	tf, got, energy2 := traced("++n", "2", "++ppn", "2")
	require.Equal(t, energy, energy2)
	require.Equal(t, want, got, "every entry method of every process, once")
	require.Equal(t, 4, tf.OtherData.PEs)
	require.Len(t, tf.OtherData.Offsets, 2)
	require.Zero(t, tf.OtherData.Offsets["0"])
	off := time.Duration(tf.OtherData.Offsets["1"])
	require.Less(t, off.Abs(), 100*time.Millisecond, "one host, one clock: the estimated offset is about zero")
	perProc := map[int]int{}
	for _, e := range tf.TraceEvents {
		if e.Cat != "entry" {
			continue
		}
		require.Equal(t, e.Tid/2, e.Pid, "PE %d is process %d's", e.Tid, e.Tid/2)
		require.GreaterOrEqual(t, e.Ts, 0.0)
		perProc[e.Pid]++
	}
	require.Positive(t, perProc[0])
	require.Positive(t, perProc[1])
}

// --kill PE@STEP with several processes is a real failure: the process
// holding the PE ends itself by SIGKILL when the program begins the step,
// charmrun replaces it, and the job ends with the failure-free results;
// the replacement does not kill itself again.
func TestKillAProcessAtAStep(t *testing.T) {
	bin := buildLeanMD(t)
	leanmd := func(args ...string) (string, string, int) {
		var out, errb bytes.Buffer
		code := run(append(args, "--watchdog", "60s", bin, "2", "2", "2", "16"), &out, &errb)
		return out.String(), errb.String(), code
	}
	want, _, code := leanmd("+p2")
	require.Equal(t, 0, code)
	for _, ft := range []string{"none", "camel"} {
		js := filepath.Join(t.TempDir(), "summary.json")
		out, errs, code := leanmd("++n", "2", "++ppn", "1", "--ft", ft, "--kill", "1@8", "--summary-json", js)
		require.Equal(t, 0, code, "%s: %s", ft, errs)
		require.Equal(t, energies(t, want), energies(t, out), ft)
		require.Equal(t, 1, strings.Count(errs, "ends itself by SIGKILL: --kill 1@8: process 1 holds PE 1"), "%s, once: %s", ft, errs)
		require.Contains(t, errs, "charmrun: process 1 was killed by SIGKILL; starting its replacement")
		s := readSummary(t, js)
		require.Equal(t, 1, s.FaultTolerance.Failures, ft)
		require.Positive(t, s.FaultTolerance.RecoveryMs, ft)
	}
}

func buildJacobi2D(t *testing.T) string {
	return programs.Build(t, "../../examples/jacobi2d", "jacobi2d")
}

// --kill PE@TIME with several processes, in a program that reports no
// steps (jacobi2d): the process holding the PE ends itself by SIGKILL at
// the time, once; charmrun replaces it and the job ends with every cell
// bitwise the serial computation's (the program checks it: exit 0).
func TestKillAProcessAtATime(t *testing.T) {
	plainTierOnly(t)
	bin := buildJacobi2D(t)
	for _, ft := range []string{"none", "camel"} {
		var out, errb bytes.Buffer
		code := run([]string{"++n", "2", "++ppn", "1", "--ft", ft, "--ckpt-period", "500", "--kill", "1@150ms", "--watchdog", "60s",
			bin, "-blocks", "4", "-size", "8", "-iters", "8000", "-lb-period", "0", "-progress", "0"}, &out, &errb)
		errs := errb.String()
		require.Equal(t, 0, code, "%s: %s", ft, errs)
		require.Contains(t, out.String(), "check passed: every cell equals the serial computation's", ft)
		require.Equal(t, 1, strings.Count(errs, "ends itself by SIGKILL: --kill 1@150ms: process 1 holds PE 1"), "%s, once: %s", ft, errs)
		require.Contains(t, errs, "charmrun: process 1 was killed by SIGKILL; starting its replacement")
	}
}

func buildOpenAtom(t *testing.T) string { return programs.Build(t, "../../apps/openatom", "openatom") }

// openAtomEnergies is the OpenAtom proxy's energy line of its summary.
func openAtomEnergies(t *testing.T, out string) string {
	t.Helper()
	var e []string
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, "  energy: first step") {
			e = append(e, l)
		}
	}
	require.Len(t, e, 1, out)
	return e[0]
}

// The OpenAtom proxy across processes ends with the one-process run's
// energies, bitwise: on 2 processes of 2 PEs, with a process ended by
// SIGKILL at a step (--kill) under each protocol, and with a process
// killed by SIGKILL from outside mid-run and replaced.
func TestOpenAtomOverProcesses(t *testing.T) {
	plainTierOnly(t)
	cr, bin := buildCharmrun(t), buildOpenAtom(t)
	params := []string{"8", "12", "12", "--grain", "4", "--chunks", "3", "--progress", "1"}
	openatom := func(args ...string) string {
		var out, errb bytes.Buffer
		code := run(append(append(args, "--watchdog", "60s", bin), params...), &out, &errb)
		require.Equal(t, 0, code, "%v: %s", args, errb.String())
		return out.String()
	}
	want := openAtomEnergies(t, openatom("+p2"))
	for _, args := range [][]string{
		{"++n", "2", "++ppn", "2"},
		{"++n", "2", "++ppn", "1", "--wire-check"},
		{"++n", "2", "++ppn", "2", "--ft", "none", "--ckpt-period", "4", "--kill", "2@6"},
		{"++n", "2", "++ppn", "1", "--ft", "camel", "--kill", "1@5"},
		{"++n", "3", "++ppn", "1", "--ft", "scmel", "--kill", "2@9"},
		{"++n", "2", "++ppn", "2", "--ft", "team", "--ckpt-period", "4", "--kill", "3@7"},
		{"++n", "2", "++ppn", "2", "--ft", "camel", "--teams", "process", "--kill", "2@3"},
	} {
		out := openatom(args...)
		require.Equal(t, want, openAtomEnergies(t, out), "%v", args)
		require.Contains(t, out, " processes: ", "%v", args)
	}
	j := startJob(t, cr, bin, []string{"++n", "2", "++ppn", "1", "--ft", "camel", "--watchdog", "60s"}, params, "Step 6 ")
	j.signal(t, 1, syscall.SIGKILL)
	require.Equal(t, 0, j.waitWithin(t, 60*time.Second), j.err.String())
	require.Contains(t, j.err.String(), "charmrun: process 1 was killed by SIGKILL; starting its replacement")
	require.Contains(t, j.out.String(), "fault tolerance: camel, 1 failures")
	require.Equal(t, want, openAtomEnergies(t, j.out.String()))
}

// readSummary reads the summary a job wrote (--summary-json path).
func readSummary(t *testing.T, path string) chare.Summary {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	var s chare.Summary
	require.NoError(t, json.Unmarshal(b, &s), "%s", path)
	return s
}
