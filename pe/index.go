package pe

import (
	"fmt"
	"strconv"
	"strings"
)

// MaxDims is the largest number of dimensions an array index may have.
const MaxDims = 6

// Index identifies an element of a chare array: 1 to 6 integer coordinates.
// It is a comparable value so it can key maps without allocation.
type Index struct {
	Dims uint8
	C    [MaxDims]int32
	// Padding to 32 bytes: copied as two aligned 16-byte moves instead of
	// two overlapping ones, a copy of a fresh copy forwards from the store
	// buffer instead of stalling (~15% of a same-PE send and dispatch).
	_ int32
}

// Idx builds an index from its coordinates. It panics on more than MaxDims
// coordinates because that is a programming error caught at the call site.
func Idx(c ...int) Index {
	var ix Index
	if len(c) == 1 { // the common case
		ix.Dims, ix.C[0] = 1, int32(c[0])
		return ix
	}
	return idxN(c)
}

func idxN(c []int) Index {
	if len(c) == 0 || len(c) > MaxDims {
		panic(fmt.Sprintf("pe.Idx: %d coordinates; an index has 1 to %d", len(c), MaxDims))
	}
	var ix Index
	ix.Dims = uint8(len(c))
	for i, v := range c {
		ix.C[i] = int32(v)
	}
	return ix
}

// IndexOf builds an index from coordinates stored as int32s (checkpoints
// keep them so); those past MaxDims are dropped (a checked snapshot has
// none).
func IndexOf(c []int32) Index {
	var ix Index
	ix.Dims = uint8(copy(ix.C[:], c))
	return ix
}

// Coords returns the index's coordinates as ints.
func (ix Index) Coords() []int {
	out := make([]int, ix.Dims)
	for i := range out {
		out[i] = int(ix.C[i])
	}
	return out
}

// Compare orders indices lexicographically (fewer dimensions first). It is
// the canonical contributor order of reductions.
func (ix Index) Compare(o Index) int {
	if ix.Dims != o.Dims {
		if ix.Dims < o.Dims {
			return -1
		}
		return 1
	}
	for i := 0; i < int(ix.Dims); i++ {
		if ix.C[i] != o.C[i] {
			if ix.C[i] < o.C[i] {
				return -1
			}
			return 1
		}
	}
	return 0
}

// Hash mixes the coordinates into a well-spread 64-bit value (used by the
// default map of sparse arrays).
func (ix Index) Hash() uint64 {
	h := uint64(14695981039346656037) ^ uint64(ix.Dims)
	for i := 0; i < int(ix.Dims); i++ {
		h ^= uint64(uint32(ix.C[i]))
		h *= 1099511628211
		h ^= h >> 29
	}
	return h
}

func (ix Index) String() string {
	var b strings.Builder
	b.WriteByte('[')
	for i := 0; i < int(ix.Dims); i++ {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Itoa(int(ix.C[i])))
	}
	b.WriteByte(']')
	return b.String()
}
