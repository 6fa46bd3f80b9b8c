package chare

import (
	"fmt"
	"math"
	"reflect"
	"slices"

	"github.com/charmgo/charmgo/manager"
)

// Reducer combines contributions of type T into a result of type R.
//
// Every reducer's result is bitwise identical across runs, PE counts,
// migrations and recoveries. Floating-point sums (SumFloat64,
// SumFloat64s) are accumulated exactly to at least 64 bits below the
// largest term and rounded once, so they do not depend on the order or
// grouping of the terms; like the exact reducers (integer arithmetic,
// min, max, logical, barrier) they are combined as early as possible in
// the tree. Floating-point products, concatenation, sets and user
// reducers not declared exact are combined once, at the root, in
// contributor-index order.
type Reducer[T, R any] struct{ id uint32 }

type number interface {
	~int | ~int8 | ~int16 | ~int32 | ~int64 | ~uint | ~uint8 | ~uint16 | ~uint32 | ~uint64 | ~float32 | ~float64
}

func exact[T any](name string, combine func(a, b T) T, clone func(T) T) uint32 {
	return manager.RegisterReducer(&manager.Reducer{
		Name: name, Exact: true,
		Clone:   func(v any) any { return clone(v.(T)) },
		Combine: func(acc, x any) (any, error) { return combine(acc.(T), x.(T)), nil },
		Codec:   manager.MsgpackCodec[T](),
	})
}

func canonical[T, R any](name string, fold func(items []manager.Item) (R, error)) uint32 {
	return manager.RegisterReducer(&manager.Reducer{
		Name:        name,
		Fold:        func(items []manager.Item) (any, error) { return fold(items) },
		Codec:       manager.MsgpackCodec[T](),
		ResultCodec: manager.MsgpackCodec[R](),
	})
}

// floatSum registers the sum of float64 vectors (vec) or scalars, which
// accumulates in a binSum: exact to the bits that matter and independent
// of order and grouping, so contributions are folded as they come, on
// every PE, and one partial goes up each tree edge.
func floatSum[T float64 | []float64](name string) uint32 {
	terms := func(v any) ([]float64, error) {
		switch x := v.(type) {
		case []float64:
			return x, nil
		case float64:
			return []float64{x}, nil
		}
		return nil, fmt.Errorf("a %T where a float64 sum takes %s", v, reflect.TypeFor[T]())
	}
	combine := func(acc, v any) (any, error) {
		s := acc.(*binSum)
		if o, ok := v.(*binSum); ok {
			return s, s.merge(o)
		}
		x, err := terms(v)
		if err != nil {
			return nil, err
		}
		return s, s.add(x)
	}
	return manager.RegisterReducer(&manager.Reducer{
		Name: name, Exact: true,
		Start: func(v any) (any, error) {
			x, err := terms(v)
			if err != nil {
				return nil, err
			}
			s := newBinSum(len(x))
			return s, s.add(x)
		},
		Combine: combine,
		Clone:   func(v any) any { return v.(*binSum).clone() },
		Finish: func(acc any) (any, error) {
			r := acc.(*binSum).result()
			var zero T
			if _, scalar := any(zero).(float64); scalar {
				return r[0], nil
			}
			return r, nil
		},
		Consume: func(v any) {
			if x, ok := v.([]float64); ok {
				recycleFloat64s(x) // only a slice Float64s made is taken
			}
		},
		Codec:       manager.MsgpackCodec[T](),
		ResultCodec: manager.MsgpackCodec[T](),
		AccCodec: manager.Codec{
			Encode: func(v any) ([]byte, error) { return v.(*binSum).marshal(), nil },
			Decode: func(b []byte) (any, error) { return unmarshalBinSum(b) },
		},
	})
}

func same[T any](v T) T { return v }

