package ftlayer

import (
	"fmt"
	"slices"
)

// Teams assigns PEs to teams for team-based message logging (Meneses et
// al., papers/001 §2): a message between teams is logged at its sender,
// one inside a team is not, and a failure rolls back the failed PE's
// whole team. The zero value puts every PE in a team of its own (SCMEL).
type Teams struct {
	of      []int32   // each PE's team
	members [][]int32 // each team's PEs, in increasing order
}

// BlockTeams makes teams of size consecutive PEs out of n (the last one
// smaller if size does not divide n).
func BlockTeams(n, size int) (Teams, error) {
	if size < 1 {
		return Teams{}, fmt.Errorf("teams of %d PEs", size)
	}
	of := make([]int32, n)
	for p := range of {
		of[p] = int32(p / size)
	}
	return TeamsOf(of)
}

// TeamsOf makes the teams whose numbers of gives each PE's; team numbers
// run from 0 without gaps.
func TeamsOf(of []int32) (Teams, error) {
	k := int32(0)
	for p, t := range of {
		if t < 0 || int(t) >= len(of) {
			return Teams{}, fmt.Errorf("PE %d in team %d, outside 0..%d", p, t, len(of)-1)
		}
		k = max(k, t+1)
	}
	members := make([][]int32, k)
	for p, t := range of {
		members[t] = append(members[t], int32(p))
	}
	for t, m := range members {
		if len(m) == 0 {
			return Teams{}, fmt.Errorf("team %d has no PE (teams are numbered 0..%d without gaps)", t, k-1)
		}
	}
	return Teams{of: slices.Clone(of), members: members}, nil
}

// On reports whether PEs are grouped: some team has more than one PE.
func (t Teams) On() bool { return len(t.of) > len(t.members) }

// K is the number of teams (0 for the zero value).
func (t Teams) K() int { return len(t.members) }

// Of is PE p's team number (p itself for the zero value).
func (t Teams) Of(p int32) int32 {
	if int(p) < len(t.of) && p >= 0 {
		return t.of[p]
	}
	return p
}

// Same reports whether a and b are in the same team (every PE is in its
// own).
func (t Teams) Same(a, b int32) bool { return a == b || t.On() && t.Of(a) == t.Of(b) }

// Members lists the PEs of p's team, p included, in increasing order.
func (t Teams) Members(p int32) []int32 {
	if !t.On() {
		return []int32{p}
	}
	return slices.Clip(t.members[t.Of(p)]) // (an append copies)
}

// Team lists team k's PEs in increasing order (nil for the zero value).
func (t Teams) Team(k int) []int32 {
	if k < 0 || k >= len(t.members) {
		return nil
	}
	return t.members[k]
}

// WitnessOf is the first PE after p (cyclically) outside p's team, of n
// (-1: none): see Hook.Witness.
func (t Teams) WitnessOf(p int32, n int) int {
	for d := int32(1); d < int32(n); d++ {
		if q := (p + d) % int32(n); !t.Same(q, p) {
			return int(q)
		}
	}
	return -1
}

// Size is the number of PEs in p's team.
func (t Teams) Size(p int32) int {
	if !t.On() {
		return 1
	}
	return len(t.members[t.Of(p)])
}

// Largest is the size of the largest team (1 for the zero value).
func (t Teams) Largest() int {
	n := 1
	for _, m := range t.members {
		n = max(n, len(m))
	}
	return n
}

// String lists the teams: "{0-1} {2-3}".
func (t Teams) String() string {
	if !t.On() {
		return "every PE alone"
	}
	var b []byte
	for i, m := range t.members {
		if i > 0 {
			b = append(b, ' ')
		}
		b = append(b, PEList(m)...)
	}
	return string(b)
}

// PEList writes a sorted list of PEs compactly: "{0-3,6}".
func PEList(pes []int32) string {
	b := []byte{'{'}
	for i := 0; i < len(pes); {
		j := i
		for j+1 < len(pes) && pes[j+1] == pes[j]+1 {
			j++
		}
		if i > 0 {
			b = append(b, ',')
		}
		b = fmt.Appendf(b, "%d", pes[i])
		if j > i {
			b = fmt.Appendf(b, "-%d", pes[j])
		}
		i = j + 1
	}
	return string(append(b, '}'))
}
