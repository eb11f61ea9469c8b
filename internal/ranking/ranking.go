// Package ranking orders (key, count) lists the one way every report of
// edge shows them (hottest pages, requests by result, the demo origin's
// busiest paths): highest count first, ties by key, so output is stable.
package ranking

import (
	"cmp"
	"slices"
	"strings"
)

// ByCount sorts s by count, descending, then by key.
func ByCount[T any, N cmp.Ordered](s []T, count func(T) N, key func(T) string) {
	slices.SortFunc(s, func(a, b T) int {
		if c := cmp.Compare(count(b), count(a)); c != 0 {
			return c
		}
		return strings.Compare(key(a), key(b))
	})
}