// elementwise applies op across two equal-length slices, into a.
func elementwise[T number](a, b []T, op func(x, y T) T) ([]T, error) {
	if len(a) != len(b) {
		return nil, fmt.Errorf("contributions of %d and %d elements", len(a), len(b))
	}
	for i := range a {
		a[i] = op(a[i], b[i])
	}
	return a, nil
}

func exactSlice[T number](name string, op func(x, y T) T) uint32 {
	return manager.RegisterReducer(&manager.Reducer{
		Name: name, Exact: true,
		Clone: func(v any) any { return slices.Clone(v.([]T)) },
		Combine: func(acc, x any) (any, error) {
			return elementwise(acc.([]T), x.([]T), op)
		},
		Codec: manager.MsgpackCodec[[]T](),
	})
}

func foldScalar[T number](op func(x, y T) T) func(items []manager.Item) (T, error) {
	return func(items []manager.Item) (T, error) {
		acc := items[0].Value.(T)
		for _, it := range items[1:] {
			acc = op(acc, it.Value.(T))
		}
		return acc, nil
	}
}

func foldSlice[T number](op func(x, y T) T) func(items []manager.Item) ([]T, error) {
	return func(items []manager.Item) ([]T, error) {
		acc := slices.Clone(items[0].Value.([]T))
		for _, it := range items[1:] {
			if _, err := elementwise(acc, it.Value.([]T), op); err != nil {
				return nil, fmt.Errorf("contribution of %v: %w (first contributor %v)", it.Key, err, items[0].Key)
			}
		}
		return acc, nil
	}
}

func add[T number](x, y T) T { return x + y }
func mul[T number](x, y T) T { return x * y }
func lo[T number](x, y T) T {
	if y < x {
		return y
	}
	return x
}
func hi[T number](x, y T) T {
	if y > x {
		return y
	}
	return x
}

// Built-in reducers.
var (
	SumInt64      = Reducer[int64, int64]{exact("sum.int64", add[int64], same[int64])}
	SumInt64s     = Reducer[[]int64, []int64]{exactSlice("sum.[]int64", add[int64])}
	ProductInt64  = Reducer[int64, int64]{exact("product.int64", mul[int64], same[int64])}
	ProductInt64s = Reducer[[]int64, []int64]{exactSlice("product.[]int64", mul[int64])}
	MinInt64      = Reducer[int64, int64]{exact("min.int64", lo[int64], same[int64])}
	MinInt64s     = Reducer[[]int64, []int64]{exactSlice("min.[]int64", lo[int64])}
	MaxInt64      = Reducer[int64, int64]{exact("max.int64", hi[int64], same[int64])}
	MaxInt64s     = Reducer[[]int64, []int64]{exactSlice("max.[]int64", hi[int64])}

	SumFloat64      = Reducer[float64, float64]{floatSum[float64]("sum.float64")}
	SumFloat64s     = Reducer[[]float64, []float64]{floatSum[[]float64]("sum.[]float64")}
	ProductFloat64  = Reducer[float64, float64]{canonical[float64]("product.float64", foldScalar(mul[float64]))}
	ProductFloat64s = Reducer[[]float64, []float64]{canonical[[]float64]("product.[]float64", foldSlice(mul[float64]))}
	MinFloat64      = Reducer[float64, float64]{exact("min.float64", math.Min, same[float64])}
	MinFloat64s     = Reducer[[]float64, []float64]{exactSlice("min.[]float64", math.Min)}
	MaxFloat64      = Reducer[float64, float64]{exact("max.float64", math.Max, same[float64])}
	MaxFloat64s     = Reducer[[]float64, []float64]{exactSlice("max.[]float64", math.Max)}

	LogicalAnd = Reducer[bool, bool]{exact("and.bool", func(a, b bool) bool { return a && b }, same[bool])}
	LogicalOr  = Reducer[bool, bool]{exact("or.bool", func(a, b bool) bool { return a || b }, same[bool])}

	// Barrier carries no data: its callback runs once everyone contributed.
	Barrier = Reducer[struct{}, struct{}]{exact("barrier", func(a, b struct{}) struct{} { return a }, same[struct{}])}
)

