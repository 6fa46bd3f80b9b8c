package main

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestTable(t *testing.T) {
	in := `goos: linux
BenchmarkPingPong_Charmgo-2   	 100	       600.0 ns/op
BenchmarkPingPong_Charmgo-2   	 100	       700.0 ns/op
BenchmarkPingPong_Charmgo-2   	 100	       650.0 ns/op
BenchmarkPingPong_Channels-2  	 100	       250.0 ns/op	       0 B/op	       0 allocs/op
BenchmarkStream_Charmgo-2     	 100	     99.0 ns/op	   12 msgs/s	      16 B/op	       1 allocs/op	80.0 ns/op
PASS`
	var out strings.Builder
	require.NoError(t, run(strings.NewReader(in), &out))
	s := out.String()
	require.Contains(t, s, "| PingPong_Charmgo | 3 | 650.0 | 600.0–700.0 | 1.17 | — |  |")
	require.Contains(t, s, "| PingPong_Channels | 1 | 250.0 | 250.0–250.0 | 1.00 | 0 | 0.38× |")
	require.Contains(t, s, "| Stream_Charmgo | 1 | 80.0 |") // the program's own ns/op wins
	require.Error(t, run(strings.NewReader("nothing"), &out))
}

// Runs that fall in two groups are flagged, with how many in each; a
// spread within one group is not.
func TestTwoModesAreFlagged(t *testing.T) {
	for _, c := range []struct {
		name string
		ns   []float64
		want string
	}{
		{"one mode, noisy", []float64{300, 320, 340, 360, 380}, "| 1.27 |"},
		{"two modes", []float64{290, 1100, 300, 1200, 310}, "| 4.14 **two modes**: 3 runs ≤ 310.0, 2 ≥ 1100.0 |"},
		{"the widest gap splits", []float64{100, 140, 500}, "| 5.00 **two modes**: 2 runs ≤ 140.0, 1 ≥ 500.0; the machine's floor 110–550 ns |"},
	} {
		t.Run(c.name, func(t *testing.T) {
			var in strings.Builder
			for _, v := range c.ns {
				if strings.Contains(c.want, "floor") { // the slow run on a slow floor
					fmt.Fprintf(&in, "BenchmarkPingPong_Charmgo-2 100 %.1f ns/op %.1f floor-ns\n", v, map[bool]float64{true: 550, false: 110}[v > 200])
					continue
				}
				fmt.Fprintf(&in, "BenchmarkPingPong_Charmgo-2 100 %.1f ns/op\n", v)
			}
			var out strings.Builder
			require.NoError(t, run(strings.NewReader(in.String()), &out))
			require.Contains(t, out.String(), c.want)
			if !strings.Contains(c.want, "two modes") {
				require.NotContains(t, out.String(), "two modes")
			}
		})
	}
}

func TestCompare(t *testing.T) {
	then := `# commit abc1234
BenchmarkPingPong_Charmgo-2   	 100	       500.0 ns/op
BenchmarkPingPong_Channels-2  	 100	       250.0 ns/op
BenchmarkStream_Charmgo-2     	 100	       40.0 ns/op
BenchmarkStream_BufferedChannel-2 100	   40.0 ns/op
BenchmarkLocalSend_Charmgo-2  	 100	       60.0 ns/op
`
	// A machine twice as slow: the baselines take twice as long, and so
	// do ping-pong and local sends; the stream took four times as long.
	now := `BenchmarkPingPong_Charmgo-2   	 100	       1000.0 ns/op
BenchmarkPingPong_Channels-2  	 100	       500.0 ns/op
BenchmarkStream_Charmgo-2     	 100	       160.0 ns/op
BenchmarkStream_BufferedChannel-2 100	   80.0 ns/op
BenchmarkLocalSend_Charmgo-2  	 100	       120.0 ns/op
BenchmarkNew_Charmgo-2  	 100	       1.0 ns/op
`
	tests := []struct {
		name       string
		then, now  string
		tol        float64
		slower     bool
		wantErr    string
		wantOutput []string
	}{
		{name: "stream slower", then: then, now: now, tol: 0.15, slower: true, wantOutput: []string{
			"base.txt # commit abc1234",
			"ran 2.00× as long",
			"| PingPong_Charmgo | 500.0 | 1000.0 | 2.00× | 1.00× |  |",
			"| Stream_Charmgo | 40.0 | 160.0 | 4.00× | 2.00× | SLOWER |",
			"| LocalSend_Charmgo | 60.0 | 120.0 | 2.00× | 1.00× |  |",
		}},
		{name: "within a wide tolerance", then: then, now: now, tol: 1.5, slower: false},
		{name: "nothing recorded", then: "# nothing\n", now: now, wantErr: "base.txt: no benchmark lines"},
		{name: "nothing run", then: then, now: "PASS\n", wantErr: "no benchmark lines on standard input"},
		{name: "nothing in common", then: then, now: "BenchmarkOther_Charmgo-2 1 5.0 ns/op\n", wantErr: "no charmgo benchmark is in both"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var out strings.Builder
			slower, err := compare(strings.NewReader(tc.then), strings.NewReader(tc.now), &out, tc.tol, "base.txt")
			if tc.wantErr != "" {
				require.ErrorContains(t, err, tc.wantErr)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.slower, slower)
			for _, w := range tc.wantOutput {
				require.Contains(t, out.String(), w)
			}
			require.NotContains(t, out.String(), "New_Charmgo") // not in the recorded run
		})
	}
}
