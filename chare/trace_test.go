package chare_test

import (
	"bytes"
	"context"
	"encoding/json"
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/charmgo/charmgo/chare"
	"github.com/stretchr/testify/require"
)

// traceFile is the JSON form of --trace FILE.json, field by field: a
// decoder that refuses unknown fields checks a trace against it.
type traceFile struct {
	DisplayTimeUnit string `json:"displayTimeUnit"`
	OtherData       struct {
		Schema         string           `json:"schema"`
		Program        string           `json:"program"`
		Args           []string         `json:"args"`
		Started        time.Time        `json:"started"`
		PEs            int              `json:"pes"`
		ClockOffsetsNs map[string]int64 `json:"clock_offsets_ns"`
		Missing        []int            `json:"missing_processes"`
	} `json:"otherData"`
	TraceEvents []traceEvent `json:"traceEvents"`
}

type traceEvent struct {
	Name string   `json:"name"`
	Cat  string   `json:"cat"`
	Ph   string   `json:"ph"`
	Ts   float64  `json:"ts"`
	Dur  *float64 `json:"dur"`
	Pid  int      `json:"pid"`
	Tid  int      `json:"tid"`
	S    string   `json:"s"`
	Args struct {
		Name    string `json:"name"`
		Chare   string `json:"chare"`
		Message string `json:"message"`
		Bytes   *int   `json:"bytes"`
	} `json:"args"`
}

// readTrace parses a --trace FILE.json and checks what every event of
// each kind must have.
func readTrace(t *testing.T, path string, pes int) traceFile {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	var tf traceFile
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	require.NoError(t, dec.Decode(&tf), "the trace against its schema")
	require.Equal(t, chare.TraceSchema, tf.OtherData.Schema)
	require.Equal(t, "ns", tf.DisplayTimeUnit)
	require.Equal(t, pes, tf.OtherData.PEs)
	require.Empty(t, tf.OtherData.Missing)
	require.False(t, tf.OtherData.Started.IsZero())
	lanes := map[int]string{}
	for _, e := range tf.TraceEvents {
		require.GreaterOrEqual(t, e.Ts, 0.0, "%+v", e)
		switch e.Ph {
		case "M":
			if e.Name == "thread_name" {
				lanes[e.Tid] = e.Args.Name
			}
		case "X":
			require.NotNil(t, e.Dur, "%+v", e)
			require.GreaterOrEqual(t, *e.Dur, 0.0, "%+v", e)
			require.Contains(t, lanes, e.Tid, "an event on a lane that was never named: %+v", e)
			switch e.Cat {
			case "entry":
				require.NotEmpty(t, e.Args.Chare, "%+v", e)
				require.NotEmpty(t, e.Args.Message, "%+v", e)
				require.NotNil(t, e.Args.Bytes, "%+v", e)
			case "idle", "runtime":
			default:
				t.Fatalf("an event of no known category: %+v", e)
			}
		case "i":
			require.Equal(t, "runtime", e.Cat, "%+v", e)
			require.Equal(t, "t", e.S, "%+v", e)
		default:
			t.Fatalf("an event of no known phase: %+v", e)
		}
	}
	require.Len(t, lanes, pes, "one named lane per PE")
	for q := range pes {
		require.Equal(t, "PE "+strconv.Itoa(q), lanes[q])
	}
	return tf
}

// entryCounts counts a trace's entry methods by name.
func entryCounts(tf traceFile) (map[string]int, int) {
	counts, n := map[string]int{}, 0
	for _, e := range tf.TraceEvents {
		if e.Ph == "X" && e.Cat == "entry" {
			counts[e.Name]++
			n++
		}
	}
	return counts, n
}

