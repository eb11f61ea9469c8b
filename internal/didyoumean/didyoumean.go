// Package didyoumean suggests the known name nearest to a misspelt one,
// for errors that name an unknown config key, rule field or environment
// variable. Hand-written: it is one edit-distance function.
package didyoumean

import "fmt"

// Suggest returns ` (did you mean "x"?)` for the name in known nearest to
// name, when one is within a few edits of it, else "".
func Suggest(name string, known []string) string {
	if best := Nearest(name, known); best != "" {
		return fmt.Sprintf(" (did you mean %q?)", best)
	}
	return ""
}

// Nearest returns the name in known nearest to name within a third of its
// length in edits (at most 3), or "".
func Nearest(name string, known []string) string {
	limit := min(3, max(1, len(name)/3))
	best, bestD := "", limit+1
	for _, c := range known {
		if d := Distance(name, c); d < bestD {
			best, bestD = c, d
		}
	}
	return best
}

// Distance is the Levenshtein distance between a and b (bytes).
func Distance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			c := 1
			if a[i-1] == b[j-1] {
				c = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+c)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
