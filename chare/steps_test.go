package chare

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A step's time runs from its beginning to the next's. The last step has
// no next: to the end of the run it would count what the program does
// after its steps (a serial check of the result, 200 ms here, made the
// mean 2.5 times the median), so it is left out, unless it is the only one.
func TestTheLastStepIsNotTimedToTheEndOfTheRun(t *testing.T) {
	ms := func(n int) int64 { return int64(n) * int64(time.Millisecond) }
	end := time.Unix(0, ms(1000))
	s := stepSummary(map[int]int64{1: ms(0), 2: ms(10), 3: ms(20), 4: ms(31)}, end)
	require.Equal(t, SummarySteps{First: 1, Last: 4, Count: 4, Timed: 3, MeanMs: 31.0 / 3, MedianMs: 10, MinMs: 10, MaxMs: 11}, *s)
	s = stepSummary(map[int]int64{7: ms(800)}, end)
	require.Equal(t, SummarySteps{First: 7, Last: 7, Count: 1, Timed: 1, MeanMs: 200, MedianMs: 200, MinMs: 200, MaxMs: 200}, *s)
	require.Nil(t, stepSummary(nil, end))
}