// --trace FILE.json writes Chrome's trace events: every entry method the
// run ran, once, on its PE's lane, named, with its chare and message;
// every PE's waits; the run's checkpoint as a phase.
func TestTraceAsChromeTraceEvents(t *testing.T) {
	path := filepath.Join(t.TempDir(), "run.json")
	res := chare.Run(smMain, chare.Config{PEs: 3, Trace: path})
	require.NoError(t, res.Err)
	tf := readTrace(t, path, 3)
	require.Equal(t, filepath.Base(os.Args[0]), tf.OtherData.Program, "the program is named as its summary names it")
	require.Equal(t, map[string]int64{"0": 0}, tf.OtherData.ClockOffsetsNs, "one process: no offsets")
	counts, _ := entryCounts(tf)
	require.Equal(t, 18, counts["sm.Elem.Work"], "6 elements, 3 steps")
	require.Equal(t, 3, counts["sm.Main.Sum"], "a reduction per step")
	idle := 0
	for _, e := range tf.TraceEvents {
		if e.Cat == "idle" {
			idle++
		}
		if e.Name == "sm.Elem.Work" {
			require.Regexp(t, `^sm\.Elem\[[0-5]\]$`, e.Args.Chare)
			require.Equal(t, "multicast", e.Args.Message, "a broadcast travels down the spanning tree as a multicast")
			require.GreaterOrEqual(t, *e.Dur, 4000.0, "Work burns 5 ms: its span must hold it (µs)")
		}
	}
	require.Positive(t, idle, "the PEs waited between steps")

	_, err := os.Stat(path + ".tmp")
	require.True(t, os.IsNotExist(err), "the file is written whole, under its name")
}

// A trace of a run with a failure shows it: under none the failure and
// every PE's rollback to the checkpoint; under camel the failed PE's
// restart and its replay.
func TestTraceOfARunWithAFailure(t *testing.T) {
	for _, c := range []struct {
		name  string
		cfg   chare.Config
		want  []string // instants and phases, by the start of their name
		phase string   // the phase that is the recovery
	}{
		{"none", chare.Config{PEs: 2, Args: []string{"2"}, Kills: []chare.Kill{{PE: 1, Step: 3}}},
			[]string{"failure of PE 1: every PE rolls back", "rollback", "checkpoint 1"}, "rollback"},
		{"camel", chare.Config{PEs: 3, FT: "camel", Args: []string{"2"}, Kills: []chare.Kill{{PE: 1, Step: 4}}},
			[]string{"PE 1 restarts from checkpoint 1", "recovery (replay)", "checkpoint 1"}, "recovery (replay)"},
	} {
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "run.json")
			c.cfg.Trace = path
			qtRun(t, c.cfg)
			tf := readTrace(t, path, c.cfg.PEs)
			var runtime []string
			for _, e := range tf.TraceEvents {
				if e.Cat == "runtime" {
					runtime = append(runtime, e.Name)
				}
			}
			for _, w := range c.want {
				require.True(t, hasPrefix(runtime, w), "%q among the runtime's events %q", w, runtime)
			}
			// the recovery phase ends after the failure: its span holds entries
			var failedAt, recoveredAt float64
			for _, e := range tf.TraceEvents {
				if e.Ph == "i" && failedAt == 0 {
					failedAt = e.Ts
				}
				if e.Ph == "X" && e.Name == c.phase {
					recoveredAt = max(recoveredAt, e.Ts+*e.Dur)
				}
			}
			require.Positive(t, failedAt)
			require.Greater(t, recoveredAt, failedAt)
		})
	}
}

func hasPrefix(names []string, prefix string) bool {
	for _, n := range names {
		if strings.HasPrefix(n, prefix) {
			return true
		}
	}
	return false
}

// chromium finds a headless browser, or skips the test naming what to
// install.
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	const missing = "no headless browser to open the trace page: install Debian's chromium package (apt-get install chromium); .ci/run does"
	if os.Getenv("CHARMGO_REQUIRE_BROWSER") != "" {
		t.Fatal(missing + ", and CHARMGO_REQUIRE_BROWSER says this run needs it")
	}
	t.Skip(missing)
	return ""
}

