// Command membermodel runs the membership model of pe/cluster
// (cluster.SimulateMembership: the processes' own rules for the tree,
// heartbeats, finding a loss and passing it on, the steward's succession
// and a recovery's steps, simulated deterministically) at job sizes one
// host cannot run, and prints what a process holds and sends, and how
// soon a loss is known, as a Markdown table.
//
//	membermodel --procs 4,16,64,256,1024,16384
//
// The model is held to real jobs by pe/cluster's tests (a job of 12
// processes: every process's heartbeats and data links as the model has
// them); bench/README "The membership model" sets it beside the
// measured jobs of 4 to 256 processes.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/charmgo/charmgo/internal/stat"
	"github.com/charmgo/charmgo/pe/cluster"
)

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("membermodel", flag.ContinueOnError)
	fs.SetOutput(stderr)
	procsFlag := fs.String("procs", "4,16,64,256,1024,16384", "job sizes (processes), comma-separated")
	timeout := fs.Duration("heartbeat-timeout", 30*time.Second, "the processes' --heartbeat-timeout")
	latency := fs.Duration("latency", 100*time.Microsecond, "a control message's time from sender to receiver")
	duration := fs.Duration("duration", time.Minute, "how long each job runs, simulated")
	steps := fs.Int("recovery-steps", 3, "steps the steward broadcasts for a recovery")
	seed := fs.Uint64("seed", 1, "the seed of the processes' heartbeat phases")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	sizes, err := parseSizes(*procsFlag)
	if err == nil && fs.NArg() > 0 {
		err = fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	if err != nil {
		fmt.Fprintln(stderr, "membermodel:", err)
		return 2
	}
	fmt.Fprintf(stdout, "heartbeat timeout %v (a heartbeat every %v), latency %v, %v simulated, a loss at a third of it\n\n",
		*timeout, min(*timeout/10, time.Second), *latency, *duration)
	fmt.Fprintln(stdout, "| processes | tree depth | neighbours (max) | control peers: a process (median / max), the steward | data links: a process (median / max), the steward | heartbeats sent a second (median / max) | a death: found / all know | a hang: found / all know | notices of a loss | the steward lost: all know / the rendezvous sent |")
	fmt.Fprintln(stdout, "|---:|---:|---:|---|---|---|---|---|---:|---|")
	for _, n := range sizes {
		base := cluster.ModelConfig{Procs: n, HeartbeatTimeout: *timeout, Latency: *latency, Duration: *duration,
			LostAt: *duration / 3, RecoverySteps: *steps, Seed: *seed}
		quiet, dead, hung, steward := base, base, base, base
		quiet.Lost = -1
		dead.Lost = n / 2
		hung.Lost, hung.Hung = n/2, true
		steward.Lost = 0
		var reps [4]cluster.ModelReport
		for i, cfg := range []cluster.ModelConfig{quiet, dead, hung, steward} {
			if reps[i], err = cluster.SimulateMembership(cfg); err != nil {
				fmt.Fprintln(stderr, "membermodel:", err)
				return 1
			}
		}
		q := reps[0]
		var nb, ctl, links, beats []float64
		for r, p := range q.Processes {
			nb = append(nb, float64(p.Neighbours))
			if r != 0 {
				ctl, links = append(ctl, float64(p.ControlPeers)), append(links, float64(p.DataLinks))
			}
			beats = append(beats, float64(p.BeatsSent)/duration.Seconds())
		}
		st := q.Processes[0]
		fmt.Fprintf(stdout, "| %d | %d | %g | %g / %g, %d | %g / %g, %d | %.1f / %.1f | %v / %v | %v / %v | %d | %v / %d |\n",
			n, q.Depth, slices.Max(nb), stat.Median(ctl), slices.Max(ctl), st.ControlPeers, stat.Median(links), slices.Max(links), st.DataLinks,
			stat.Median(beats), slices.Max(beats),
			round(reps[1].FirstFound), round(reps[1].AllKnew), round(reps[2].FirstFound), round(reps[2].AllKnew),
			reps[1].Notices, round(reps[3].AllKnew), reps[3].RendezvousSent)
	}
	fmt.Fprintln(stdout, "\ncontrol peers: the processes a process holds a control connection with (its neighbours in the tree, the steward); data links: those the job's upkeep links it to (its neighbours), the application's own links coming on top; a death is found as links break, a hang by heartbeats; the losses are of process n/2, and of process 0 in the last column")
	return 0
}

func parseSizes(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 2 {
			return nil, fmt.Errorf("--procs: %q is not a job size (2 or more processes)", f)
		}
		out = append(out, n)
	}
	if len(out) == 0 {
		return nil, errors.New("--procs: no job size")
	}
	return out, nil
}

// round writes a time after the loss ("not in the run" if it did not
// come before the simulated run's end).
func round(d time.Duration) string {
	switch {
	case d < 0:
		return "not in the run"
	case d < time.Millisecond:
		return d.Round(time.Microsecond).String()
	}
	return d.Round(100 * time.Microsecond).String()
}
