package pe

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// Ids come from names alone: two processes registering the same names in
// other orders agree on every id; a name twice, a colliding name and a
// name after Seal are refused.
func TestRegistryIDsDoNotDependOnOrder(t *testing.T) {
	names := []string{"leanmd.Cell", "leanmd.Compute", "sum.[]float64", "mgr.ckptTake", "hello.Greeter.Greet", "x"}
	a, b := NewRegistry[int]("thing"), NewRegistry[int]("thing")
	for i, n := range names {
		ida, err := a.Add(n, i)
		require.NoError(t, err)
		require.Equal(t, NameID(n), ida)
	}
	for i := len(names) - 1; i >= 0; i-- {
		idb, err := b.Add(names[i], i)
		require.NoError(t, err)
		ida, _ := a.ID(names[i])
		require.Equal(t, ida, idb, names[i])
		v, ok := b.Get(idb)
		require.True(t, ok)
		require.Equal(t, i, v)
		require.Equal(t, names[i], b.Name(idb))
	}
	_, err := a.Add("x", 9)
	require.EqualError(t, err, `a thing named "x" is registered already`)
	_, ok := a.Get(NameID("never"))
	require.False(t, ok)
	a.Seal()
	_, err = a.Add("late", 1)
	require.ErrorContains(t, err, `thing "late" registered after a run started`)

	// a collision (found by search: FNV-1a 32 of these two names is equal)
	c := NewRegistry[int]("thing")
	x, y := collidingNames(t)
	_, err = c.Add(x, 1)
	require.NoError(t, err)
	_, err = c.Add(y, 2)
	require.ErrorContains(t, err, "have the same id")
}

// collidingNames finds two short names with the same id.
func collidingNames(t *testing.T) (string, string) {
	seen := map[uint32]string{}
	for i := 0; ; i++ {
		n := "n" + itoa(i)
		if o, ok := seen[NameID(n)]; ok {
			return o, n
		}
		seen[NameID(n)] = n
		if i > 1<<22 {
			t.Fatal("no collision found")
		}
	}
}

func itoa(i int) string {
	b := []byte{}
	for {
		b = append([]byte{byte('0' + i%10)}, b...)
		if i /= 10; i == 0 {
			return string(b)
		}
	}
}
