package chare_test

import (
	"errors"
	"testing"

	"github.com/charmgo/charmgo/chare"
	"github.com/stretchr/testify/require"
)

// Only the job's first process reports a run it ran; another passes on
// its exit code; a failed or only-checked run reports nothing.
func TestWhichProcessReports(t *testing.T) {
	boom := errors.New("boom")
	cases := []struct {
		name    string
		res     chare.Result
		reports bool
		err     string
	}{
		{"the first process", chare.Result{}, true, ""},
		{"a failed run", chare.Result{Err: boom, Code: 1}, false, "boom"},
		{"a check", chare.Result{Checked: true}, false, ""},
		{"another process, exit 0", chare.Result{Process: 1}, false, ""},
		{"another process, exit 3", chare.Result{Process: 2, Code: 3}, false, "prog exited with code 3"},
	}
	for _, c := range cases {
		reports, err := c.res.Reports("prog")
		require.Equal(t, c.reports, reports, c.name)
		if c.err == "" {
			require.NoError(t, err, c.name)
		} else {
			require.EqualError(t, err, c.err, c.name)
		}
	}
}
