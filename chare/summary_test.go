package chare_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/charmgo/charmgo/chare"
	"github.com/stretchr/testify/require"
)

// A program of three steps, each a broadcast and a reduction, that
// reports its total and burns some time in each step, so the usage
// sampler has something to see.
type SmMain struct {
	Arr   chare.ArrayProxy[SmElem]
	Step  int
	Total int64
}

type SmElem struct{}

var (
	smMain = chare.NewMainType[SmMain]("sm.Main")
	smElem = chare.NewType[SmElem, struct{}]("sm.Elem")
	smWork *chare.Entry[SmElem, int]
	smSum  *chare.Entry[SmMain, int64]
)

func init() {
	smWork = chare.NewEntry(smElem, (*SmElem).Work)
	smSum = chare.NewEntry(smMain, (*SmMain).Sum)
}

func (m *SmMain) Init(ctx *chare.Ctx, _ []string) {
	m.Arr = smElem.NewArray(ctx, []int{6}, struct{}{})
	chare.StepRange(ctx, 1, 3)
	m.next(ctx)
}

func (m *SmMain) next(ctx *chare.Ctx) {
	m.Step++
	chare.AtStep(ctx, m.Step)
	smWork.Broadcast(ctx, m.Arr, m.Step)
}

func (m *SmMain) Sum(ctx *chare.Ctx, v int64) {
	m.Total += v
	if m.Step < 3 {
		m.next(ctx)
		return
	}
	chare.Report(ctx, "total", m.Total)
	chare.Report(ctx, "steps", []int{1, 2, 3})
	ctx.Exit(0)
}

func (e *SmElem) Init(*chare.Ctx, struct{}) {}

func (e *SmElem) Work(ctx *chare.Ctx, step int) {
	for end := time.Now().Add(5 * time.Millisecond); time.Now().Before(end); {
	}
	chare.Contribute(ctx, chare.SumInt64, int64(step*int(ctx.Index().C[0]+1)), smSum.CallbackTo(smMain.MainProxy()))
}

// --summary-json writes the run as data (schema charmgo.summary/1): the
// layout, the steps the program began, the traffic by kind as the run's
// statistics count it, every PE's utilisation, what the program reported;
// parsed back, it says what the text summary says.
func TestSummaryAsDataAndAsText(t *testing.T) {
	path := filepath.Join(t.TempDir(), "summary.json")
	res := chare.Run(smMain, chare.Config{PEs: 3, SummaryJSON: path})
	require.NoError(t, res.Err)
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	var s chare.Summary
	require.NoError(t, json.Unmarshal(b, &s))
	require.Equal(t, chare.SummarySchema, s.Schema)
	require.Equal(t, 0, s.ExitCode)
	require.Equal(t, 3, s.Layout.PEs)
	require.Len(t, s.Layout.Processes, 1)
	require.NotNil(t, s.Steps)
	require.Equal(t, [4]int{1, 3, 3, 2}, [4]int{s.Steps.First, s.Steps.Last, s.Steps.Count, s.Steps.Timed})
	require.Greater(t, s.Steps.MedianMs, 4.0, "each step works 5 ms on some PE")
	o := res.Stats.Ops
	require.Equal(t, o.Contributions, s.Messages.Contributions.Count)
	require.Equal(t, uint64(18), s.Messages.Contributions.Count, "6 elements, 3 steps")
	require.Equal(t, o.Broadcasts, s.Messages.Broadcasts.Count)
	require.Len(t, s.PEs, 3)
	for _, p := range s.PEs {
		require.Positive(t, p.Samples, "PE %d", p.PE)
		require.GreaterOrEqual(t, p.Utilisation, 0.0)
		require.LessOrEqual(t, p.Utilisation, 1.0)
	}
	var sent uint64
	for _, p := range s.PEs {
		require.Positive(t, p.SentBytes, "PE %d's chares sent", p.PE)
		sent += p.SentBytes
	}
	m := s.Messages
	require.Equal(t, m.P2P.Bytes+m.Multicasts.Bytes+m.Contributions.Bytes+m.Broadcasts.Bytes, sent, "the PEs' bytes add up to the run's")
	require.Equal(t, "none", s.FaultTolerance.Protocol)
	require.Len(t, s.Results, 2)
	for i, want := range [][2]string{{"total", strconv.Itoa(21 * 6)}, {"steps", "[1,2,3]"}} {
		require.Equal(t, want[0], s.Results[i].Name)
		require.JSONEq(t, want[1], string(s.Results[i].Value))
	}

	// the text says the same
	var text strings.Builder
	res.Summary.WriteText(&text)
	for _, want := range []string{
		"3 PEs in one process",
		fmt.Sprintf("steps 1..3: time per step (of 1..2: the last step has no end): mean %.3f ms, median %.3f ms", s.Steps.MeanMs, s.Steps.MedianMs),
		fmt.Sprintf("reduction:      %d contributions, %d bytes", s.Messages.Contributions.Count, s.Messages.Contributions.Bytes),
		fmt.Sprintf("broadcast:      %d broadcasts", s.Messages.Broadcasts.Count),
		"total: 126", "steps: [1,2,3]", "per PE (max/mean): bytes sent ",
	} {
		require.Contains(t, text.String(), want)
	}
	u := regexp.MustCompile(`PE utilisation: mean (\d+)%.*; by PE: (\d+) (\d+) (\d+)`).FindStringSubmatch(text.String())
	require.NotNil(t, u, text.String())
	for i, p := range s.PEs {
		require.Equal(t, fmt.Sprintf("%.0f", 100*p.Utilisation), u[2+i])
	}
}

