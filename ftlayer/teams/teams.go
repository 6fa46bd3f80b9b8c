// Package teams chooses the teams of team-based message logging: a
// partition of the PEs into groups that fail and roll back together, a
// message between teams being logged and one within a team not. It owns
// the PE communication matrix the choice is made from, the cost of a
// partition, and Algorithm 1 of Ropars et al. (seed paper 001, §4.2),
// which bisects the largest team while that pays, judged by the paper's
// cost function (2) (§5.1):
//
//	cost = α·L + β·R
//
// where L = B/D is the share of the message volume that crosses teams
// (what is logged), and R = Σ|P_k|²/P² the expected share of PEs a failure
// rolls back (failures evenly spread). α = 23% is the slowdown of logging
// everything and β = 12.4% the time a rollback of everything loses, the
// paper's figures; both are settable. Coordinated checkpointing is one
// team (L = 0, R = 1: cost β); logging everything is one team per PE
// (L = 1, R = 1/P).
//
// Everything here is a pure function of its input and seed: no
// goroutines, clocks or I/O.
package teams

import (
	"cmp"
	"fmt"
	"math"
	"slices"

	"github.com/charmgo/charmgo/loadbalance/partition"
)

// Matrix is the communication between n PEs: V[u*N+v] is the volume (bytes,
// or messages) PE u sent PE v.
type Matrix struct {
	N int
	V []float64
}

// NewMatrix is the empty matrix of n PEs.
func NewMatrix(n int) *Matrix { return &Matrix{N: n, V: make([]float64, n*n)} }

// Add counts w more from PE u to PE v.
func (m *Matrix) Add(u, v int, w float64) { m.V[u*m.N+v] += w }

// At is the volume from PE u to PE v.
func (m *Matrix) At(u, v int) float64 { return m.V[u*m.N+v] }

// Between is the volume between PEs: every entry but a PE's to itself.
func (m *Matrix) Between() float64 {
	t := 0.0
	for u := 0; u < m.N; u++ {
		for v := 0; v < m.N; v++ {
			if u != v {
				t += m.At(u, v)
			}
		}
	}
	return t
}

// Check reports a matrix that is not square or holds a negative or
// non-finite volume, naming the entry.
func (m *Matrix) Check() error {
	if m.N < 1 || len(m.V) != m.N*m.N {
		return fmt.Errorf("teams: a matrix of %d PEs needs %d entries, has %d", m.N, m.N*m.N, len(m.V))
	}
	for i, w := range m.V {
		if w < 0 || math.IsNaN(w) || math.IsInf(w, 0) {
			return fmt.Errorf("teams: volume from PE %d to PE %d is %v", i/m.N, i%m.N, w)
		}
	}
	return nil
}

// Options set the cost function and the search.
type Options struct {
	// Alpha is the cost of logging every message (L = 1), Beta that of
	// rolling every PE back (R = 1). Defaults 0.23 and 0.124 (§5.1).
	Alpha, Beta float64
	// MinTeam is SHOULDPARTITION's threshold: a team of at most this many
	// PEs is not bisected. Default 1.
	MinTeam int
	// MaxTeam, if set, bounds the teams: a larger one is bisected whatever
	// the cost, and only partitions within the bound count as best (the
	// runtime keeps each PE's checkpoint copy in another team, so no
	// team may hold more than half the PEs).
	MaxTeam int
	// Seed makes the bisections repeatable.
	Seed uint64
	// Tolerance is how far from half a bisection's halves may be (see
	// partition.Options). Default 0.03.
	Tolerance float64
}

func (o Options) withDefaults() Options {
	if o.Alpha == 0 && o.Beta == 0 {
		o.Alpha, o.Beta = 0.23, 0.124
	}
	if o.MinTeam < 1 {
		o.MinTeam = 1
	}
	return o
}

// Result is a partition and what it costs.
type Result struct {
	// Teams lists each team's PEs in increasing order; teams are ordered
	// by their first PE.
	Teams [][]int
	// Logged is L: the share of the volume between teams. Rollback is R:
	// the expected share of PEs one failure rolls back.
	Logged, Rollback float64
	Cost             float64
}