// Indexed is one contributor's value in the result of a Set reduction.
type Indexed[T any] struct {
	Index Index
	Value T
}

// Concat returns the reducer that gathers every contribution into one slice,
// in contributor-index order.
// Make it once, at package level (var gather = chare.Concat[T]()): making
// it registers the reducer, which every process must know before a run
// starts, so made inside an entry method it panics (the entry fails with
// "registered after a run started"); the same call at package level
// twice gives the same reducer.
func Concat[T any]() Reducer[T, []T] {
	name := "concat." + reflect.TypeFor[T]().String()
	return Reducer[T, []T]{canonical[T](name, func(items []manager.Item) ([]T, error) {
		out := make([]T, len(items))
		for i, it := range items {
			out[i] = it.Value.(T)
		}
		return out, nil
	})}
}

// Set returns the reducer that gathers every contribution with its
// contributor's index, in index order.
// Make it once, at package level (var gather = chare.Set[T]()): making
// it registers the reducer, which every process must know before a run
// starts, so made inside an entry method it panics (the entry fails with
// "registered after a run started"); the same call at package level
// twice gives the same reducer.
func Set[T any]() Reducer[T, []Indexed[T]] {
	name := "set." + reflect.TypeFor[T]().String()
	return Reducer[T, []Indexed[T]]{canonical[T](name, func(items []manager.Item) ([]Indexed[T], error) {
		out := make([]Indexed[T], len(items))
		for i, it := range items {
			out[i] = Indexed[T]{it.Key, it.Value.(T)}
		}
		return out, nil
	})}
}

// NewReducer registers a user reducer. Make it once, at package level
// (var maxAbs = chare.NewReducer("maxabs", ...)): the name must be the
// same in every process, and no other reducer's; registering a name twice
// panics, and so does registering one inside an entry method (after the
// run started). combine must not modify its arguments. When exact is true
// combine must be associative and commutative to the bit, and partial
// results are combined anywhere in the tree; otherwise contributions are
// folded left to right in contributor-index order, at the root.
func NewReducer[T any](name string, combine func(a, b T) T, exact bool) Reducer[T, T] {
	r := &manager.Reducer{Name: "user." + name, Codec: manager.MsgpackCodec[T](), Exact: exact}
	if exact {
		r.Clone = func(v any) any { return v }
		r.Combine = func(acc, x any) (any, error) { return combine(acc.(T), x.(T)), nil }
	} else {
		r.Fold = func(items []manager.Item) (any, error) {
			acc := items[0].Value.(T)
			for _, it := range items[1:] {
				acc = combine(acc, it.Value.(T))
			}
			return acc, nil
		}
	}
	id, err := manager.RegisterNewReducer(r)
	if err != nil {
		panic("chare.NewReducer: " + err.Error())
	}
	return Reducer[T, T]{id}
}

// Contribute adds the running element's value to the next reduction over its
// array or group. Every element must contribute to every reduction, with the
// same reducer and callback; results arrive in reduction order.
func Contribute[T, R any](ctx *Ctx, red Reducer[T, R], v T, cb Callback[R]) {
	ctx.m.Contribute(ctx.e, 0, red.id, cb.CB, v)
}

// ContributeSection adds the running element's value to the next reduction
// over a section it belongs to.
func ContributeSection[C, T, R any](ctx *Ctx, sec SectionProxy[C], red Reducer[T, R], v T, cb Callback[R]) {
	if sec.Sec == 0 || sec.Coll != ctx.e.Coll.ID {
		ctx.Fail(fmt.Errorf("contribute to section %d: not a section of %s", sec.Sec, ctx.e.Coll.Name))
		return
	}
	ctx.m.Contribute(ctx.e, sec.Sec, red.id, cb.CB, v)
}
