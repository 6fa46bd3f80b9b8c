package chare

// The run's trace (--trace FILE.html or FILE.json): every PE's timeline
// (pe.Config.Timeline) — entry methods, waits, the runtime's phases —
// gathered from every process onto process 0's clock and written as a
// page a person opens in a browser (tracehtml.go) or as Chrome's trace
// events, which Perfetto and chrome://tracing open.
//
// Clocks: a process's spans count from its node's timeline origin on its
// monotonic clock; the origin's wall-clock time travels with them. With
// several processes, process 0 estimates each one's wall-clock offset
// from its own over the control plane (cluster.Job.ClockOffsets: the
// reply of the shortest of 5 round trips, less its middle), and places a
// span at origin_k + start − offset_k − origin_0. On one host the offsets
// are about zero (one clock); between hosts their error is half a round
// trip.

import (
	"bufio"
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/charmgo/charmgo/manager"
	"github.com/charmgo/charmgo/pe"
	"github.com/charmgo/charmgo/pe/cluster"
	"github.com/vmihailenco/msgpack/v5"
)

// TraceSchema names the page's and the JSON's data (Chrome's trace event
// format carries it in its metadata).
const TraceSchema = "charmgo.trace/2"

// traceFormat is the trace's format from the file's name.
func traceFormat(path string) (string, error) {
	switch strings.ToLower(filepath.Ext(path)) {
	case ".html", ".htm":
		return "html", nil
	case ".json":
		return "json", nil
	}
	return "", fmt.Errorf("flag --trace %s: give FILE.html (a page to open in a browser) or FILE.json (Chrome's trace events, for Perfetto)", path)
}

// tracePart is one process's part of the trace.
type tracePart struct {
	Rank    int               `msgpack:"r"`
	FirstPE int               `msgpack:"f"`
	Host    string            `msgpack:"h"`
	Origin  int64             `msgpack:"o"` // the timelines' origin, Unix nanoseconds
	Colls   map[uint32]string `msgpack:"c"`
	Spans   [][]pe.Span       `msgpack:"s"` // by local PE
}

// localTrace is this process's part, after its run.
func localTrace(node *pe.Node, rank int) tracePart {
	first, local := node.LocalPEs()
	t := tracePart{Rank: rank, FirstPE: first, Host: hostname(), Origin: node.TimelineOrigin().UnixNano(), Colls: map[uint32]string{}, Spans: node.Timelines()}
	for i := first; i < first+local; i++ {
		for id, name := range manager.Of(node.PE(i)).CollectionNames() {
			t.Colls[id] = name
		}
	}
	return t
}

// tracePartFile is where process rank leaves its part for process 0.
func tracePartFile(path string, rank int) string { return path + ".part." + strconv.Itoa(rank) }

func writeTracePart(path string, t tracePart) error {
	b, err := msgpack.Marshal(&t)
	if err == nil {
		err = os.WriteFile(tracePartFile(path, t.Rank), b, 0o644)
	}
	if err != nil {
		return fmt.Errorf("flag --trace: this process's part: %w", err)
	}
	return nil
}

func readTracePart(path string, rank int) (tracePart, error) {
	var t tracePart
	file := tracePartFile(path, rank)
	b, err := os.ReadFile(file)
	if err == nil {
		err = pe.UnmarshalMsgpack(b, &t)
		os.Remove(file)
	}
	if err != nil {
		return t, fmt.Errorf("flag --trace: process %d's part (%s): %w (each process writes its part beside FILE: on several hosts, a file system they share)", rank, file, err)
	}
	return t, nil
}

// trace is the run's trace, every span on process 0's clock.
type trace struct {
	Program   string
	Args      []string
	Started   time.Time
	WallNs    int64
	PEs       int
	Processes []traceProc
	Colls     map[uint32]string
	Spans     [][]pe.Span // by PE, each by start; Start in ns from the run's origin
	Missing   []int       // processes whose part did not come
}

// traceProc is one process of the trace, as the page's data names it.
type traceProc struct {
	Rank     int    `json:"rank"`
	FirstPE  int    `json:"first_pe"`
	PEs      int    `json:"pes"`
	Host     string `json:"host"`
	OffsetNs int64  `json:"offset_ns"` // its clock minus process 0's
}

