package chare

// The live progress line: on a terminal, the process of PE 0 keeps one
// line at the bottom of the program's output that says which step the
// run is at, how long a step takes and how long the rest will take,
// rewritten in place as steps begin (AtStep; StepRange gives the last).
// What the program prints goes above it.

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"sync"
	"time"
)

// liveLine is the program's output with the progress line under it.
type liveLine struct {
	mu       sync.Mutex
	w        io.Writer
	shown    bool // the line is on the screen (the cursor at its end)
	midLine  bool // the program's output ended without a newline: no line now
	text     string
	last     int // the last step (StepRange; 0: not known)
	started  time.Time
	drawn    time.Time
	recent   [16]stepMark // the last steps begun, for ms/step
	n        int
	disabled bool
}

type stepMark struct {
	step int
	at   time.Time
}

// redrawEvery bounds how often the line is rewritten.
const redrawEvery = 100 * time.Millisecond

func newLiveLine(w io.Writer) *liveLine { return &liveLine{w: w, started: time.Now()} }

// Write prints p above the line.
func (l *liveLine) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.shown {
		io.WriteString(l.w, "\r\033[K")
		l.shown = false
	}
	n, err := l.w.Write(p)
	l.midLine = len(p) > 0 && p[len(p)-1] != '\n' || len(p) == 0 && l.midLine
	l.draw()
	return n, err
}

// steps sets the last step the run will begin.
func (l *liveLine) steps(last int) {
	l.mu.Lock()
	l.last = last
	l.mu.Unlock()
}

// step: step s began now.
func (l *liveLine) step(s int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := time.Now()
	l.recent[l.n%len(l.recent)] = stepMark{s, now}
	l.n++
	if now.Sub(l.drawn) < redrawEvery && s != l.last {
		return
	}
	l.drawn = now
	l.text = l.describe(s, now)
	if l.shown {
		io.WriteString(l.w, "\r\033[K")
		l.shown = false
	}
	l.draw()
}

// describe is the line for step s begun at now: the step, ms/step over
// the last steps, and the time left at that pace.
func (l *liveLine) describe(s int, now time.Time) string {
	var b bytes.Buffer
	if l.last > 0 {
		fmt.Fprintf(&b, "step %d/%d", s, l.last)
	} else {
		fmt.Fprintf(&b, "step %d", s)
	}
	k := min(l.n, len(l.recent))
	oldest := l.recent[(l.n-k)%len(l.recent)]
	if span := s - oldest.step; span > 0 {
		per := now.Sub(oldest.at) / time.Duration(span)
		fmt.Fprintf(&b, ", %.1f ms/step", float64(per.Microseconds())/1e3)
		if l.last > s {
			fmt.Fprintf(&b, ", %s left", (per * time.Duration(l.last-s)).Round(100*time.Millisecond))
		}
	}
	fmt.Fprintf(&b, " (%s)", now.Sub(l.started).Round(100*time.Millisecond))
	return b.String()
}

// draw puts the line on the screen if the output allows it.
func (l *liveLine) draw() {
	if l.text == "" || l.midLine || l.disabled {
		return
	}
	io.WriteString(l.w, l.text)
	l.shown = true
}

// end takes the line off the screen for good (the run is over).
func (l *liveLine) end() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.shown {
		io.WriteString(l.w, "\r\033[K")
		l.shown = false
	}
	l.disabled = true
}

// progressLine decides whether a run shows the line (--progress-line:
// auto shows it when the run's output is a terminal).
func progressLine(mode string, stdout io.Writer) bool {
	switch mode {
	case "on":
		return true
	case "off":
		return false
	}
	f, ok := stdout.(*os.File)
	return ok && isTerminal(f)
}