// K is the number of teams.
func (r Result) K() int { return len(r.Teams) }

// Largest is the size of the largest team.
func (r Result) Largest() int {
	n := 0
	for _, t := range r.Teams {
		n = max(n, len(t))
	}
	return n
}

// TeamOf gives each PE's team number (its index in Teams).
func (r Result) TeamOf(n int) []int {
	of := make([]int, n)
	for k, t := range r.Teams {
		for _, p := range t {
			of[p] = k
		}
	}
	return of
}

// Evaluate is the cost of teams (every PE of m in exactly one) under opt's
// cost function.
func Evaluate(m *Matrix, teams [][]int, opt Options) (Result, error) {
	if err := m.Check(); err != nil {
		return Result{}, err
	}
	opt = opt.withDefaults()
	of := make([]int, m.N)
	for i := range of {
		of[i] = -1
	}
	for k, t := range teams {
		if len(t) == 0 {
			return Result{}, fmt.Errorf("teams: team %d is empty", k)
		}
		for _, p := range t {
			if p < 0 || p >= m.N {
				return Result{}, fmt.Errorf("teams: team %d names PE %d, outside 0..%d", k, p, m.N-1)
			}
			if of[p] >= 0 {
				return Result{}, fmt.Errorf("teams: PE %d is in teams %d and %d", p, of[p], k)
			}
			of[p] = k
		}
	}
	for p, k := range of {
		if k < 0 {
			return Result{}, fmt.Errorf("teams: PE %d is in no team", p)
		}
	}
	between := 0.0
	for u := 0; u < m.N; u++ {
		for v := 0; v < m.N; v++ {
			if of[u] != of[v] {
				between += m.At(u, v)
			}
		}
	}
	return result(normalize(teams), between, m.Between(), m.N, opt), nil
}

// result fills in the cost of teams, whose volume between teams is
// between of total, over n PEs.
func result(teams [][]int, between, total float64, n int, opt Options) Result {
	r := Result{Teams: teams}
	if total > 0 {
		r.Logged = between / total
	}
	sq := 0.0
	for _, t := range teams {
		sq += float64(len(t)) * float64(len(t))
	}
	r.Rollback = sq / (float64(n) * float64(n))
	r.Cost = opt.Alpha*r.Logged + opt.Beta*r.Rollback
	return r
}

// normalize sorts each team and orders the teams by their first PE (a
// copy).
func normalize(teams [][]int) [][]int {
	out := make([][]int, len(teams))
	for i, t := range teams {
		out[i] = slices.Sorted(slices.Values(t))
	}
	slices.SortFunc(out, func(a, b []int) int { return cmp.Compare(a[0], b[0]) })
	return out
}

// Blocks is the partition into consecutive teams of size PEs (the last
// may be smaller): --teams N.
func Blocks(n, size int) [][]int {
	size = max(size, 1)
	var out [][]int
	for lo := 0; lo < n; lo += size {
		t := make([]int, 0, min(size, n-lo))
		for p := lo; p < min(lo+size, n); p++ {
			t = append(t, p)
		}
		out = append(out, t)
	}
	return out
}

// part is a team of the partition Algorithm 1 grows.
type part struct {
	pes  []int
	done bool // not to be considered again (line 14, or too small)
}