// Under message logging each PE's log is in the summary too: the PEs'
// peaks add up to the run's (the per-PE figure the text prints divided
// by the PEs), and the text says how unequal they are.
func TestEachPEsLogInTheSummary(t *testing.T) {
	res := chare.Run(smMain, chare.Config{PEs: 3, FT: "scmel"})
	require.NoError(t, res.Err)
	s := res.Summary
	var peak uint64
	for _, p := range s.PEs {
		require.Positive(t, p.LogPeakBytes, "PE %d logged what it sent", p.PE)
		peak += p.LogPeakBytes
	}
	require.Equal(t, s.FaultTolerance.PeakLogPerPE.Total, peak/3)
	var text strings.Builder
	s.WriteText(&text)
	require.Regexp(t, `per PE \(max/mean\): bytes sent \d\.\d\d \(PE \d\), log peak \d\.\d\d \(PE \d\)`, text.String())
}

// Under a log limit the summary says what it did: the channels turned
// off, what went on them unlogged, each PE's largest log (under the
// limit: no failure, no send found it over), and the rollback set a
// failure would have had at each step; as data and as text.
func TestTheLogLimitInTheSummary(t *testing.T) {
	res := chare.Run(smMain, chare.Config{PEs: 3, FT: "scmel", LogLimit: 64})
	require.NoError(t, res.Err)
	ll := res.Summary.FaultTolerance.LogLimit
	require.NotNil(t, ll)
	require.Equal(t, uint64(64), ll.Bytes)
	require.Equal(t, "heaviest", ll.Strategy)
	require.Positive(t, ll.ChannelsOff)
	require.Equal(t, res.Stats.FT.ChannelsOffGranted, ll.ChannelsOff)
	require.Positive(t, ll.Unlogged.Count)
	require.Positive(t, ll.Unlogged.Bytes)
	require.LessOrEqual(t, ll.LargestPeakPE, uint64(64))
	require.GreaterOrEqual(t, ll.ExpectedSet, 1.0)
	require.LessOrEqual(t, ll.ExpectedSet, 3.0)
	require.LessOrEqual(t, ll.LargestSet, 3)
	var text strings.Builder
	res.Summary.WriteText(&text)
	require.Regexp(t, `log limit: +64 bytes a PE \(heaviest\): \d+ channels turned off, \d+ messages \(\d+ bytes\) sent on them unlogged`, text.String())
	require.Regexp(t, `a failure would have rolled back \d\.\d\d PEs on average`, text.String())

	res = chare.Run(smMain, chare.Config{PEs: 3, FT: "scmel"})
	require.NoError(t, res.Err)
	require.Nil(t, res.Summary.FaultTolerance.LogLimit, "no limit, no block")
}

// A deterministic run has no clock to sample: its PEs' utilisation is -1
// and the text leaves the line out; a run that could not write its JSON
// ends with an error naming the flag.
func TestSummaryWithoutUtilisationAndAnUnwritableFile(t *testing.T) {
	res := chare.Run(smMain, chare.Config{PEs: 2, Deterministic: true, Seed: 3})
	require.NoError(t, res.Err)
	for _, p := range res.Summary.PEs {
		require.Equal(t, -1.0, p.Utilisation)
	}
	var text strings.Builder
	res.Summary.WriteText(&text)
	require.NotContains(t, text.String(), "utilisation")

	res = chare.Run(smMain, chare.Config{PEs: 2, SummaryJSON: filepath.Join(t.TempDir(), "no", "such", "dir", "s.json")})
	require.Equal(t, 1, res.Code)
	require.ErrorContains(t, res.Err, "flag --summary-json")
}

