// Command teams chooses the teams of team-based message logging offline,
// from the communication a run measured: it reads a stats file the run
// wrote (+LBDump FILE: the load balancer's record of which chare sent
// which how much, and where each chare was), adds it up into a PE
// communication matrix and prints the partition Algorithm 1 of the team
// logging paper chooses (package ftlayer/teams), its K*, the share L of
// the traffic logged (between teams), the share R of PEs a failure rolls
// back, and the cost α·L + β·R, beside coordinated checkpointing (one
// team) and logging everything (one PE a team).
//
//	go run ./cmd/teams --stats lb.dump
//	go run ./cmd/teams --stats lb.dump --teams 4 --alpha 0.23 --beta 0.124
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/charmgo/charmgo/ftlayer/teams"
	"github.com/charmgo/charmgo/loadbalance"
)

func main() { os.Exit(exitCode(os.Args[1:], os.Stdout, os.Stderr)) }

// exitCode runs the command: 0 when it worked or --help was asked for
// (the usage is printed), 2 with one line on errw otherwise.
func exitCode(args []string, out, errw io.Writer) int {
	err := run(args, out)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(errw, "teams: %v\n", err)
		return 2
	}
	return 0
}

func run(args []string, out io.Writer) error {
	fs := flag.NewFlagSet("teams", flag.ContinueOnError)
	fs.SetOutput(out)
	stats := fs.String("stats", "", "stats file a run wrote with +LBDump")
	record := fs.Int("record", 0, "use only this record of the file (1 = the first); 0: every record, added up")
	alpha := fs.Float64("alpha", 0.23, "cost of logging every message (L = 1)")
	beta := fs.Float64("beta", 0.124, "cost of rolling every PE back (R = 1)")
	minTeam := fs.Int("min-team", 1, "do not bisect teams of this many PEs or fewer")
	blocks := fs.Int("teams", 0, "also evaluate consecutive teams of this many PEs")
	seed := fs.Uint64("seed", 1, "seed of the bisections")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *stats == "" {
		return errors.New("--stats FILE is required (a file a run wrote with +LBDump)")
	}
	if *alpha < 0 || *beta < 0 || *alpha+*beta == 0 {
		return fmt.Errorf("--alpha %v and --beta %v: both at least 0, not both 0", *alpha, *beta)
	}
	f, err := os.Open(*stats)
	if err != nil {
		return err
	}
	defer f.Close()
	recs, err := loadbalance.ReadDump(f, *stats)
	if err != nil {
		return err
	}
	if len(recs) == 0 {
		return fmt.Errorf("%s: no records", *stats)
	}
	if *record < 0 || *record > len(recs) {
		return fmt.Errorf("--record %d: %s holds records 1 to %d", *record, *stats, len(recs))
	}
	if *record > 0 {
		recs = recs[*record-1 : *record]
	}
	m, err := matrix(recs)
	if err != nil {
		return fmt.Errorf("%s: %w", *stats, err)
	}
	opt := teams.Options{Alpha: *alpha, Beta: *beta, MinTeam: *minTeam, Seed: *seed}
	best, err := teams.Partition(m, opt)
	if err != nil {
		return err
	}
	which := "every record added up"
	if *record > 0 {
		which = fmt.Sprintf("record %d, step %d", *record, recs[0].Stats.Step)
	}
	fmt.Fprintf(out, "%s: %d PEs, %.0f bytes between PEs (%s); cost = %.3g·L + %.3g·R\n\n", *stats, m.N, m.Between(), which, *alpha, *beta)
	fmt.Fprintf(out, "| partition | K | largest team | L (logged) | R (rolled back) | cost |\n|---|---|---|---|---|---|\n")
	line := func(name string, r teams.Result) {
		fmt.Fprintf(out, "| %s | %d | %d | %.1f%% | %.1f%% | %.2f%% |\n", name, r.K(), r.Largest(), 100*r.Logged, 100*r.Rollback, 100*r.Cost)
	}
	line("Algorithm 1 (K*)", best)
	if *blocks > 0 {
		r, err := teams.Evaluate(m, teams.Blocks(m.N, *blocks), opt)
		if err != nil {
			return err
		}
		line(fmt.Sprintf("blocks of %d", *blocks), r)
	}
	for _, c := range []struct {
		name string
		size int
	}{{"one team: coordinated checkpointing", m.N}, {"one PE a team: full logging", 1}} {
		r, err := teams.Evaluate(m, teams.Blocks(m.N, c.size), opt)
		if err != nil {
			return err
		}
		line(c.name, r)
	}
	fmt.Fprintf(out, "\nteams (Algorithm 1):\n")
	for k, t := range best.Teams {
		fmt.Fprintf(out, "  %d: PEs %s\n", k, ranges(t))
	}
	return nil
}

// matrix adds the records' traffic up by PE: what chare a sent chare b
// counts from a's PE to b's (the PEs the record placed them on).
func matrix(recs []loadbalance.Record) (*teams.Matrix, error) {
	n := 0
	for _, r := range recs {
		n = max(n, len(r.Stats.PEs))
	}
	if n == 0 {
		return nil, errors.New("the records name no PEs")
	}
	m := teams.NewMatrix(n)
	for i, r := range recs {
		st := &r.Stats
		for j, c := range st.Comm {
			if c.From < 0 || int(c.From) >= len(st.Objs) || c.To < 0 || int(c.To) >= len(st.Objs) {
				return nil, fmt.Errorf("record %d: communication %d names chares %d and %d of %d", i+1, j, c.From, c.To, len(st.Objs))
			}
			u, v := st.Objs[c.From].PE, st.Objs[c.To].PE
			if u < 0 || int(u) >= n || v < 0 || int(v) >= n {
				return nil, fmt.Errorf("record %d: communication %d between PEs %d and %d of %d", i+1, j, u, v, n)
			}
			if u != v {
				m.Add(int(u), int(v), float64(c.Bytes))
			}
		}
	}
	return m, nil
}

// ranges writes sorted PEs as runs: 0-3,8,10-11.
func ranges(pes []int) string {
	var b strings.Builder
	for i := 0; i < len(pes); {
		j := i
		for j+1 < len(pes) && pes[j+1] == pes[j]+1 {
			j++
		}
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		if j > i {
			fmt.Fprintf(&b, "%d-%d", pes[i], pes[j])
		} else {
			fmt.Fprintf(&b, "%d", pes[i])
		}
		i = j + 1
	}
	return b.String()
}
