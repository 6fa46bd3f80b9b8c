package manager

import (
	"fmt"
	"io"
	"sort"

	"github.com/charmgo/charmgo/pe"
)

// DumpState writes what this PE is waiting for: buffered messages, sections
// being built, and reduction rounds not yet reported. It is for diagnosing a
// run that went quiet without finishing; call it on the PE's goroutine (or
// after the run stopped).
func (m *Manager) DumpState(w io.Writer) {
	fmt.Fprintf(w, "PE %d: sent %d processed %d\n", m.Me(), m.Sent, m.Processed)
	for id, buf := range m.pendingColl {
		fmt.Fprintf(w, "  %d messages wait for collection %d (first: %s flags %d from PE %d)\n", len(buf), id, pe.TypeName(buf[0].Type), buf[0].Flags, buf[0].Src)
	}
	for id, buf := range m.pendingSec {
		fmt.Fprintf(w, "  %d messages wait for section %d\n", len(buf), id)
	}
	for id, b := range m.building {
		fmt.Fprintf(w, "  section %d waits for %d member locations\n", id, b.missing)
	}
	ids := make([]uint64, 0, len(m.secs))
	for id := range m.secs {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	for _, id := range ids {
		s := m.secs[id]
		fmt.Fprintf(w, "  section %d: %d members here; %s\n", id, len(s.Members), s.red.describe())
	}
	for _, c := range m.colls {
		if len(c.red.rounds) > 0 {
			fmt.Fprintf(w, "  %s: %s\n", c.Name, c.red.describe())
		}
		for ix, buf := range c.homeBuf {
			fmt.Fprintf(w, "  %d messages for %s%v wait at its home\n", len(buf), c.Name, ix)
		}
	}
}

func (s *Reduction) describe() string {
	out := fmt.Sprintf("next report %d, parent %d, children %v;", s.nextReport, s.Parent, s.Children)
	for r, rd := range s.rounds {
		out += fmt.Sprintf(" round %d: %d of %d local, children in %v, counts %v;", r, rd.got, s.local.at(r), rd.children, s.childCountsAt(r))
	}
	return out
}

func (s *Reduction) childCountsAt(r uint32) []int64 {
	out := make([]int64, len(s.childCount))
	for i := range s.childCount {
		out[i] = s.childCount[i].at(r)
	}
	return out
}