// Partition runs Algorithm 1 on m: starting from one team of every PE, it
// takes the largest team still to consider (SHOULDPARTITION: more than
// MinTeam PEs), bisects it on the communication within it (symmetrized),
// and keeps the bisection if it does not raise the cost, or does not raise
// the strength B/(K−1) (ACCEPTBISECTION); each partition cheaper than all
// before is the best so far (BESTSOFAR). A bisection it does not keep
// leaves that team whole for good. It returns the best partition seen.
func Partition(m *Matrix, opt Options) (Result, error) {
	if err := m.Check(); err != nil {
		return Result{}, err
	}
	opt = opt.withDefaults()
	total := m.Between()
	all := make([]int, m.N)
	for i := range all {
		all[i] = i
	}
	parts := []*part{{pes: all}}
	between := 0.0
	cost := func(ps []*part, b float64) Result {
		ts := make([][]int, len(ps))
		for i, p := range ps {
			ts[i] = p.pes
		}
		return result(ts, b, total, m.N, opt)
	}
	within := func(ps []*part) bool {
		for _, p := range ps {
			if opt.MaxTeam > 0 && len(p.pes) > opt.MaxTeam {
				return false
			}
		}
		return true
	}
	best, found := cost(parts, 0), within(parts)
	cur := best.Cost
	for step := 0; ; step++ {
		k := largest(parts, opt.MinTeam)
		if k < 0 {
			break
		}
		pk := parts[k]
		forced := opt.MaxTeam > 0 && len(pk.pes) > opt.MaxTeam
		a, b, err := bisect(m, pk.pes, opt, step)
		if err != nil {
			return Result{}, err
		}
		if (len(a) == 0 || len(b) == 0) && forced {
			// nothing to cut (no traffic inside it): halves by number
			h := len(pk.pes) / 2
			a, b = slices.Clone(pk.pes[:h]), slices.Clone(pk.pes[h:])
		}
		if len(a) == 0 || len(b) == 0 {
			pk.done = true
			continue
		}
		across := volume(m, a, b) + volume(m, b, a)
		next := make([]*part, 0, len(parts)+1)
		next = append(next, parts[:k]...)
		next = append(next, &part{pes: a}, &part{pes: b})
		next = append(next, parts[k+1:]...)
		nb := between + across
		c := cost(next, nb).Cost
		if !forced && !(c <= cur || strength(nb, len(next)) <= strength(between, len(parts))) {
			pk.done = true // ACCEPTBISECTION said no: this team stays whole
			continue
		}
		parts, between, cur = next, nb, c
		if ok := within(parts); ok && (!found || c < best.Cost) {
			best, found = cost(parts, between), true
		}
	}
	best.Teams = normalize(best.Teams)
	return best, nil
}

// largest is the index of the largest part still to consider (ties: the
// one with the smallest first PE), or -1.
func largest(parts []*part, minTeam int) int {
	k := -1
	for i, p := range parts {
		if p.done || len(p.pes) <= minTeam {
			continue
		}
		if k < 0 || len(p.pes) > len(parts[k].pes) || len(p.pes) == len(parts[k].pes) && p.pes[0] < parts[k].pes[0] {
			k = i
		}
	}
	return k
}

// strength is B/(K−1); a single team has none to lose (+∞), so the first
// bisection is always tried against the cost.
func strength(between float64, k int) float64 {
	if k <= 1 {
		return math.Inf(1)
	}
	return between / float64(k-1)
}

// volume is M(U, V): the volume the PEs of us sent the PEs of vs.
func volume(m *Matrix, us, vs []int) float64 {
	t := 0.0
	for _, u := range us {
		for _, v := range vs {
			t += m.At(u, v)
		}
	}
	return t
}

// bisect splits pes in two halves that cut little communication (BISECT:
// the partitioner on M(P_k, P_k) + its transpose). Each half comes back
// sorted.
func bisect(m *Matrix, pes []int, opt Options, step int) (a, b []int, err error) {
	var edges []partition.Edge
	for i, u := range pes {
		for j := i + 1; j < len(pes); j++ {
			v := pes[j]
			if w := m.At(u, v) + m.At(v, u); w > 0 {
				edges = append(edges, partition.Edge{U: int32(i), V: int32(j), W: w})
			}
		}
	}
	g, err := partition.FromEdges(len(pes), nil, edges)
	if err != nil {
		return nil, nil, err
	}
	side := partition.Bisect(g, 0.5, partition.Options{Tolerance: opt.Tolerance, Seed: opt.Seed + uint64(step)})
	for i, s := range side {
		if s == 0 {
			a = append(a, pes[i])
		} else {
			b = append(b, pes[i])
		}
	}
	return a, b, nil
}
