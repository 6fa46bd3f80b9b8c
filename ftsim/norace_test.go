//go:build !race

package ftsim

const raceOn = false
