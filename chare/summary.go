package chare

// A run's summary: what the runtime saw (layout, wall time, steps, traffic
// by kind, each PE's utilisation, load balancing, fault tolerance,
// checkpoints) and what the program reported (Report), as data. Main
// prints it; --summary-json writes it.

import (
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/charmgo/charmgo/internal/atomicfile"

	"github.com/charmgo/charmgo/ftlayer"
	"github.com/charmgo/charmgo/pe"
)

// SummarySchema names the summary's JSON form (Summary): a reader checks
// it. A field added keeps the number; a field that changes its meaning or
// goes away takes the next (2: load_balancing's keys in snake case, as
// the rest; args with the program's own flags; the steps' figures
// without the last step, which has no end).
const SummarySchema = "charmgo.summary/2"

// Summary is a run as data (the process of PE 0 makes it: Result.Summary).
// Its JSON form (--summary-json FILE, schema SummarySchema) names every
// field in snake case; times are in seconds or milliseconds as the names
// say; counts are whole numbers.
type Summary struct {
	Schema  string   `json:"schema"`
	Program string   `json:"program"`
	Args    []string `json:"args"` // the program's own flags and arguments (the runtime's flags taken out)
	// ExitCode and Error are how the run ended.
	ExitCode int    `json:"exit_code"`
	Error    string `json:"error,omitempty"`
	// Started is when the run began (this process's clock); WallSeconds
	// how long it took, from the start of its PEs to their end.
	Started     time.Time     `json:"started"`
	WallSeconds float64       `json:"wall_seconds"`
	Layout      SummaryLayout `json:"layout"`
	// Steps: the steps the program declared (AtStep), if any.
	Steps    *SummarySteps   `json:"steps,omitempty"`
	Messages SummaryMessages `json:"messages"`
	PEs      []SummaryPE     `json:"pes"`
	// LoadBalancing is what the balancer did (absent without one).
	LoadBalancing  *LBStats          `json:"load_balancing,omitempty"`
	FaultTolerance SummaryFT         `json:"fault_tolerance"`
	Checkpoints    SummaryCheckpoint `json:"checkpoints"`
	// Results are what the program reported (Report), in order.
	Results []SummaryResult `json:"results,omitempty"`
}

// SummaryLayout is how the PEs were spread.
type SummaryLayout struct {
	PEs       int              `json:"pes"`
	Processes []SummaryProcess `json:"processes"`
}

// SummaryProcess is one process of the job.
type SummaryProcess struct {
	Rank    int    `json:"rank"`
	FirstPE int    `json:"first_pe"`
	PEs     int    `json:"pes"`
	Host    string `json:"host"`
	// Cost: what the process held and exchanged to be in the job (a job
	// of one process: its peak memory and run time alone)
	Cost ProcessCost `json:"cost"`
}

// SummarySteps is the steps the program began (AtStep): from First to
// Last, and the time from each step's beginning to the next's, as the run
// went in the end (a step a recovery ran again counts as it ran the last
// time). The last step has no next: its time is left out (to the end of
// the run it would count what the program does after its steps, a serial
// check of the result), unless it is the only one. Timed is how many
// steps the figures cover.
type SummarySteps struct {
	First        int     `json:"first"`
	Last         int     `json:"last"`
	Count        int     `json:"count"`
	Timed        int     `json:"timed"`
	MeanMs       float64 `json:"mean_ms"`
	MedianMs     float64 `json:"median_ms"`
	MinMs, MaxMs float64 `json:"-"`
}

// SummaryMessages is what the program sent, by kind, with payload bytes,
// and what every PE sent in all (the runtime's own messages included).
type SummaryMessages struct {
	P2P        SummaryCount `json:"p2p"`
	Multicasts SummaryCount `json:"multicasts"`
	// Deliveries are multicast deliveries to members; Forwarded those
	// passed on from a PE the member had left.
	Deliveries    uint64       `json:"deliveries"`
	Forwarded     uint64       `json:"forwarded_deliveries"`
	Contributions SummaryCount `json:"contributions"`
	Broadcasts    SummaryCount `json:"broadcasts"`
	// Envelopes is what the PEs sent in all, the runtime's own included.
	Envelopes uint64 `json:"envelopes"`
}

// SummaryCount is a number of messages and their payload bytes.
type SummaryCount struct {
	Count uint64 `json:"count"`
	Bytes uint64 `json:"bytes"`
}

