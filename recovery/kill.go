package recovery

import (
	"bufio"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
)

// Kill is an injected failure: PE fails (fail-stop) when the program
// reports step Step (AtStep), or After the run started (Step < 0), or —
// with Checkpoint > 0, for tests — while checkpoint number Checkpoint is
// being taken (its snapshots are on their way to the buddies), or, in a
// deterministic run (pe.Config.Deterministic), for simulations: with
// Event > 0, just before event number Event (1 is the first); with
// HandOver > 0, right after it handed its HandOver-th message to another
// PE, in the middle of what its handler sends.
type Kill struct {
	PE         int
	Step       int
	After      time.Duration
	Checkpoint uint64
	Event      int
	HandOver   uint64
}

// timed reports whether the kill happens After the start.
func (k Kill) timed() bool { return k.Step < 0 && k.Checkpoint == 0 && k.Event == 0 && k.HandOver == 0 }

// Simulated reports whether the kill happens at a moment only a
// deterministic run has (an event, a hand-over).
func (k Kill) Simulated() bool { return k.Event > 0 || k.HandOver > 0 }

func (k Kill) String() string {
	if k.Event > 0 {
		return fmt.Sprintf("PE %d before event %d", k.PE, k.Event)
	}
	if k.HandOver > 0 {
		return fmt.Sprintf("PE %d after it handed over message %d", k.PE, k.HandOver)
	}
	if k.Checkpoint > 0 {
		return fmt.Sprintf("PE %d during checkpoint %d", k.PE, k.Checkpoint)
	}
	if k.Step >= 0 {
		return fmt.Sprintf("PE %d at step %d", k.PE, k.Step)
	}
	return fmt.Sprintf("PE %d after %v", k.PE, k.After)
}

// Flag is k as --kill spells it (PE@STEP, PE@TIME), or as String says it
// for kills no flag makes.
func (k Kill) Flag() string {
	switch {
	case k.Simulated() || k.Checkpoint > 0:
		return k.String()
	case k.Step >= 0:
		return fmt.Sprintf("%d@%d", k.PE, k.Step)
	}
	return fmt.Sprintf("%d@%v", k.PE, k.After)
}

// ParseKill reads --kill's value: PE@STEP (at the step the program
// reports with AtStep) or PE@TIME (a duration after the start: 1@2.5s,
// 0@300ms), which fits any program.
func ParseKill(v string) (Kill, error) {
	p, s, ok := strings.Cut(v, "@")
	if !ok {
		return Kill{}, fmt.Errorf("flag --kill: %q: want PE@STEP or PE@TIME (1@20, 1@2.5s)", v)
	}
	pe, err := strconv.Atoi(p)
	if err != nil || pe < 0 {
		return Kill{}, fmt.Errorf("flag --kill: %q: PE %q is not a PE number", v, p)
	}
	if step, err := strconv.Atoi(s); err == nil && step >= 0 {
		return Kill{PE: pe, Step: step}, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 || d > maxKillDelay {
		return Kill{}, fmt.Errorf("flag --kill: %q: %q is neither a step (a whole number) nor a time after the start (2.5s, 300ms)", v, s)
	}
	return Kill{PE: pe, Step: -1, After: d}, nil
}

// maxKillDelay bounds a kill's time after the start (a typo of a unit
// should not wait a year).
const maxKillDelay = 1e9 * time.Second

// ParseKillFile reads a kill file: one failure per line, "PE SECONDS"
// (Charm++'s +killFile format: seconds after the start, fractions allowed)
// or "PE @STEP"; blank lines and lines starting with # are skipped. Errors
// name the line.
func ParseKillFile(r io.Reader) ([]Kill, error) {
	var out []Kill
	sc := bufio.NewScanner(r)
	for ln := 1; sc.Scan(); ln++ {
		f := strings.Fields(sc.Text())
		if len(f) == 0 || strings.HasPrefix(f[0], "#") {
			continue
		}
		if len(f) != 2 {
			return nil, fmt.Errorf("kill file line %d: %q: want \"PE SECONDS\" or \"PE @STEP\"", ln, sc.Text())
		}
		p, err := strconv.Atoi(f[0])
		if err != nil || p < 0 {
			return nil, fmt.Errorf("kill file line %d: PE %q is not a PE number", ln, f[0])
		}
		if s, ok := strings.CutPrefix(f[1], "@"); ok {
			step, err := strconv.Atoi(s)
			if err != nil || step < 0 {
				return nil, fmt.Errorf("kill file line %d: step %q is not a whole number", ln, f[1])
			}
			out = append(out, Kill{PE: p, Step: step})
			continue
		}
		sec, err := strconv.ParseFloat(f[1], 64)
		if err != nil || sec < 0 || sec > 1e9 {
			return nil, fmt.Errorf("kill file line %d: time %q is not a number of seconds", ln, f[1])
		}
		out = append(out, Kill{PE: p, Step: -1, After: time.Duration(sec * float64(time.Second))})
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("kill file: %w", err)
	}
	return out, nil
}

// PEFailure is a failure: a PE failed (fail-stop). Other PEs may
// have failed at the same moment (Also): one rollback recovers them all.
type PEFailure struct {
	PE   int
	Kill Kill
	Also []Kill
}

func (f *PEFailure) Error() string {
	msg := fmt.Sprintf("PE %d failed (injected: %v)", f.PE, f.Kill)
	for _, k := range f.Also {
		msg += fmt.Sprintf(", and PE %d (injected: %v)", k.PE, k)
	}
	return msg
}
