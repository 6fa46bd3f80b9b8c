package recovery

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/charmgo/charmgo/ftlayer"
	"github.com/charmgo/charmgo/manager"
	"github.com/charmgo/charmgo/pe"
)

type quietHandler struct{}

func (quietHandler) Handle(*pe.PE, *pe.Envelope) {}

// The process that runs PE 0 hears of every global rollback as PE 0
// rolls back (RollingBack), and hands it to the steward if that is
// another. When it took over from a steward lost in the middle of a
// rollback it decided, it steers one it did not decide: it counts it
// and says a process was lost, instead of reading what it did not
// record (it panicked: process 0 and its successor SIGKILLed 20 ms
// apart, as the successor's rollback went).
func TestARollbackAnotherStewardDecidedIsCounted(t *testing.T) {
	node, err := pe.NewNode(pe.Config{NumPEs: 3}, func(*pe.PE) pe.Handler { return quietHandler{} })
	require.NoError(t, err)
	var notices strings.Builder
	s := New(Config{PEs: 3, Protocol: ftlayer.ProtocolSpec{Name: "camel", RecoversAlone: true}, Notices: &notices})
	s.mu.Lock()
	s.node = node
	s.mu.Unlock()
	require.NotPanics(t, func() { s.RollingBack(2, "the PEs' memory") })
	st := s.Stats()
	require.Len(t, st.Recoveries, 1)
	require.Equal(t, 3, st.Recoveries[0].PEs)
	require.Equal(t, []uint64{2}, st.Restored)
	require.Contains(t, notices.String(), "charmgo: a process was lost (the process that steered the job, lost since, rolled every PE back); every PE rolls back to checkpoint 2 (the PEs' memory)")
}

// A recovery step comes from another process as bytes: whatever they
// are, it decodes or is refused, never a panic, and one accepted names
// only PEs and processes of the job (every process uses them as indices).
func FuzzDecodeStep(f *testing.F) {
	for _, st := range []step{
		{Process: 1, Dead: []int32{2, 3}, Incs: []uint32{1, 1}, Recovered: []int32{0}},
		{Process: 2, Dead: []int32{4}, Rollback: &manager.RollbackMsg{Failed: []int32{4}, Committed: 3}, Gen: 2},
		{Process: 0, Dead: []int32{1}, Set: []int32{1, 5}, Incs: []uint32{2, 1}, Phase: phaseRenew, Again: []int32{5}},
		{Process: 3, HandBack: true, Steered: &Stats{Failures: 1}},
		{Process: 0, Dead: []int32{9}},
		{Process: 7, Phase: 9},
	} {
		b, err := msgpack.Marshal(&st)
		require.NoError(f, err)
		f.Add(b)
	}
	f.Add([]byte{0xc1})
	f.Fuzz(func(t *testing.T, b []byte) {
		st, err := decodeStep(b, 8, 4)
		if err != nil {
			return
		}
		require.True(t, st.Process >= 0 && st.Process < 4)
		require.LessOrEqual(t, st.Phase, phaseThaw)
		for _, l := range [][]int32{st.Dead, st.Set, st.Again, st.Recovered} {
			for _, y := range l {
				require.True(t, y >= 0 && y < 8, "PE %d", y)
			}
		}
		if st.Set != nil && st.Incs != nil {
			require.Len(t, st.Incs, len(st.Set))
		}
	})
}

// The same for a report to the steward.
func FuzzDecodeReport(f *testing.F) {
	for _, r := range []report{
		{Recovered: 3, Counts: recoveryCounts{Inc: 2}},
		{Recovered: -1, Restored: 2, PE: 5},
		{Recovered: reportLimit, Rows: map[int32][]int32{1: {2, 3}}},
		{Recovered: reportLimit, Renewed: true, Fresh: []int32{4}},
		{Recovered: reportSupplied, PE: 2, By: []int32{0, 1}},
		{Recovered: reportHolds, PE: 1, By: []int32{7}},
		{Recovered: -9},
		{Recovered: 8},
	} {
		b, err := msgpack.Marshal(&r)
		require.NoError(f, err)
		f.Add(b)
	}
	f.Add([]byte{0x80})
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := decodeReport(b, 8)
		if err != nil {
			return
		}
		in := func(y int32) bool { return y >= 0 && y < 8 }
		require.True(t, r.Recovered >= reportHolds && r.Recovered < 8)
		require.True(t, in(r.PE))
		for _, y := range append(append([]int32{}, r.By...), r.Fresh...) {
			require.True(t, in(y), "PE %d", y)
		}
		for q, row := range r.Rows {
			require.True(t, in(q))
			for _, y := range row {
				require.True(t, in(y))
			}
		}
	})
}