// SummaryPE is one PE's part.
type SummaryPE struct {
	PE int `json:"pe"`
	// Utilisation is the share of the run the PE was busy (not parked
	// waiting for messages; a PE polling for them, --spin, counts as
	// busy), sampled every 5 ms (Samples looks); -1 where nobody looked
	// (a deterministic run, or one too short for a look).
	Utilisation float64 `json:"utilisation"`
	Samples     uint64  `json:"samples"`
	Handled     uint64  `json:"handled"` // envelopes dispatched
	Sent        uint64  `json:"sent"`    // envelopes sent
	// SentBytes is the payload bytes the PE's chares sent (sends,
	// multicasts, contributions, broadcasts: what the program asked for);
	// LogPeakBytes is the most the PE's message log held at once, and
	// LogAtCheckpointBytes the sum over kinds of the largest its
	// snapshots found.
	SentBytes            uint64 `json:"sent_bytes"`
	LogPeakBytes         uint64 `json:"log_peak_bytes"`
	LogAtCheckpointBytes uint64 `json:"log_at_checkpoint_bytes"`
}

// SummaryFT is what fault tolerance did.
type SummaryFT struct {
	Protocol      string            `json:"protocol"`
	Failures      int               `json:"failures"`
	PEsRolledBack int               `json:"pes_rolled_back"`
	RecoveryMs    float64           `json:"recovery_ms"`
	CaughtUpMs    float64           `json:"caught_up_ms"`
	Restored      []uint64          `json:"restored_checkpoints,omitempty"`
	Recoveries    []SummaryRecovery `json:"recoveries,omitempty"`
	// Logged is what message logging logged (all zero without it).
	Logged SummaryCount `json:"logged"`
	// PeakLogPerPE and LogAtCheckpointPerPE are bytes of log per PE, by
	// the kind of message logged: the sums over the PEs of each one's
	// peak, and of the largest log a snapshot found, divided by the PEs.
	PeakLogPerPE         SummaryKinds `json:"peak_log_per_pe_bytes"`
	LogAtCheckpointPerPE SummaryKinds `json:"log_at_checkpoint_per_pe_bytes"`
	DetsCreated          uint64       `json:"determinants_created"`
	DetsPiggybacked      uint64       `json:"determinants_piggybacked"`
	Replayed             uint64       `json:"replayed"`
	// Named (spmd): messages to other teams, named instead of carrying
	// determinants, and their FT headers' bytes on the wire; OrphansAgain:
	// copies of orphans a re-execution sent again, dropped
	Named        uint64        `json:"named,omitempty"`
	NameBytes    uint64        `json:"name_bytes,omitempty"`
	OrphansAgain uint64        `json:"orphans_again,omitempty"`
	Teams        []SummaryTeam `json:"teams,omitempty"`
	// LogLimit is what a log limit (--log-limit: MCML) did.
	LogLimit *SummaryLogLimit `json:"log_limit,omitempty"`
	// Events is what the pessimist protocol's event logger was given.
	Events *SummaryEvents `json:"events,omitempty"`
	// Verified is, under --ft-verify, how many messages recovered PEs
	// sent again that were compared with what they sent the first time
	// (all alike: a difference ends the run).
	Verified *uint64 `json:"verified_copies,omitempty"`
}

// SummaryEvents is the refined event model at work (--ft pessimist):
// the deliveries the PEs made, how many were events (a delivery from
// another PE than the delivery before it), the commits to the event
// logger (one before a send to another PE that follows deliveries not
// committed yet) and the events they carried (less than the events when
// recovering PEs replayed what the log held), the sends after new
// deliveries that needed no commit (their destination sent every one of
// them, and holds the count), and the same by entry method or system
// message, most delivered first.
type SummaryEvents struct {
	Deliveries      uint64              `json:"deliveries"`
	Events          uint64              `json:"events"`
	Commits         uint64              `json:"commits"`
	EventsCommitted uint64              `json:"events_committed"`
	CommitsSpared   uint64              `json:"commits_spared"`
	ByEntry         []SummaryEntryEvent `json:"by_entry"`
}

// SummaryEntryEvent is one entry method's (or system message's) share.
type SummaryEntryEvent struct {
	Entry      string `json:"entry"`
	Deliveries uint64 `json:"deliveries"`
	Events     uint64 `json:"events"`
}

// SummaryLogLimit is what a bound on each PE's log did: the bound, the
// strategy, the channels turned off (counted again after each
// checkpoint, which turns them on), the messages sent on them unlogged,
// the sends that found a log over the bound and could not bring it under
// (nothing left to turn off, or not while a recovery or a checkpoint was
// under way), and the largest peak of one PE's log.
type SummaryLogLimit struct {
	Bytes         uint64       `json:"bytes"`
	Strategy      string       `json:"strategy"`
	ChannelsOff   uint64       `json:"channels_turned_off"`
	Unlogged      SummaryCount `json:"unlogged"`
	OverLimit     uint64       `json:"sends_over_limit"`
	LargestPeakPE uint64       `json:"largest_pe_peak_bytes"`
	// ExpectedSet and ExpectedChain are the rollback set (PEs) and chain
	// a failure of a PE would have had, on average over every PE at every
	// step (runs of up to 128 PEs); LargestSet the largest of them.
	ExpectedSet   float64 `json:"expected_rollback_set"`
	ExpectedChain float64 `json:"expected_rollback_chain"`
	LargestSet    int     `json:"largest_rollback_set"`
	// Reclustered counts, summed over the PEs, the dendrograms of the
	// traffic measured that the cluster strategy was given.
	Reclustered uint64 `json:"reclustered,omitempty"`
}

