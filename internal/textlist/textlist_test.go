package textlist

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestElide(t *testing.T) {
	for _, c := range []struct {
		items []string
		n     int
		want  string
	}{
		{nil, 3, ""},
		{[]string{"a"}, 3, "a"},
		{[]string{"a", "b", "c"}, 3, "a, b, c"},
		{[]string{"a", "b", "c", "d", "e"}, 3, "a, b, c and 2 more"},
	} {
		require.Equal(t, c.want, Elide(c.items, c.n), "%v %d", c.items, c.n)
	}
}
