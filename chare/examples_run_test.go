package chare_test

import (
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/charmgo/charmgo/chare"
	"github.com/stretchr/testify/require"
)

var (
	outMu sync.Mutex
	out   strings.Builder
)

// sayf/sayln print like fmt (for the runnable examples) and keep what was
// printed so tests can compare it.
func sayf(format string, args ...any) {
	s := fmt.Sprintf(format, args...)
	outMu.Lock()
	out.WriteString(s)
	outMu.Unlock()
	fmt.Print(s)
}

func sayln(args ...any) { sayf("%s", fmt.Sprintln(args...)) }

func takeOut() string {
	outMu.Lock()
	defer outMu.Unlock()
	s := out.String()
	out.Reset()
	return s
}

// Every example program gives the same output on 1 to 5 PEs, with and
// without encoding every message (--wire-check).
func TestExamplesAcrossPEsAndWireCheck(t *testing.T) {
	progs := []struct {
		name string
		run  func(cfg chare.Config) chare.Result
		want string
	}{
		{"hello", func(c chare.Config) chare.Result { return chare.Run(helloMain, c) }, "hello from [0]\nhello from [1]\nhello from [2]\nhello from [3]\nhello from [4]\n"},
		{"ring", func(c chare.Config) chare.Result { return chare.Run(ringMain, c) }, "token made 21 hops in 3 laps\n"},
		{"reduction", func(c chare.Config) chare.Result { return chare.Run(sumMain, c) }, "count 100, sum 4950, tenth 495.0, err <nil>\n"},
		{"section", func(c chare.Config) chare.Result { return chare.Run(secMain, c) }, "section sum 880\n"},
		{"migration", func(c chare.Config) chare.Result { return chare.Run(migMain, c) }, "received 200 messages, sum 20100\n"},
		{"future", func(c chare.Config) chare.Result { return chare.Run(askMain, c) }, "the oracle says 42 (<nil>)\n"},
		{"gather", func(c chare.Config) chare.Result { return chare.Run(waitMain, c) }, "round 1: notes from 0, 1, 2\nround 2: notes from 0, 1, 2\n"},
		{"relay", func(c chare.Config) chare.Result { return chare.Run(ftMain, c) }, "after 20 laps the sum is 1673221797022101840\n"},
	}
	for _, p := range progs {
		for _, pes := range []int{1, 2, 3, 5} {
			for _, wire := range []bool{false, true} {
				t.Run(fmt.Sprintf("%s/p%d/wire=%v", p.name, pes, wire), func(t *testing.T) {
					takeOut()
					res := p.run(chare.Config{PEs: pes, WireCheck: wire})
					require.NoError(t, res.Err)
					require.Equal(t, 0, res.Code)
					require.Equal(t, p.want, takeOut())
				})
			}
		}
	}
}
