package main

import (
	"testing"

	"github.com/charmgo/charmgo/chare"
	"github.com/stretchr/testify/require"
)

func TestHelloRuns(t *testing.T) {
	for _, n := range []int{8, 3} {
		res := chare.RunWith(mainType, n, chare.Config{PEs: 2, WireCheck: true})
		require.NoError(t, res.Err)
		require.Equal(t, 0, res.Code)
	}
}

func TestHelloArguments(t *testing.T) {
	n, err := greetersArg(nil)
	require.NoError(t, err)
	require.Equal(t, 8, n)
	n, err = greetersArg([]string{"3"})
	require.NoError(t, err)
	require.Equal(t, 3, n)
	_, err = greetersArg([]string{"-4"})
	require.EqualError(t, err, `argument 1: "-4" is not a positive number of greeters`)
	_, err = greetersArg([]string{"1", "2"})
	require.EqualError(t, err, "2 arguments: hello takes one, the number of greeters")
}