// SummaryKinds is a figure by the kind of message: point to point,
// multicast, reduction, the runtime's own (system), and their sum.
type SummaryKinds struct {
	P2P       uint64 `json:"p2p"`
	Multicast uint64 `json:"multicast"`
	Reduction uint64 `json:"reduction"`
	System    uint64 `json:"system"`
	Total     uint64 `json:"total"`
}

func kinds(l ftlayer.Stats, f func(ftlayer.LogStats) uint64, per uint64) SummaryKinds {
	k := SummaryKinds{P2P: f(l.Log[ftlayer.KindP2P]) / per, Multicast: f(l.Log[ftlayer.KindMulticast]) / per,
		Reduction: f(l.Log[ftlayer.KindReduction]) / per, System: f(l.Log[ftlayer.KindSystem]) / per}
	k.Total = l.Total(f) / per
	return k
}

// SummaryRecovery is one recovery.
type SummaryRecovery struct {
	Failures   int     `json:"failures"`
	PEs        int     `json:"pes_rolled_back"`
	RecoveryMs float64 `json:"recovery_ms"`
	// Set is the PEs a recovery alone rolled back (none for a global
	// rollback) and Chain the longest chain of channels not logged that
	// brought a PE into it (a log limit).
	Set   []int32 `json:"rollback_set,omitempty"`
	Chain int     `json:"rollback_chain,omitempty"`
	// What the restarted PEs of a recovery alone said as they caught up:
	// the logged messages the survivors sent them again (by the
	// survivors' count), the copies they dropped, the messages they held
	// for their turn, the most survivors one of them heard from, and when
	// each caught up.
	Replayed  uint64            `json:"replayed,omitempty"`
	Dropped   uint64            `json:"dropped,omitempty"`
	Held      uint64            `json:"held,omitempty"`
	Survivors int               `json:"survivors,omitempty"`
	CaughtUp  []SummaryCaughtUp `json:"caught_up,omitempty"`
	// Orphans (spmd): the messages the survivors had from the failed
	// incarnations that the re-execution made again (their copies
	// skipped)
	Orphans uint64 `json:"orphans_made_again,omitempty"`
	// Again (spmd): the PEs still recovering from an earlier failure
	// when this one struck, which restarted again with it
	Again []int32 `json:"restarted_again,omitempty"`
	// Merged (spmd): the PEs that had recovered together with the failed
	// team since the last checkpoint, which restarted with it
	Merged []int32 `json:"restarted_merged,omitempty"`
	// QueuedMs: how long the failed PEs stayed down, the failure queued
	// behind a recovery under way, before their own recovery began
	// (counted in RecoveryMs)
	QueuedMs float64 `json:"queued_ms,omitempty"`
}

// SummaryCaughtUp says when a restarted PE caught up, after the failure.
type SummaryCaughtUp struct {
	PE int32   `json:"pe"`
	Ms float64 `json:"ms"`
}

// SummaryTeam is one team's logging: what it sent other teams (logged)
// and what its PEs sent each other (not logged), messages and bytes by
// kind.
type SummaryTeam struct {
	PEs            []int32      `json:"pes"`
	LoggedMsgs     SummaryKinds `json:"logged_messages"`
	LoggedBytes    SummaryKinds `json:"logged_bytes"`
	NotLoggedMsgs  SummaryKinds `json:"not_logged_messages"`
	NotLoggedBytes SummaryKinds `json:"not_logged_bytes"`
}

// SummaryCheckpoint is the coordinated checkpoints committed.
type SummaryCheckpoint struct {
	Count     uint64  `json:"count"`
	BytesEach uint64  `json:"bytes_each"`
	MsEach    float64 `json:"ms_each"`
}

// SummaryResult is one value the program reported (Report).
type SummaryResult struct {
	Name  string          `json:"name"`
	Value json.RawMessage `json:"value"`
}

// Report records a result of the program's for the run's summary (name
// and value, in its text and its JSON): what the program computed
// (energies, a residual) or measured. value must encode as JSON. Any
// entry method may call it, on any PE or process; a name reported again
// keeps its last value.
func Report(ctx *Ctx, name string, value any) {
	b, err := json.Marshal(value)
	if err != nil {
		ctx.Fail(fmt.Errorf("chare.Report %q: %v does not encode as JSON: %w", name, value, err))
		return
	}
	hostOf(ctx.m).run.record.report(name, b)
}

