package main

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// --help exits 0; bad arguments and flags exit 2 (the one line they
// print is tested in package oa and by cmd/charmrun).
func TestExitCodes(t *testing.T) {
	require.Equal(t, 0, run([]string{"--help"}))
	for _, args := range [][]string{{"x"}, {"8", "9"}, {"8", "8", "0"}, {"--grain", "3"}, {"--chunks", "0"}, {"8", "8", "1", "1"}, {"--max-memory", "1M"}} {
		require.Equal(t, 2, run(args), "%v", args)
	}
	require.Equal(t, 0, run([]string{"4", "8", "2", "--grain", "2", "+p2", "--progress", "2"}))
}
