package chare

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/pprof"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/charmgo/charmgo/manager"
	"github.com/charmgo/charmgo/pe"
)

// The watchdog ends a run that stops making progress — no PE of the job
// ran an entry method of the program (a constructor, an entry, a future's
// continuation, ResumeFromSync) for the watchdog's limit, while the run is
// not over — with exit code 3 and a dump of every PE: its queues, what
// its reductions, sections and broadcasts wait for (naming missing
// contributors), quiescence detection, checkpoints, recovery and the
// fault-tolerance hook. SIGQUIT prints the same dump and the run goes on.
// The runtime's own messages (forwarding, recovery, quiescence waves,
// retries) do not count: PEs that only pass them round are as stuck as
// PEs that all park. Other processes' entry methods reach a process's
// watchdog with their heartbeats (every tenth of --heartbeat-timeout).

// Watchdog limits: a user's run may have entry methods that compute for
// minutes, so by default it fires only after DefaultWatchdog; a test
// binary's runs (most are small) after TestWatchdog, so a hang fails a
// test in seconds with its dump rather than at go test's timeout.
const (
	DefaultWatchdog = 10 * time.Minute
	TestWatchdog    = 20 * time.Second
)

// StallError ends a run the watchdog found making no progress (exit 3).
type StallError struct {
	Limit time.Duration
	First string // the first unfinished piece of work a PE reported, or what the PEs did
	State string // every PE's description
}

func (e *StallError) Error() string {
	if e.Limit == 0 {
		return fmt.Sprintf("no progress (deterministic run): %s", e.First)
	}
	return fmt.Sprintf("no progress for %v (watchdog): %s", e.Limit, e.First)
}

// stalledDeterministic is the StallError of a deterministic run that
// ended with nothing to do or with the runtime's own messages alone (err): nothing runs
// any more, so every PE is described from here.
func stalledDeterministic(node *pe.Node, err error) *StallError {
	var b strings.Builder
	first := err.Error()
	for i := 0; i < node.NumPEs(); i++ {
		m := manager.Of(node.PE(i))
		m.Describe(&b)
		if p := m.Pending(); len(p) > 0 && first == err.Error() {
			first = fmt.Sprintf("%s; PE %d: %s", err, i, p[0])
		}
	}
	return &StallError{First: first, State: b.String()}
}

// Dump is the state of every PE when the watchdog fired.
func (e *StallError) Dump() string { return e.State }

// DumpOf returns the dump of the PEs' state that the error ending a run
// carries (the watchdog's, or a quiet run's with work unfinished), or "".
// Main writes it before the error's line.
func DumpOf(err error) string {
	var d interface{ Dump() string }
	if errors.As(err, &d) {
		return d.Dump()
	}
	return ""
}

// watchdogLimit is the run's limit: the flag's, or the default for a user
// or a test binary; 0: off.
func watchdogLimit(cfg Config) time.Duration {
	switch {
	case cfg.Watchdog < 0:
		return 0
	case cfg.Watchdog > 0:
		return cfg.Watchdog
	case testing.Testing():
		return TestWatchdog
	}
	return DefaultWatchdog
}

// watch ends the run on node with a StallError once node.Progress has
// not moved for limit. It returns when the run ends. waiting (nil in one
// process) says what this process waits for from the job's others.
func watch(node *pe.Node, limit time.Duration, waiting func() string) {
	t := time.NewTicker(max(limit/16, time.Millisecond))
	defer t.Stop()
	last, since := node.Progress(), time.Now()
	for {
		select {
		case <-node.Done():
			return
		case <-t.C:
		}
		if p := node.Progress(); p != last {
			last, since = p, time.Now()
			continue
		}
		if time.Since(since) < limit {
			continue
		}
		d := dumpNode(node, min(limit, 2*time.Second), waiting)
		node.Fail(&StallError{Limit: limit, First: d.first, State: d.text})
		return
	}
}

type nodeDump struct {
	text  string
	first string
}

// dumpNode asks every PE of node for its description and waits up to wait
// for the answers; a PE that does not answer is stuck inside a handler, so
// the goroutines' stacks are added. What the process waits for from the
// job's others (waiting, when not nil) comes first: a lost process not yet
// replaced is why the PEs wait, whatever their reductions say.
func dumpNode(node *pe.Node, wait time.Duration, waiting func() string) nodeDump {
	lo, n := node.LocalPEs() // this process's: the others dump their own
	allParked := node.AllParked()
	parked := make([]bool, n)
	for p := range parked {
		parked[p] = node.Parked(lo + p)
	}
	reply := make(chan manager.PEDump, n) // a late answer never blocks its PE
	for p := 0; p < n; p++ {
		node.InjectControl(lo+p, pe.Envelope{Type: manager.DumpType(), Kind: pe.KindSystem, Payload: &manager.DumpMsg{Reply: reply}})
	}
	got := make([]*manager.PEDump, n)
	timeout := time.After(wait)
	for k := 0; k < n; k++ {
		select {
		case d := <-reply:
			got[d.PE-lo] = &d
			continue
		case <-timeout:
		}
		break
	}
	var b strings.Builder
	job := ""
	if waiting != nil {
		if job = waiting(); job != "" {
			fmt.Fprintf(&b, "processes: %s\n", job)
		}
	}
	var pending []string
	var silent []int
	for p, d := range got {
		if d == nil {
			silent = append(silent, lo+p)
			fmt.Fprintf(&b, "PE %d: did not answer within %v: busy inside one handler\n", lo+p, wait)
			continue
		}
		state := "parked"
		if !parked[p] {
			state = "running"
		}
		fmt.Fprintf(&b, "[%s] %s", state, d.Text)
		pending = append(pending, d.Pending...)
	}
	first := manager.MostTelling(pending)
	switch {
	case len(silent) > 0:
		first = fmt.Sprintf("PEs %v are stuck inside a handler (their stacks are in the dump)", silent)
		b.WriteString("goroutines:\n")
		_ = pprof.Lookup("goroutine").WriteTo(&b, 1)
	case job != "":
		first = job
	case first == "" && allParked:
		first = "every PE is parked with nothing to do, and nothing is pending (a program that waits for nothing and does not end?)"
	case first == "":
		first = "the PEs pass only the runtime's own messages round, and no entry method runs (a livelock)"
	}
	return nodeDump{text: b.String(), first: first}
}

// dumpOnSignal writes a dump of the run on node to w on every SIGQUIT
// until stop is closed; the run goes on.
func dumpOnSignal(node *pe.Node, w io.Writer, stop <-chan struct{}, waiting func() string) {
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGQUIT) // before Run goes on: no signal is missed
	go func() {
		defer signal.Stop(sig)
		for {
			select {
			case <-stop:
				return
			case <-sig:
			}
			d := dumpNode(node, 2*time.Second, waiting)
			fmt.Fprintf(w, "charmgo: SIGQUIT: the state of every PE (the run goes on)\n%s", d.text)
		}
	}()
}
