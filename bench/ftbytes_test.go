package bench

import (
	"io"
	"os"
	"sync"
	"testing"

	"github.com/charmgo/charmgo/apps/leanmd/md"
	"github.com/charmgo/charmgo/chare"
	"github.com/charmgo/charmgo/ftlayer"
	"github.com/charmgo/charmgo/pe"
	"github.com/stretchr/testify/require"
)

// ftBytes is a hook around a protocol's that measures what its header
// adds to each message that leaves its PE, in the wire form
// (pe.AppendFT): the bytes fault tolerance adds per message.
type ftBytes struct {
	ftlayer.Wrapper
	me    int
	mu    *sync.Mutex
	n, by *uint64
	buf   []byte
}

func (h *ftBytes) Send(dst int, role ftlayer.Role, g, num uint64, first bool, env *pe.Envelope) error {
	if err := h.Wrapper.Send(dst, role, g, num, first, env); err != nil {
		return err
	}
	if dst != h.me && env.FT != nil {
		h.buf = pe.AppendFT(h.buf[:0], env.FT)
		h.mu.Lock()
		*h.n, *h.by = *h.n+1, *h.by+uint64(len(h.buf))
		h.mu.Unlock()
	}
	return nil
}

// The bytes each message between PEs carries for fault tolerance, LeanMD
// on 16 PEs (bench/README.md, "Logging without determinants", figure 1):
// FT_FIGURES=1 go test -run TestFigureFTBytesPerMessage -v ./bench/
func TestFigureFTBytesPerMessage(t *testing.T) {
	if os.Getenv("FT_FIGURES") == "" {
		t.Skip("FT_FIGURES=1 measures it")
	}
	p := md.DefaultParams()
	p.Steps, p.Given = 41, 4
	for _, c := range []chare.Config{{FT: "camel"}, {FT: "team", Teams: "4"}, {FT: "camel", Teams: "4"}, {FT: "spmd", Teams: "4"}} {
		var mu sync.Mutex
		var n, by uint64
		c.PEs = 16
		c.WrapHook = func(me int, h ftlayer.Hook, _ ftlayer.Trees) ftlayer.Hook {
			return &ftBytes{Wrapper: ftlayer.Wrapper{Hook: h}, me: me, mu: &mu, n: &n, by: &by}
		}
		_, err := md.Run(p, c, io.Discard)
		require.NoError(t, err)
		name := c.FT
		if c.Teams != "" {
			name += " (teams of " + c.Teams + ")"
		}
		t.Logf("%-22s %9d messages between PEs, %6.1f FT bytes per message", name, n, float64(by)/float64(n))
	}
}
