package recovery

import (
	"strings"
	"testing"

	"github.com/charmgo/charmgo/ftlayer"
	"github.com/charmgo/charmgo/pe"
	"github.com/stretchr/testify/require"
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