// mergeTrace puts the parts on part 0's clock.
func mergeTrace(cfg Config, npes int, parts []tracePart, offsets map[int]time.Duration, wall time.Duration) *trace {
	t := &trace{Program: programName(), Args: cfg.programLine(), PEs: npes, Colls: map[uint32]string{}, Spans: make([][]pe.Span, npes), WallNs: int64(wall)}
	slices.SortFunc(parts, func(a, b tracePart) int { return cmp.Compare(a.Rank, b.Rank) })
	origin := parts[0].Origin
	t.Started = time.Unix(0, origin)
	procs := max(cfg.Procs, 1)
	have := map[int]bool{}
	for _, p := range parts {
		have[p.Rank] = true
		shift := p.Origin - origin - int64(offsets[p.Rank])
		for i, spans := range p.Spans {
			for j := range spans {
				spans[j].Start += shift
			}
			slices.SortStableFunc(spans, func(a, b pe.Span) int { return cmp.Compare(a.Start, b.Start) })
			t.Spans[p.FirstPE+i] = spans
		}
		for id, name := range p.Colls {
			t.Colls[id] = name
		}
	}
	for r := range procs {
		first, count := cluster.Block(npes, procs, r)
		host := ""
		for _, p := range parts {
			if p.Rank == r {
				host = p.Host
			}
		}
		t.Processes = append(t.Processes, traceProc{Rank: r, FirstPE: first, PEs: count, Host: host, OffsetNs: int64(offsets[r])})
		if !have[r] {
			t.Missing = append(t.Missing, r)
		}
	}
	return t
}

// spanName names an entry's span: the entry method (its message type),
// or the continuation that ran in it (a Gather's, named as its method).
func spanName(s *pe.Span) string {
	if s.Cont != 0 {
		if ci, ok := continuations.Get(s.Cont); ok {
			return ci.name
		}
		return fmt.Sprintf("continuation %#x", s.Cont)
	}
	return pe.TypeName(s.Type)
}

// chare names a span's chare: its collection and index.
func (t *trace) chare(s *pe.Span) string {
	name := t.Colls[s.Coll]
	if name == "" {
		name = "collection " + strconv.FormatUint(uint64(s.Coll), 10)
	}
	if s.Coll == manager.MainCollection {
		return name
	}
	return name + s.Index.String()
}

// kindName names a message kind.
func kindName(k pe.Kind) string {
	switch k {
	case pe.KindP2P:
		return "point-to-point"
	case pe.KindMulticast:
		return "multicast"
	case pe.KindReduction:
		return "reduction"
	case pe.KindSystem:
		return "system"
	}
	return "kind " + strconv.Itoa(int(k))
}

// entryTotals is the time per entry method: count, total, longest.
type entryTotal struct {
	Name   string
	Count  int
	Total  int64
	Max    int64
	Colour int // index in the legend
}

func (t *trace) entryTotals() []entryTotal {
	idx := map[[2]uint32]int{}
	var out []entryTotal
	for _, spans := range t.Spans {
		for i := range spans {
			s := &spans[i]
			if s.Kind != pe.SpanEntry {
				continue
			}
			k, ok := idx[[2]uint32{s.Type, s.Cont}]
			if !ok {
				k = len(out)
				idx[[2]uint32{s.Type, s.Cont}] = k
				out = append(out, entryTotal{Name: spanName(s)})
			}
			e := &out[k]
			e.Count++
			e.Total += s.Dur
			e.Max = max(e.Max, s.Dur)
		}
	}
	slices.SortFunc(out, func(a, b entryTotal) int { return cmp.Or(cmp.Compare(b.Total, a.Total), cmp.Compare(a.Name, b.Name)) })
	for i := range out {
		out[i].Colour = i
	}
	return out
}