// runChromium opens a page headless, bounded in time: a browser that
// hangs fails the test in a minute with what it printed.
func runChromium(t *testing.T, browser, page string, args ...string) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	all := append([]string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
		"--disable-component-update", "--disable-sync", "--no-first-run", "--user-data-dir=" + t.TempDir(),
		"--window-size=1400,900", "--virtual-time-budget=10000"}, args...)
	cmd := exec.CommandContext(ctx, browser, append(all, "file://"+page)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	require.NoError(t, err, "%s: %s", browser, stderr.String())
	return out
}

// --trace FILE.html writes a page with everything inline; opened in a
// browser it draws a lane per PE, the legend, the usage chart and every
// entry method the run ran, and its table counts them as the JSON does.
func TestTracePageInABrowser(t *testing.T) {
	dir := t.TempDir()
	page := filepath.Join(dir, "run.html")
	res := chare.Run(smMain, chare.Config{PEs: 3, Trace: page})
	require.NoError(t, res.Err)
	b, err := os.ReadFile(page)
	require.NoError(t, err)
	require.NotRegexp(t, `(?i)(src|href)\s*=\s*["']?(https?:)?//`, string(b), "self-contained: the page fetches nothing")
	require.NotContains(t, string(b), "import(")

	// the same program traced as JSON: the entries the page must count
	jsonPath := filepath.Join(dir, "run.json")
	require.NoError(t, chare.Run(smMain, chare.Config{PEs: 3, Trace: jsonPath}).Err)
	counts, n := entryCounts(readTrace(t, jsonPath, 3))

	// the table, as written
	rows := regexp.MustCompile(`<tr><td><span class=swatch data-colour=\d+></span>([^<]+)</td><td>(\d+)</td>`).FindAllStringSubmatch(string(b), -1)
	table := map[string]int{}
	for _, r := range rows {
		table[r[1]], _ = strconv.Atoi(r[2])
	}
	require.Equal(t, counts, table, "the page's table counts what the JSON holds")

	browser := chromium(t)
	dom := string(runChromium(t, browser, page, "--dump-dom"))
	body := regexp.MustCompile(`<body([^>]*)>`).FindStringSubmatch(dom)
	require.NotNil(t, body, "no body in the rendered page:\n%.2000s", dom)
	attr := func(name string) string {
		m := regexp.MustCompile(`data-` + name + `="([^"]*)"`).FindStringSubmatch(body[1])
		require.NotNil(t, m, "data-%s on the body: %s", name, body[1])
		return m[1]
	}
	require.Equal(t, "1", attr("ready"), "the page's script ran to its end")
	require.Equal(t, "3", attr("lanes"))
	require.Equal(t, "0 1 2", attr("lane-pes"), "a lane per PE, in order")
	require.Equal(t, strconv.Itoa(n), attr("entries"))
	require.Equal(t, strconv.Itoa(n), attr("drawn"), "every entry drawn in the whole run's view")
	cols, _ := strconv.Atoi(attr("usage-columns"))
	require.Positive(t, cols, "the usage chart has entries in it")
	require.Equal(t, len(counts), strings.Count(dom, `class="legend-item"`), "a legend item per entry method")
	for name := range counts {
		require.Contains(t, dom, ">"+name+"<", "the legend names %s", name)
	}
	require.Contains(t, dom, `<canvas id="usage"`)
	require.Contains(t, dom, `<canvas id="lanes"`)

	// a screenshot at a fixed size, kept where CI keeps its artifacts
	shots := os.Getenv("CHARMGO_ARTIFACTS")
	if shots == "" {
		shots = os.TempDir()
	}
	shot := filepath.Join(shots, "charmgo-trace-page.png")
	runChromium(t, browser, page, "--screenshot="+shot)
	f, err := os.Open(shot)
	require.NoError(t, err)
	defer f.Close()
	img, err := png.DecodeConfig(f)
	require.NoError(t, err)
	require.Equal(t, [2]int{1400, 900}, [2]int{img.Width, img.Height})
	t.Logf("the page's screenshot: %s", shot)
}
