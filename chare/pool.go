package chare

import (
	"math/bits"
	"sync"
	"unsafe"
)

// Float64s returns a zeroed []float64 of length n. A slice contributed to a
// SumFloat64s reduction is handed over, and once the reduction has added
// it (at once, on the contributor's PE) the runtime puts it back here, so
// a program that builds its contributions with Float64s (LeanMD's force
// arrays) allocates almost nothing per step, and reuses memory still in
// cache. Never contribute or send the same slice twice.
func Float64s(n int) []float64 {
	c := sizeClass(n)
	if c < 0 {
		return make([]float64, n)
	}
	if p, ok := float64Pools[c].Get().(*float64); ok {
		s := unsafe.Slice(p, 1<<c)[:n]
		clear(s)
		return s
	}
	return make([]float64, n, 1<<c)
}

const (
	minClass = 6  // 64 float64s
	maxClass = 20 // 1 Mi float64s
)

var float64Pools [maxClass + 1]sync.Pool

func sizeClass(n int) int {
	if n <= 0 {
		return -1
	}
	c := bits.Len(uint(n - 1))
	if c < minClass {
		c = minClass
	}
	if c > maxClass {
		return -1
	}
	return c
}

// recycleFloat64s takes back a slice Float64s made (recognized by its
// power-of-two capacity in the pooled range).
func recycleFloat64s(s []float64) {
	c := cap(s)
	if c == 0 || c&(c-1) != 0 {
		return
	}
	class := bits.Len(uint(c)) - 1
	if class < minClass || class > maxClass {
		return
	}
	// The pool keeps the array's first element: a pointer goes into an
	// interface without an allocation, where &s allocated a slice header
	// for every slice taken back. Its class gives the length back.
	float64Pools[class].Put(unsafe.SliceData(s))
}
