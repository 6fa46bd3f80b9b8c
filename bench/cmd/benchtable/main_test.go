package main

import (
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
	require.Contains(t, s, "| PingPong_Charmgo | 3 | 650.0 | 600.0–700.0 | — |  |")
	require.Contains(t, s, "| PingPong_Channels | 1 | 250.0 | 250.0–250.0 | 0 | 0.38× |")
	require.Contains(t, s, "| Stream_Charmgo | 1 | 80.0 |") // the program's own ns/op wins
	require.Error(t, run(strings.NewReader("nothing"), &out))
}
