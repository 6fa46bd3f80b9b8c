//go:build !race

package md

const raceOn = false
