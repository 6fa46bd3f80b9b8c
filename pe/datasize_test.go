package pe

import (
	"reflect"
	"testing"

	"github.com/stretchr/testify/require"
)

type dsSized struct{ N int }

func (s dsSized) WireSize() int { return 100 + s.N }

type dsPtrSized struct{ N int }

func (s *dsPtrSized) WireSize() int { return 1000 + s.N }

type dsCycle struct {
	V    int64
	Next *dsCycle
}

// A payload is sized by its data: numbers at their sizes, strings, slices
// and maps by what they hold, structs by their exported fields, pointers
// by what they point at; a Sizer inside says its own; a channel or a
// function has no size.
func TestPayloadSize(t *testing.T) {
	type ghost struct {
		Iter int64
		Dir  uint8
		Vals []float64
	}
	type nested struct {
		Name   string
		Ghosts []ghost
		Tags   map[string]int32
		Ptr    *ghost
		Any    any
		hidden [100]byte
	}
	cyc := &dsCycle{V: 1}
	cyc.Next = cyc
	for _, c := range []struct {
		name string
		v    any
		want int
	}{
		{"nil", nil, 0},
		{"float64", 1.5, 8},
		{"a named int", Kind(3), 1},
		{"[3]int32", [3]int32{}, 12},
		{"[]float64", []float64{1, 2}, 16},
		{"string", "héllo", 6},
		{"a struct of fixed fields and a slice", ghost{Vals: make([]float64, 256)}, 8 + 1 + 2048},
		{"a pointer to it", &ghost{Vals: make([]float64, 3)}, 8 + 1 + 24},
		{"a slice of structs", []ghost{{Vals: make([]float64, 1)}, {}}, (8 + 1 + 8) + (8 + 1)},
		{"nested", nested{Name: "ab", Ghosts: []ghost{{}}, Tags: map[string]int32{"x": 1, "yz": 2}, Ptr: &ghost{}, Any: int64(3)}, 2 + 9 + (1 + 4 + 2 + 4) + 9 + 8},
		{"a nil pointer and interface", nested{}, 0},
		{"a Sizer", dsSized{N: 5}, 105},
		{"a Sizer inside", struct{ S dsSized }{dsSized{N: 1}}, 101},
		{"a pointer Sizer inside a slice", []dsPtrSized{{N: 1}, {N: 2}}, 1001 + 1002},
		{"a cycle", cyc, 8 * maxDataDepth},
		{"a channel", make(chan int), -1},
		{"a function inside", struct{ F func() }{func() {}}, -1},
	} {
		t.Run(c.name, func(t *testing.T) {
			require.Equal(t, c.want, PayloadSize(c.v))
		})
	}
}

// BenchmarkPayloadSize_Struct is the cost of sizing a ghost struct
// message that does not implement Sizer (each send counts its bytes).
func BenchmarkPayloadSize_Struct(b *testing.B) {
	type ghost struct {
		Iter int64
		Dir  uint8
		Vals []float64
	}
	var v any = ghost{Vals: make([]float64, 256)}
	b.ReportAllocs()
	for b.Loop() {
		if PayloadSize(v) != 8+1+2048 {
			b.Fatal(PayloadSize(v))
		}
	}
}

var _ = reflect.TypeOf