// runRecord is what the chare layer gathers for the summary as the run
// goes, from any PE's goroutine.
type runRecord struct {
	mu      sync.Mutex
	steps   map[int]int64 // step -> when it last began (Unix nanoseconds)
	results []SummaryResult
}

func (r *runRecord) step(s int) {
	r.mu.Lock()
	if r.steps == nil {
		r.steps = map[int]int64{}
	}
	r.steps[s] = time.Now().UnixNano()
	r.mu.Unlock()
}

func (r *runRecord) report(name string, v json.RawMessage) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if i := slices.IndexFunc(r.results, func(x SummaryResult) bool { return x.Name == name }); i >= 0 {
		r.results[i].Value = v
		return
	}
	r.results = append(r.results, SummaryResult{Name: name, Value: v})
}

// stepTime is when a step began, for the summary (between processes).
type stepTime struct {
	Step int   `msgpack:"s"`
	At   int64 `msgpack:"t"`
}

func (r *runRecord) stepTimes() []stepTime {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]stepTime, 0, len(r.steps))
	for s, at := range r.steps {
		out = append(out, stepTime{s, at})
	}
	return out
}

func (r *runRecord) reported() []SummaryResult {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.results)
}

// summarize makes the run's summary from the processes' results (process
// 0), ended at end.
func summarize(cfg Config, res *Result, results []processResult, started, end time.Time) *Summary {
	s := &Summary{Schema: SummarySchema, Program: programName(), Args: cfg.programLine(), ExitCode: res.Code,
		Started: started, WallSeconds: end.Sub(started).Seconds(), LoadBalancing: res.Stats.LB}
	if s.Args == nil {
		s.Args = []string{}
	}
	if res.Err != nil {
		s.Error = res.Err.Error()
	}
	s.Layout.PEs = len(res.Stats.PEs)
	for _, p := range res.Processes {
		s.Layout.Processes = append(s.Layout.Processes, SummaryProcess{Rank: p.Rank, FirstPE: p.FirstPE, PEs: p.PEs, Host: p.Host, Cost: p.Cost})
	}
	usage := make([]pe.Usage, len(res.Stats.PEs))
	steps := map[int]int64{}
	for _, pr := range results {
		if pr.First+len(pr.Usage) <= len(usage) {
			copy(usage[pr.First:], pr.Usage)
		}
		for _, st := range pr.Steps {
			steps[st.Step] = max(steps[st.Step], st.At)
		}
		for _, r := range pr.Results {
			if i := slices.IndexFunc(s.Results, func(x SummaryResult) bool { return x.Name == r.Name }); i >= 0 {
				s.Results[i] = r
			} else {
				s.Results = append(s.Results, r)
			}
		}
	}
	s.Steps = stepSummary(steps, end)
	o := res.Stats.Ops
	s.Messages = SummaryMessages{P2P: SummaryCount{o.P2P, o.P2PBytes}, Multicasts: SummaryCount{o.Multicasts, o.MulticastBytes},
		Deliveries: o.Deliveries, Forwarded: o.ForwardedDeliveries, Contributions: SummaryCount{o.Contributions, o.ReductionBytes},
		Broadcasts: SummaryCount{o.Broadcasts, o.BroadcastBytes}}
	for i, st := range res.Stats.PEs {
		var sent uint64
		for _, k := range st.Sent {
			sent += k
		}
		s.Messages.Envelopes += sent
		p := SummaryPE{PE: i, Utilisation: -1, Samples: usage[i].Samples, Handled: st.Processed, Sent: sent}
		if i < len(res.Stats.PEOps) {
			o := res.Stats.PEOps[i]
			p.SentBytes = o.P2PBytes + o.MulticastBytes + o.ReductionBytes + o.BroadcastBytes
		}
		if l := res.Stats.FT.PELog; i < len(l) {
			p.LogPeakBytes = l[i].PeakTotal
			for _, k := range l[i].Log {
				p.LogAtCheckpointBytes += k.AtCheckpointBytes
			}
		}
		if usage[i].Samples > 0 {
			p.Utilisation = usage[i].Utilisation()
		}
		s.PEs = append(s.PEs, p)
	}
	ft := res.Stats.FT
	l := ft.Log
	n := uint64(max(len(res.Stats.PEs), 1))
	s.FaultTolerance = SummaryFT{Protocol: ft.Protocol, Failures: ft.Failures, PEsRolledBack: ft.PEsRolledBack,
		RecoveryMs: ms(ft.Recovery), CaughtUpMs: ms(ft.CaughtUp), Restored: ft.Restored,
		Logged:       SummaryCount{l.LoggedTotal(), l.LoggedTotalBytes()},
		PeakLogPerPE: kinds(l, func(x ftlayer.LogStats) uint64 { return x.PeakBytes }, n), LogAtCheckpointPerPE: kinds(l, func(x ftlayer.LogStats) uint64 { return x.AtCheckpointBytes }, n),
		DetsCreated: l.DetsCreated, DetsPiggybacked: l.DetsPiggybacked, Replayed: l.Replayed,
		Named: l.Named, NameBytes: l.NameBytes, OrphansAgain: l.OrphansAgain}
	if s.FaultTolerance.Protocol == "" {
		s.FaultTolerance.Protocol = cmp.Or(cfg.FT, "none")
	}
	for _, rc := range ft.Recoveries {
		sr := SummaryRecovery{Failures: rc.Failures, PEs: rc.PEs, RecoveryMs: ms(rc.Recovery), Set: rc.Set, Chain: rc.Chain,
			Replayed: rc.Replayed, Dropped: rc.Dropped, Held: rc.Held, Survivors: rc.Survivors, Orphans: rc.Orphans, Again: rc.Again, Merged: rc.Merged, QueuedMs: ms(rc.Queued)}
		for _, c := range rc.CaughtUp {
			sr.CaughtUp = append(sr.CaughtUp, SummaryCaughtUp{PE: c.PE, Ms: ms(c.After)})
		}
		s.FaultTolerance.Recoveries = append(s.FaultTolerance.Recoveries, sr)
	}
	if cfg.LogLimit > 0 {
		ll := &SummaryLogLimit{Bytes: cfg.LogLimit, Strategy: cmp.Or(cfg.LogLimitStrategy, "heaviest"), ChannelsOff: l.ChannelsOff,
			Unlogged: SummaryCount{l.Unlogged.TotalMsgs, l.Unlogged.TotalBytes}, OverLimit: l.OverLimit,
			ExpectedSet: ft.Expected.MeanSet, ExpectedChain: ft.Expected.MeanChain, LargestSet: ft.Expected.MaxSet, Reclustered: l.Reclustered}
		for _, p := range s.PEs {
			ll.LargestPeakPE = max(ll.LargestPeakPE, p.LogPeakBytes)
		}
		s.FaultTolerance.LogLimit = ll
	}
	if cfg.FTVerify {
		v := o.Verified
		s.FaultTolerance.Verified = &v
	}
	if l.Deliveries > 0 {
		ev := &SummaryEvents{Deliveries: l.Deliveries, Events: l.Events, Commits: l.Commits, EventsCommitted: l.EventsCommitted, CommitsSpared: l.CommitsSpared}
		for _, e := range l.Entries {
			ev.ByEntry = append(ev.ByEntry, SummaryEntryEvent{Entry: pe.TypeName(e.Type), Deliveries: e.Deliveries, Events: e.Events})
		}
		slices.SortStableFunc(ev.ByEntry, func(a, b SummaryEntryEvent) int { return cmp.Compare(b.Deliveries, a.Deliveries) })
		s.FaultTolerance.Events = ev
	}
	for _, t := range ft.Teams {
		msgs := func(x ftlayer.LogStats) uint64 { return x.TotalMsgs }
		bytes := func(x ftlayer.LogStats) uint64 { return x.TotalBytes }
		not := ftlayer.Stats{Log: t.Log.NotLogged}
		s.FaultTolerance.Teams = append(s.FaultTolerance.Teams, SummaryTeam{PEs: t.PEs,
			LoggedMsgs: kinds(t.Log, msgs, 1), LoggedBytes: kinds(t.Log, bytes, 1), NotLoggedMsgs: kinds(not, msgs, 1), NotLoggedBytes: kinds(not, bytes, 1)})
	}
	if o.Checkpoints > 0 {
		s.Checkpoints = SummaryCheckpoint{Count: o.Checkpoints, BytesEach: o.CheckpointBytes / o.Checkpoints,
			MsEach: float64(o.CheckpointNanos) / 1e6 / float64(o.Checkpoints)}
	}
	return s
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1e3 }