// --cpuprofile, --memprofile and --trace-go write Go's profiles of the
// run (pprof's gzipped protobuf; the tracer's own format).
func TestProfilesOfARun(t *testing.T) {
	dir := t.TempDir()
	cpu, mem, tr := filepath.Join(dir, "cpu"), filepath.Join(dir, "mem"), filepath.Join(dir, "trace")
	res := chare.Run(smMain, chare.Config{PEs: 2, CPUProfile: cpu, MemProfile: mem, GoTrace: tr})
	require.NoError(t, res.Err)
	for _, f := range []string{cpu, mem} {
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		require.True(t, len(b) > 2 && b[0] == 0x1f && b[1] == 0x8b, "%s: a gzipped pprof profile", f)
	}
	b, err := os.ReadFile(tr)
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(string(b), "go 1."), "an execution trace")

	res = chare.Run(smMain, chare.Config{PEs: 2, CPUProfile: filepath.Join(dir, "no", "cpu")})
	require.Equal(t, 2, res.Code)
	require.ErrorContains(t, res.Err, "flag --cpuprofile")
}

// The live progress line (--progress-line on; auto shows it on a
// terminal): rewritten in place as steps begin, with the step of the
// last, and taken off when the run ends; what the program prints goes
// above it whole.
func TestTheProgressLine(t *testing.T) {
	var out strings.Builder
	res := chare.Run(smPrinter, chare.Config{PEs: 2, ProgressLine: "on", Stdout: &out})
	require.NoError(t, res.Err)
	s := out.String()
	require.Contains(t, s, "step 1/3")
	require.Contains(t, s, "step 3/3, ")
	require.Regexp(t, `step 3/3, \d+\.\d ms/step \(`, s)
	require.True(t, strings.HasSuffix(s, "\r\033[K"), "the line is taken off at the end: %q", s)
	// each erase is followed by the program's lines, then the line again
	var plain strings.Builder
	for _, piece := range strings.Split(s, "\r\033[K") {
		if i := strings.LastIndexByte(piece, '\n'); i >= 0 {
			plain.WriteString(piece[:i+1])
		}
	}
	require.Equal(t, "begin 1\nbegin 2\nbegin 3\n", plain.String(), "the program's lines, whole, the line taken out")

	out.Reset()
	res = chare.Run(smPrinter, chare.Config{PEs: 2, ProgressLine: "off", Stdout: &out})
	require.NoError(t, res.Err)
	require.Equal(t, "begin 1\nbegin 2\nbegin 3\n", out.String())
	_, err := chare.ParseFlags([]string{"--progress-line", "sometimes"})
	require.ErrorContains(t, err, `flag --progress-line: "sometimes": want auto, on or off`)
}

// smPrinter is SmMain printing a line as each step begins.
type SmPrinter struct{ SmMain }

var (
	smPrinter    = chare.NewMainType[SmPrinter]("sm.Printer")
	smPrinterSum *chare.Entry[SmPrinter, int64]
)

func init() {
	smPrinterSum = chare.NewEntry(smPrinter, (*SmPrinter).Sum)
}

func (m *SmPrinter) Init(ctx *chare.Ctx, _ []string) {
	m.Arr = smElem.NewArray(ctx, []int{4}, struct{}{})
	chare.StepRange(ctx, 1, 3)
	m.step(ctx)
}

func (m *SmPrinter) step(ctx *chare.Ctx) {
	m.Step++
	chare.AtStep(ctx, m.Step)
	fmt.Fprintf(ctx.Out(), "begin %d\n", m.Step)
	smWorkTo.Broadcast(ctx, m.Arr, smPrinterSum.CallbackTo(smPrinter.MainProxy()))
}

func (m *SmPrinter) Sum(ctx *chare.Ctx, v int64) {
	if m.Step < 3 {
		m.step(ctx)
		return
	}
	ctx.Exit(0)
}

var smWorkTo = chare.NewEntry(smElem, (*SmElem).WorkTo)

func (e *SmElem) WorkTo(ctx *chare.Ctx, cb chare.Callback[int64]) {
	for end := time.Now().Add(30 * time.Millisecond); time.Now().Before(end); {
	}
	chare.Contribute(ctx, chare.SumInt64, 1, cb)
}