// writeTraceJSON writes Chrome's trace event format: one "process" per
// process of the job, one "thread" per PE; entries and waits as complete
// events (ph X) in microseconds, phases as complete or instant events.
func (t *trace) writeJSON(w io.Writer) error {
	type event struct {
		Name string         `json:"name"`
		Cat  string         `json:"cat,omitempty"`
		Ph   string         `json:"ph"`
		Ts   float64        `json:"ts"`
		Dur  *float64       `json:"dur,omitempty"`
		Pid  int            `json:"pid"`
		Tid  int            `json:"tid"`
		S    string         `json:"s,omitempty"`
		Args map[string]any `json:"args,omitempty"`
	}
	bw := bufio.NewWriterSize(w, 1<<20)
	io.WriteString(bw, "{\"displayTimeUnit\":\"ns\",\"otherData\":")
	missing := t.Missing
	if missing == nil {
		missing = []int{} // a list either way, for whoever reads it
	}
	meta, _ := json.Marshal(map[string]any{"schema": TraceSchema, "program": t.Program, "args": t.Args, "started": t.Started, "pes": t.PEs,
		"clock_offsets_ns": t.offsets(), "missing_processes": missing})
	bw.Write(meta)
	io.WriteString(bw, ",\"traceEvents\":[\n")
	first := true
	emit := func(e event) {
		b, _ := json.Marshal(e)
		if !first {
			io.WriteString(bw, ",\n")
		}
		first = false
		bw.Write(b)
	}
	for _, p := range t.Processes {
		emit(event{Name: "process_name", Ph: "M", Pid: p.Rank, Args: map[string]any{"name": fmt.Sprintf("process %d (%s)", p.Rank, p.Host)}})
		for q := p.FirstPE; q < p.FirstPE+p.PEs; q++ {
			emit(event{Name: "thread_name", Ph: "M", Pid: p.Rank, Tid: q, Args: map[string]any{"name": fmt.Sprintf("PE %d", q)}})
		}
	}
	procOf := func(q int) int {
		for _, p := range t.Processes {
			if q >= p.FirstPE && q < p.FirstPE+p.PEs {
				return p.Rank
			}
		}
		return 0
	}
	// entries and waits are most of a trace (10⁶ of them is a few seconds
	// of a busy run): each is appended by hand, its names quoted once
	quoted := map[string][]byte{}
	quote := func(s string) []byte {
		q, ok := quoted[s]
		if !ok {
			q, _ = json.Marshal(s)
			quoted[s] = q
		}
		return q
	}
	type chareKey struct {
		coll uint32
		idx  pe.Index
	}
	chares := map[chareKey][]byte{}
	us := func(b []byte, ns int64) []byte { return strconv.AppendFloat(b, float64(ns)/1e3, 'f', -1, 64) }
	var line []byte
	for q, spans := range t.Spans {
		pid := procOf(q)
		for i := range spans {
			s := &spans[i]
			if s.Kind == pe.SpanPhase {
				d := float64(s.Dur) / 1e3
				if s.Dur == 0 {
					emit(event{Name: s.Label, Cat: "runtime", Ph: "i", S: "t", Ts: float64(s.Start) / 1e3, Pid: pid, Tid: q})
				} else {
					emit(event{Name: s.Label, Cat: "runtime", Ph: "X", Ts: float64(s.Start) / 1e3, Dur: &d, Pid: pid, Tid: q})
				}
				continue
			}
			line = append(line[:0], ",\n{\"name\":"...)
			if s.Kind == pe.SpanEntry {
				line = append(line, quote(spanName(s))...)
				line = append(line, ",\"cat\":\"entry\""...)
			} else {
				line = append(line, "\"idle\",\"cat\":\"idle\""...)
			}
			line = append(line, ",\"ph\":\"X\",\"ts\":"...)
			line = us(line, s.Start)
			line = append(line, ",\"dur\":"...)
			line = us(line, s.Dur)
			line = append(line, ",\"pid\":"...)
			line = strconv.AppendInt(line, int64(pid), 10)
			line = append(line, ",\"tid\":"...)
			line = strconv.AppendInt(line, int64(q), 10)
			if s.Kind == pe.SpanEntry {
				k := chareKey{s.Coll, s.Index}
				c, ok := chares[k]
				if !ok {
					c, _ = json.Marshal(t.chare(s))
					chares[k] = c
				}
				line = append(line, ",\"args\":{\"bytes\":"...)
				line = strconv.AppendUint(line, uint64(s.Size), 10)
				line = append(line, ",\"chare\":"...)
				line = append(line, c...)
				line = append(line, ",\"message\":"...)
				line = append(line, quote(kindName(s.MsgKind))...)
				line = append(line, '}')
			}
			line = append(line, '}')
			if first { // the metadata comes first: there is always one
				line = line[2:]
				first = false
			}
			bw.Write(line)
		}
	}
	io.WriteString(bw, "\n]}\n")
	return bw.Flush()
}

func (t *trace) offsets() map[string]int64 {
	out := map[string]int64{}
	for _, p := range t.Processes {
		out[strconv.Itoa(p.Rank)] = p.OffsetNs
	}
	return out
}

// writeTraceFile writes the trace to path, whole or not at all.
func writeTraceFile(path string, t *trace) error {
	format, err := traceFormat(path)
	if err != nil {
		return err
	}
	write := t.writeHTML
	if format == "json" {
		write = t.writeJSON
	}
	return writeWhole(path, "--trace", write)
}
