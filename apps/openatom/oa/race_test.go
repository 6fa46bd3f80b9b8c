//go:build race

package oa

const raceOn = true
