package chare_test

import (
	"bytes"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/charmgo/charmgo/chare"
	"github.com/charmgo/charmgo/pe/cluster"
)

// The tests of several processes run this test binary itself as each
// process of a job: TestMain runs the program the environment names
// instead of the tests.
const testProgramEnv = "CHARMGO_TEST_PROGRAM"

func TestMain(m *testing.M) {
	if name := os.Getenv(testProgramEnv); name != "" {
		os.Exit(runTestProgram(name, os.Args[1:]))
	}
	os.Exit(m.Run())
}

// runTestProgram runs one of the tests' programs as a process of a job,
// printing its results on standard output from the process of PE 0.
func runTestProgram(name string, args []string) int {
	cfg, err := chare.ParseFlags(args)
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", name, err)
		return 2
	}
	cfg.Watchdog = time.Minute
	prog, feat, _ := strings.Cut(name, ":")
	var res chare.Result
	switch prog {
	case "feat":
		featCase = feat
		res = chare.Run(featMain, cfg)
		if res.Process == 0 {
			for _, l := range featOut {
				fmt.Println(l)
			}
		}
	case "hello":
		res = chare.Run(helloMain, cfg)
	case "ring":
		res = chare.Run(ringMain, cfg)
	case "reduction":
		res = chare.Run(sumMain, cfg)
	case "section":
		res = chare.Run(secMain, cfg)
	case "migration":
		res = chare.Run(migMain, cfg)
	case "insert":
		insOut = -1
		res = chare.Run(insMain, cfg)
		if res.Process == 0 {
			fmt.Println("insert sum", insOut)
		}
	case "crash":
		crashHow = feat
		res = chare.Run(crashMain, cfg)
	default:
		fmt.Fprintf(os.Stderr, "no test program %q\n", name)
		return 2
	}
	if res.Err != nil && !chare.ReportedElsewhere(res.Err) {
		fmt.Fprintf(os.Stderr, "%s: %v\n", name, res.Err)
	}
	if res.Err != nil && res.Code == 0 {
		return 1
	}
	return res.Code
}

// ---- a program that ends badly on the last PE ----

type CrashMain struct{}

type Crasher struct{}

var (
	crashHow   string // read on every process: set from the program's name
	crashMain  = chare.NewMainType[CrashMain]("procs.CrashMain")
	crasherT   = chare.NewType[Crasher, struct{}]("procs.Crasher")
	crashNow   *chare.Entry[Crasher, int]
	crashAlive *chare.Entry[Crasher, int]
)

func init() {
	crashNow = chare.NewEntry(crasherT, (*Crasher).Now)
	crashAlive = chare.NewEntry(crasherT, (*Crasher).Alive)
}

func (m *CrashMain) Init(ctx *chare.Ctx, _ []string) {
	g := crasherT.NewGroup(ctx, struct{}{})
	crashAlive.Broadcast(ctx, g, 0)
	crashNow.Send(ctx, g.OnPE(ctx.NumPEs()-1), 0)
}

func (c *Crasher) Init(*chare.Ctx, struct{}) {}

// Alive keeps every PE busy, so the others are running when the last PE
// ends the job.
func (c *Crasher) Alive(ctx *chare.Ctx, n int) {
	crashAlive.Send(ctx, chare.ThisGroup[Crasher](ctx).OnPE((ctx.PE()+1)%ctx.NumPEs()), n+1)
}

func (c *Crasher) Now(ctx *chare.Ctx, _ int) {
	switch crashHow {
	case "panic":
		panic(fmt.Sprintf("crasher on PE %d gives up", ctx.PE()))
	case "exit":
		ctx.Exit(3)
	}
}

// raceNoExitSleep stops a race-enabled child from sleeping a second as it
// exits (the race detector's default, so that reports get written).
const raceNoExitSleep = "GORACE=atexit_sleep_ms=0"

// launch runs the named test program as procs processes of ppn PEs each
// (procs 1: one process, without the cluster), and gives its exit code
// and what it printed.
func launch(t *testing.T, name string, procs, ppn int, extra ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	args := append([]string{"+p", fmt.Sprint(procs * ppn), "++n", fmt.Sprint(procs), "++ppn", fmt.Sprint(ppn)}, extra...)
	l := cluster.Launch{Path: os.Args[0], Args: args, Name: name, Procs: procs, Env: []string{testProgramEnv + "=" + name, raceNoExitSleep},
		ConnectTimeout: 30 * time.Second, Stdout: &out, Stderr: &errb}
	return l.Run(), out.String(), errb.String()
}

// Every chare feature works unchanged across processes: each program
// prints the same on 2 processes × 2 PEs (with and without --wire-check,
// which encodes the messages within each process too) as in one process
// of as many PEs, and runs on 3 × 1. Under the race detector (every
// process built with it) the program runs on 2 × 2 without --wire-check,
// where messages both cross processes and pass by reference within one;
// the chaos tier, built without it, runs every layout (the chaos
// transport works within a process: the jobs' processes run without it,
// the one-process run that gives what they must print with it).
func TestChareFeaturesOverProcesses(t *testing.T) {
	layouts := []struct {
		procs, ppn int
		wire       bool
	}{{2, 2, false}, {2, 2, true}, {3, 1, false}}
	if raceOn {
		layouts = layouts[:1]
	}
	progs := []string{"hello", "ring", "reduction", "section", "migration", "insert",
		"feat:group", "feat:sparse6", "feat:atsync --lb rotate", "feat:bcast-migrate", "feat:packed", "feat:quiescence", "feat:future-set"}
	for _, p := range progs {
		name, flags, _ := strings.Cut(p, " ")
		extra := strings.Fields(flags)
		t.Run(name, func(t *testing.T) {
			code, want, errs := launch(t, name, 1, 4, extra...)
			require.Equal(t, 0, code, errs)
			require.NotEmpty(t, want)
			for _, c := range layouts {
				x := extra
				if c.wire {
					x = append([]string{"--wire-check"}, extra...)
				}
				code, got, errs := launch(t, name, c.procs, c.ppn, x...)
				require.Equal(t, 0, code, "%d×%d wire %v: %s", c.procs, c.ppn, c.wire, errs)
				if c.procs*c.ppn == 4 {
					require.Equal(t, want, got, "%d×%d wire %v", c.procs, c.ppn, c.wire)
				} else {
					require.NotEmpty(t, got)
				}
				require.Empty(t, errs)
			}
		})
	}
}

// A panic on a PE of one process ends the job in every process: the
// process where it happened prints the error with its stack, once; the
// job's exit code is not 0. An Exit from any PE ends every process with
// its code.
func TestEndingTheJobFromAnotherProcess(t *testing.T) {
	code, out, errs := launch(t, "crash:panic", 2, 2)
	require.Equal(t, 1, code, errs)
	require.Empty(t, out)
	require.Equal(t, 1, strings.Count(errs, "crasher on PE 3 gives up"), errs)
	require.Contains(t, errs, "goroutine")
	require.Contains(t, errs, "crash:panic: procs.Crasher[3] on PE 3: entry procs.Crasher.Now panicked")

	code, out, errs = launch(t, "crash:exit", 2, 2)
	require.Equal(t, 3, code, errs)
	require.Empty(t, out)
	require.Empty(t, errs)
}
