// Package textlist writes lists of names in the one-line messages and
// dumps the runtime prints: the first few, and a count of the rest.
package textlist

import (
	"fmt"
	"strings"
)

// Elide joins items with ", ": the first n of them and "and K more".
func Elide(items []string, n int) string {
	if len(items) > n {
		return strings.Join(items[:n], ", ") + fmt.Sprintf(" and %d more", len(items)-n)
	}
	return strings.Join(items, ", ")
}