// stepSummary is the steps from when each began (nil if none did).
func stepSummary(steps map[int]int64, end time.Time) *SummarySteps {
	if len(steps) == 0 {
		return nil
	}
	keys := slices.Sorted(maps.Keys(steps))
	var d []float64
	for i, k := range keys[:max(len(keys)-1, 1)] {
		next := end.UnixNano() // the only step: to the end of the run
		if i+1 < len(keys) {
			next = steps[keys[i+1]]
		}
		d = append(d, float64(next-steps[k])/1e6)
	}
	s := &SummarySteps{First: keys[0], Last: keys[len(keys)-1], Count: len(keys), Timed: len(d)}
	for _, v := range d {
		s.MeanMs += v
	}
	s.MeanMs /= float64(len(d))
	slices.Sort(d)
	s.MinMs, s.MaxMs = d[0], d[len(d)-1]
	s.MedianMs = d[len(d)/2]
	if len(d)%2 == 0 {
		s.MedianMs = (d[len(d)/2-1] + d[len(d)/2]) / 2
	}
	return s
}

func programName() string {
	if len(os.Args) == 0 {
		return ""
	}
	name := os.Args[0]
	if i := strings.LastIndexByte(name, '/'); i >= 0 {
		name = name[i+1:]
	}
	return name
}

