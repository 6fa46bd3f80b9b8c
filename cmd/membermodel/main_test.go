package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestMembermodel(t *testing.T) {
	for _, c := range []struct {
		args      []string
		code      int
		out, errs string
	}{
		{[]string{"--procs", "4,64", "--duration", "40s"}, 0, "| 64 | 2 | 9 | 2 / 9, 63 | 1 / 9, 8 | 1.0 / 9.0 | 100µs / 400µs |", ""},
		{[]string{"--procs", "4", "--duration", "10s"}, 0, "| not in the run / not in the run |", ""},
		{[]string{"--procs", "1"}, 2, "", `membermodel: --procs: "1" is not a job size`},
		{[]string{"--procs", "4,x"}, 2, "", `--procs: "x" is not a job size`},
		{[]string{"--latency", "0s"}, 1, "", "must be positive"},
		{[]string{"extra"}, 2, "", `unexpected argument "extra"`},
	} {
		t.Run(strings.Join(c.args, " "), func(t *testing.T) {
			var out, errs bytes.Buffer
			require.Equal(t, c.code, run(c.args, &out, &errs), errs.String())
			require.Contains(t, out.String(), c.out)
			require.Contains(t, errs.String(), c.errs)
		})
	}
}
