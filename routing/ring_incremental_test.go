package routing

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

// NewRingFrom must build exactly the ring NewRing builds, whatever the
// previous view: members joining, leaving, changing weight, all at once,
// and a previous ring built with other vnodes.
func TestNewRingFromEqualsFullBuild(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	pool := make([]string, 60)
	for i := range pool {
		pool[i] = fmt.Sprintf("node-%02d", i)
	}
	weights := []float64{0, 1, 0.5, 2}
	var prev *Ring
	for step := range 300 {
		var view []Member
		for _, id := range pool {
			if rng.IntN(3) > 0 {
				view = append(view, Member{ID: id, Weight: weights[rng.IntN(len(weights))]})
			}
		}
		if step%50 == 0 {
			view = nil // an empty view in between
		}
		vnodes := 40
		if step%97 == 0 {
			vnodes = 17 // a previous ring with other vnodes is not reused
		}
		want, err := NewRing(view, vnodes)
		if err != nil {
			t.Fatal(err)
		}
		got, err := NewRingFrom(prev, view, vnodes)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got.ids, want.ids) || !slices.Equal(got.points, want.points) || !slices.Equal(got.owners, want.owners) ||
			!slices.Equal(got.index, want.index) || got.shift != want.shift || !slices.Equal(got.idHash, want.idHash) {
			t.Fatalf("step %d: the ring built from the previous view differs from a full build", step)
		}
		prev = got
	}
}

// A collision between two members' points resolves to the lower member
// index; when that member leaves, the other's point must come back.
func TestNewRingFromKeepsCollidedPoints(t *testing.T) {
	a := &Ring{vnodes: 1, ids: []string{"a", "b"}, counts: []int32{1, 1},
		all: []ringPoint{{pos: 7, owner: 0}, {pos: 7, owner: 1}}}
	// b alone, from a ring where a won position 7: b's point is reused
	// (b keeps its count), so it must be the collided one kept in all.
	got, err := NewRingFrom(a, []Member{{ID: "b"}}, 1)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got.points, []uint64{7}) || !slices.Equal(got.owners, []int32{0}) {
		t.Errorf("after a left: points %v owners %v, want b's point at 7", got.points, got.owners)
	}
}
