package main

import (
	"testing"

	"github.com/charmgo/charmgo/chare"
	"github.com/stretchr/testify/require"
)

func TestHelloRuns(t *testing.T) {
	for _, args := range [][]string{nil, {"3"}} {
		res := chare.Run(mainType, chare.Config{PEs: 2, Args: args, WireCheck: true})
		require.NoError(t, res.Err)
		require.Equal(t, 0, res.Code)
	}
	res := chare.Run(mainType, chare.Config{PEs: 2, Args: []string{"-4"}})
	require.ErrorContains(t, res.Err, `argument 1: "-4" is not a positive number of greeters`)
}
