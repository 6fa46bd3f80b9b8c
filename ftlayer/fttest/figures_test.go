package fttest

import (
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/charmgo/charmgo/ftlayer"
	"github.com/stretchr/testify/require"
)

// figureSizes are the LeanMD-like configurations of the SCMEL-vs-CAMEL
// figures: groups of 5, 17 and 75 PEs (LeanMD's sections have 75
// computes), 10 steps with a checkpoint every 5.
var figureSizes = []struct {
	name string
	n    int
	c    Cells
}{
	{"16 PEs, groups of 5, k=2", 16, Cells{Steps: 10, CkptEvery: 5, Width: 2, K: 2, Pad: 512}},
	{"32 PEs, groups of 17, k=2", 32, Cells{Steps: 10, CkptEvery: 5, Width: 8, K: 2, Pad: 1024}},
	{"96 PEs, groups of 75, k=4", 96, Cells{Steps: 10, CkptEvery: 5, Width: 37, K: 4, Pad: 2048}},
	{"96 PEs, groups of 75, k=8", 96, Cells{Steps: 10, CkptEvery: 5, Width: 37, K: 8, Pad: 2048}},
}

// TestSCMELvsCAMELFigures computes the figures of bench/README.md (CAMEL
// paper, Figure 5 and Table 3, on the simulated pattern): logged bytes by
// kind over the run and at their peak, determinants created and
// piggybacked. FT_FIGURES=1 adds the 75-member groups and prints the table. The checks are the
// properties the numbers come from: one multicast copy instead of one per
// hop, determinants for reductions only at roots.
func TestSCMELvsCAMELFigures(t *testing.T) {
	var b strings.Builder
	fmt.Fprintf(&b, "| pattern | protocol | packets | log held 5 steps after a checkpoint: p2p / mcast / red (of which root copies) = total | peak, sum over PEs | logged over the run | dets created | dets piggybacked |\n|---|---|---|---|---|---|---|---|\n")
	for _, sz := range figureSizes {
		if os.Getenv("FT_FIGURES") == "" && sz.n > 32 {
			continue // the LeanMD-sized groups: seconds, for the figures only
		}
		var st [2]ftlayer.Stats
		for i, proto := range []ftlayer.Factory{ftlayer.SCMELFactory{}, ftlayer.CAMELFactory{}} {
			res := Sim{N: sz.n, Seed: 1, Program: sz.c, Protocol: proto, MaxEvents: 5_000_000}.Run()
			require.NoError(t, res.Err)
			st[i] = res.Total()
			l := st[i].Log
			var peak uint64
			for _, x := range l {
				peak += x.PeakBytes
			}
			fmt.Fprintf(&b, "| %s | %s | %d | %s / %s / %s (%s) = %s | %s | %s | %d | %d |\n", sz.name, proto.Name(), res.Packets[0]+res.Packets[1]+res.Packets[2],
				kb(l[0].Bytes), kb(l[1].Bytes), kb(l[2].Bytes), kb(st[i].RootCopies.Bytes), kb(st[i].LoggedBytes()), kb(peak),
				kb(l[0].TotalBytes+l[1].TotalBytes+l[2].TotalBytes), st[i].DetsCreated, st[i].DetsPiggybacked)
		}
		s, c := st[0], st[1]
		members := uint64(2*sz.c.Width + 1)
		steps := uint64(sz.c.Steps)
		n := uint64(sz.n)
		// one multicast copy per step and root, against one per hop
		require.Equal(t, n*steps, c.Log[ftlayer.KindMulticast].TotalMsgs)
		require.Equal(t, n*steps*(members-1), s.Log[ftlayer.KindMulticast].TotalMsgs)
		// determinants: SCMEL one per reception of every hop; CAMEL none
		// for contributions reaching intermediate nodes
		require.Less(t, c.DetsCreated, s.DetsCreated)
		require.Less(t, c.DetsPiggybacked, s.DetsPiggybacked)
		// what stays logged between checkpoints: one copy per multicast,
		// and of the reductions what went to roots (and their copies)
		require.Less(t, c.Log[ftlayer.KindMulticast].Bytes*(members-1), s.Log[ftlayer.KindMulticast].Bytes+1)
		if members >= 17 {
			require.Less(t, c.LoggedBytes()*100, s.LoggedBytes()*20, "%s: CAMEL holds under a fifth of SCMEL's log", sz.name)
		}
	}
	if os.Getenv("FT_FIGURES") != "" {
		fmt.Print(b.String())
	}
}

func kb(b uint64) string {
	switch {
	case b >= 10<<20:
		return fmt.Sprintf("%.0f MB", float64(b)/(1<<20))
	case b >= 1<<20:
		return fmt.Sprintf("%.1f MB", float64(b)/(1<<20))
	case b >= 10<<10:
		return fmt.Sprintf("%.0f KB", float64(b)/(1<<10))
	}
	return fmt.Sprintf("%d B", b)
}