// WriteJSON writes the summary as JSON (schema SummarySchema).
func (s *Summary) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(s)
}

// WriteText writes the summary as Main prints it: a heading, the layout,
// the wall time and the steps, then WriteRuntime's lines and the
// program's results.
func (s *Summary) WriteText(w io.Writer) {
	fmt.Fprintf(w, "\nSummary\n")
	fmt.Fprintf(w, "  %s, %.3f s\n", s.layoutLine(), s.WallSeconds)
	if st := s.Steps; st != nil {
		timed := ""
		if st.Timed < st.Count {
			timed = fmt.Sprintf(" (of %d..%d: the last step has no end)", st.First, st.Last-1)
		}
		fmt.Fprintf(w, "  steps %d..%d: time per step%s: mean %.3f ms, median %.3f ms\n", st.First, st.Last, timed, st.MeanMs, st.MedianMs)
	}
	s.WriteRuntime(w)
	for _, r := range s.Results {
		fmt.Fprintf(w, "  %s: %s\n", r.Name, r.Value)
	}
}

func (s *Summary) layoutLine() string {
	if len(s.Layout.Processes) <= 1 {
		return fmt.Sprintf("%d PEs in one process", s.Layout.PEs)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%d PEs in %d processes:", s.Layout.PEs, len(s.Layout.Processes))
	for i, p := range s.Layout.Processes {
		if i > 0 {
			b.WriteString(",")
		}
		fmt.Fprintf(&b, " %d (%d..%d) on %s", p.PEs, p.FirstPE, p.FirstPE+p.PEs-1, p.Host)
	}
	return b.String()
}

// processesLine says, for a job of several processes, what each held and
// exchanged to be in it: peak memory (min / median / max), data links,
// heartbeats sent a second, and the most control messages one process
// sent and received ("" in one process).
func (s *Summary) processesLine() string {
	ps := s.Layout.Processes
	if len(ps) <= 1 {
		return ""
	}
	mem := make([]float64, len(ps))
	links := make([]int, len(ps))
	beats := make([]float64, len(ps))
	most, mostAt := uint64(0), 0
	for i, p := range ps {
		mem[i] = float64(p.Cost.PeakRSSBytes) / (1 << 20)
		links[i] = p.Cost.DataLinks
		if p.Cost.Seconds > 0 {
			beats[i] = float64(p.Cost.HeartbeatsSent) / p.Cost.Seconds
		}
		if c := p.Cost.ControlSent + p.Cost.ControlReceived; c > most {
			most, mostAt = c, p.Rank
		}
	}
	slices.Sort(mem)
	slices.Sort(links)
	slices.Sort(beats)
	return fmt.Sprintf("peak memory %.0f / %.0f / %.0f MB (min / median / max), %d–%d data links each, %.1f–%.1f heartbeats sent a second each, %d control messages at most (process %d)",
		mem[0], mem[len(mem)/2], mem[len(mem)-1], links[0], links[len(links)-1], beats[0], beats[len(beats)-1], most, mostAt)
}

// WriteRuntime writes the lines of the summary that every program shares:
// utilisation, traffic by kind, load balancing, fault tolerance and
// checkpoints (a program that prints its own heading and results, as
// LeanMD does, writes these between them).
func (s *Summary) WriteRuntime(w io.Writer) {
	if u := s.utilisationLine(); u != "" {
		fmt.Fprintf(w, "  PE utilisation: %s\n", u)
	}
	if p := s.processesLine(); p != "" {
		fmt.Fprintf(w, "  processes:      %s\n", p)
	}
	m := s.Messages
	fmt.Fprintf(w, "  point-to-point: %d messages, %d bytes\n", m.P2P.Count, m.P2P.Bytes)
	fmt.Fprintf(w, "  multicast:      %d multicasts (%d bytes), %d deliveries (%d forwarded: the member had left)\n", m.Multicasts.Count, m.Multicasts.Bytes, m.Deliveries, m.Forwarded)
	fmt.Fprintf(w, "  reduction:      %d contributions, %d bytes\n", m.Contributions.Count, m.Contributions.Bytes)
	if m.Broadcasts.Count > 0 {
		fmt.Fprintf(w, "  broadcast:      %d broadcasts, %d bytes\n", m.Broadcasts.Count, m.Broadcasts.Bytes)
	}
	if lb := s.LoadBalancing; lb != nil {
		fmt.Fprintf(w, "  %s\n", lb)
	}
	ft := s.FaultTolerance
	if ft.Failures > 0 {
		fmt.Fprintf(w, "  fault tolerance: %s, %d failures, %d PEs rolled back, recovery %.1f ms, caught up after %.1f ms, back to checkpoints %v\n",
			ft.Protocol, ft.Failures, ft.PEsRolledBack, ft.RecoveryMs, ft.CaughtUpMs, ft.Restored)
	}
	if len(ft.Recoveries) > 0 {
		fmt.Fprintf(w, "  recoveries:    ")
		for i, rc := range ft.Recoveries {
			sep := ";"
			if i == len(ft.Recoveries)-1 {
				sep = "\n"
			}
			set := ""
			if len(rc.Set) > 0 {
				set = " " + ftlayer.PEList(rc.Set)
				if rc.Chain > 0 {
					set += fmt.Sprintf(" (chain %d)", rc.Chain)
				}
				if len(rc.Again) > 0 {
					set += fmt.Sprintf(" (%s recovering still, again)", ftlayer.PEList(rc.Again))
				}
				if len(rc.Merged) > 0 {
					set += fmt.Sprintf(" (%s recovered with it since the checkpoint)", ftlayer.PEList(rc.Merged))
				}
				if rc.QueuedMs > 0 {
					set += fmt.Sprintf(" (down %.1f ms, queued behind the recovery before)", rc.QueuedMs)
				}
			}
			replay := ""
			if rc.Survivors > 0 {
				replay = fmt.Sprintf(" (%d survivors sent %d logged messages again; %d copies dropped, %d held for their turn", rc.Survivors, rc.Replayed, rc.Dropped, rc.Held)
				if rc.Orphans > 0 {
					replay += fmt.Sprintf("; %d orphans made again, skipped by the survivors", rc.Orphans)
				}
				replay += ")"
			}
			fmt.Fprintf(w, " %d failure(s), %d PEs rolled back%s, %.1f ms%s%s", rc.Failures, rc.PEs, set, rc.RecoveryMs, replay, sep)
		}
	}
	if ll := ft.LogLimit; ll != nil {
		fmt.Fprintf(w, "  log limit:      %d bytes a PE (%s): %d channels turned off, %d messages (%d bytes) sent on them unlogged, %d sends over the limit; largest PE peak %d bytes\n",
			ll.Bytes, ll.Strategy, ll.ChannelsOff, ll.Unlogged.Count, ll.Unlogged.Bytes, ll.OverLimit, ll.LargestPeakPE)
		if ll.ExpectedSet > 0 {
			fmt.Fprintf(w, "  a failure would have rolled back %.2f PEs on average (%.0f%%; chain %.2f), at most %d, over every PE at every step\n",
				ll.ExpectedSet, 100*ll.ExpectedSet/float64(max(len(s.PEs), 1)), ll.ExpectedChain, ll.LargestSet)
		}
	}
	if v := ft.Verified; v != nil {
		fmt.Fprintf(w, "  --ft-verify:    %d messages recovered PEs sent again, each as their first execution did\n", *v)
	}
	if ev := ft.Events; ev != nil {
		fmt.Fprintf(w, "  events:         %d deliveries, %d of them events (%.1f%%), %d commits to the event logger carrying %d; %d sends needed none\n",
			ev.Deliveries, ev.Events, 100*float64(ev.Events)/float64(ev.Deliveries), ev.Commits, ev.EventsCommitted, ev.CommitsSpared)
		var parts []string
		for i, e := range ev.ByEntry {
			if i == 6 {
				parts = append(parts, fmt.Sprintf("%d more", len(ev.ByEntry)-i))
				break
			}
			parts = append(parts, fmt.Sprintf("%s %d of %d", e.Entry, e.Events, e.Deliveries))
		}
		fmt.Fprintf(w, "  events by entry: %s\n", strings.Join(parts, ", "))
	}
	for _, t := range ft.Teams {
		fmt.Fprintf(w, "  team %s: logged %s; not logged (inside the team) %s\n", ftlayer.PEList(t.PEs), byKind(t.LoggedMsgs, t.LoggedBytes), byKind(t.NotLoggedMsgs, t.NotLoggedBytes))
	}
	if ft.Logged.Count > 0 {
		p, n := ft.PeakLogPerPE, len(s.PEs)
		fmt.Fprintf(w, "  message log (%s): peak per PE %d bytes (p2p %d, multicast %d, reduction %d, system %d; sums of the PEs' peaks / %d)\n",
			ft.Protocol, p.Total, p.P2P, p.Multicast, p.Reduction, p.System, n)
		if c := ft.LogAtCheckpointPerPE; c.Total > 0 {
			fmt.Fprintf(w, "  log at a checkpoint (%s): per PE %d bytes (p2p %d, multicast %d, reduction %d, system %d; the largest each PE's snapshot found, summed / %d)\n",
				ft.Protocol, c.Total, c.P2P, c.Multicast, c.Reduction, c.System, n)
		}
		fmt.Fprintf(w, "  logged in all:  %d messages, %d bytes; determinants %d created, %d piggybacked; %d messages replayed\n",
			ft.Logged.Count, ft.Logged.Bytes, ft.DetsCreated, ft.DetsPiggybacked, ft.Replayed)
		if ft.Named > 0 {
			fmt.Fprintf(w, "  names (%s):     %d messages to other teams named, %.1f header bytes each on the wire; %d orphans sent again and dropped\n",
				ft.Protocol, ft.Named, float64(ft.NameBytes)/float64(ft.Named), ft.OrphansAgain)
		}
	}
	if line := s.perPELine(); line != "" {
		fmt.Fprintf(w, "  per PE (max/mean): %s\n", line)
	}
	if c := s.Checkpoints; c.Count > 0 {
		fmt.Fprintf(w, "  checkpoints:    %d, %d bytes each (every PE's snapshot, held twice), %.1f ms each\n", c.Count, c.BytesEach, c.MsEach)
	}
}

// perPELine is how unequal the PEs' sent bytes and logs are: the
// largest over the mean, and which PE has it ("" for one PE).
func (s *Summary) perPELine() string {
	if len(s.PEs) < 2 {
		return ""
	}
	var parts []string
	for _, f := range []struct {
		name string
		of   func(SummaryPE) uint64
	}{
		{"bytes sent", func(p SummaryPE) uint64 { return p.SentBytes }},
		{"log peak", func(p SummaryPE) uint64 { return p.LogPeakBytes }},
		{"log at a checkpoint", func(p SummaryPE) uint64 { return p.LogAtCheckpointBytes }},
	} {
		if r, at, ok := imbalance(s.PEs, f.of); ok {
			parts = append(parts, fmt.Sprintf("%s %.2f (PE %d)", f.name, r, at))
		}
	}
	return strings.Join(parts, ", ")
}

// imbalance is the largest of the PEs' figures over their mean, and the
// PE that has it (ok false when every figure is 0).
func imbalance(pes []SummaryPE, of func(SummaryPE) uint64) (ratio float64, at int, ok bool) {
	var sum, top uint64
	for _, p := range pes {
		v := of(p)
		sum += v
		if v > top {
			top, at = v, p.PE
		}
	}
	if sum == 0 {
		return 0, 0, false
	}
	return float64(top) * float64(len(pes)) / float64(sum), at, true
}

// byKind writes messages and bytes of the four kinds and their sum.
func byKind(msgs, bytes SummaryKinds) string {
	return fmt.Sprintf("%d messages, %d bytes (p2p %d/%d, multicast %d/%d, reduction %d/%d, system %d/%d)",
		msgs.Total, bytes.Total, msgs.P2P, bytes.P2P, msgs.Multicast, bytes.Multicast, msgs.Reduction, bytes.Reduction, msgs.System, bytes.System)
}

// utilisationLine is the PEs' utilisation: mean, lowest, highest, each.
func (s *Summary) utilisationLine() string {
	var sum float64
	lo, hi := -1, -1
	var each []string
	for i, p := range s.PEs {
		if p.Utilisation < 0 {
			return ""
		}
		sum += p.Utilisation
		if lo < 0 || p.Utilisation < s.PEs[lo].Utilisation {
			lo = i
		}
		if hi < 0 || p.Utilisation > s.PEs[hi].Utilisation {
			hi = i
		}
		each = append(each, fmt.Sprintf("%.0f", 100*p.Utilisation))
	}
	if lo < 0 {
		return ""
	}
	line := fmt.Sprintf("mean %.0f%%, lowest %.0f%% (PE %d), highest %.0f%% (PE %d)", 100*sum/float64(len(s.PEs)), 100*s.PEs[lo].Utilisation, lo, 100*s.PEs[hi].Utilisation, hi)
	if len(each) <= 64 {
		line += "; by PE: " + strings.Join(each, " ")
	}
	if n := s.PEs[0].Samples; n < 20 {
		line += fmt.Sprintf(" (from %d looks, one every 5 ms: a short run)", n)
	}
	return line
}

// writeSummaryFile writes s as JSON to path, whole or not at all.
func writeSummaryFile(path string, s *Summary) error {
	return writeWhole(path, "--summary-json", s.WriteJSON)
}

// writeWhole writes a file a flag names through a temporary file renamed
// over it: a reader never sees half of one. Errors name the flag and path.
func writeWhole(path, flag string, write func(io.Writer) error) error {
	if err := atomicfile.Write(path, 0o644, false, write); err != nil {
		return fmt.Errorf("flag %s %s: %w", flag, path, err)
	}
	return nil
}
