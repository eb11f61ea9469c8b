package ranking

import (
	"slices"
	"testing"
)

func TestByCount(t *testing.T) {
	type kv struct {
		k string
		v int
	}
	s := []kv{{"b", 1}, {"a", 1}, {"c", 5}, {"d", 0}}
	ByCount(s, func(x kv) int { return x.v }, func(x kv) string { return x.k })
	want := []kv{{"c", 5}, {"a", 1}, {"b", 1}, {"d", 0}}
	if !slices.Equal(s, want) {
		t.Fatalf("got %v, want %v", s, want)
	}
}
