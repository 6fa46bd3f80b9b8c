//go:build !race

package chare_test

const raceOn = false
