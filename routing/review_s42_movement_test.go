package routing

// S42 review: movement of tree positions when one of n caches leaves.
//
// TestS42PaperPlacementMovesOnlyTheLeaversPositions PINS a property that
// holds: with the paper placement a (page, rank) position moves only if the
// leaving cache played it (≈ 1/n, never between survivors).
//
// TestS42DistinctPlacementMovesTreePositionsOfUnchangedHomes measured what
// the review reported as a defect and is kept as the distinct placement's
// documented price (docs/routing.md, "What distinct costs"): rank i →
// ranking[i−2], so one cache leaving shifts every rank below it in the
// page's rendezvous ranking, and tree positions move between surviving
// caches even for pages whose home did not change (9.7 % of them at n = 5,
// 41 % at 20, 48 % at 60, against none for the paper placement). Homes do
// not move (TestS42DistinctHomeIsMonotone), so the cost is hot pages'
// lower-rank copies made again from their home, not origin fetches. The
// test holds the measured bound: a change that moves more fails.

import (
	"strconv"
	"testing"
)

func s42Without(ms []Member, victim int) []Member {
	return append(append([]Member{}, ms[:victim]...), ms[victim+1:]...)
}

// s42Moved measures, over pages whose home (rank 2) kept its cache, the
// fraction of (page, rank) positions 2..n-1 whose cache changed although
// the cache that played it before is still in the view.
func s42Moved(t *testing.T, n int, p Placement) (frac float64, moved, total int, allFrac float64) {
	ms := nodeIDs(n)
	before := mustRing(t, ms, DefaultVNodes)
	victim := n / 3
	gone := ms[victim].ID
	after := mustRing(t, s42Without(ms, victim), DefaultVNodes)
	ta := Tree{Size: n - 1, Arity: 4} // the cluster uses Size = ring.Len(); ranks 2..n-1 exist in both trees
	allMoved, allTotal := 0, 0
	member := func(r *Ring, kh uint64, rank int, ranking []int32) string {
		if p == PlacementDistinct {
			return r.Member(int(ranking[rank-2]))
		}
		return r.Member(r.RankMember(kh, rank))
	}
	for k := range 4000 {
		kh := KeyHash("/page-" + strconv.Itoa(k))
		rb, ra := before.Ranking(nil, kh), after.Ranking(nil, kh)
		if member(before, kh, 2, rb) != member(after, kh, 2, ra) {
			continue // the home moved: not counted
		}
		for rank := 2; rank <= ta.Size; rank++ {
			was, is := member(before, kh, rank, rb), member(after, kh, rank, ra)
			allTotal++
			if was != is {
				allMoved++
			}
			if was == gone {
				continue // the leaver's positions must move
			}
			total++
			if was != is {
				moved++
			}
		}
	}
	return float64(moved) / float64(total), moved, total, float64(allMoved) / float64(allTotal)
}

func TestS42PaperPlacementMovesOnlyTheLeaversPositions(t *testing.T) {
	for _, n := range []int{5, 20, 60} {
		frac, moved, total, all := s42Moved(t, n, PlacementPaper)
		t.Logf("paper n=%d: %d of %d survivor positions moved (%.3f); all positions moved %.3f (1/n = %.3f)", n, moved, total, frac, all, 1/float64(n))
		if moved != 0 {
			t.Errorf("paper n=%d: %d positions moved between surviving caches", n, moved)
		}
	}
}

func TestS42DistinctPlacementMovesTreePositionsOfUnchangedHomes(t *testing.T) {
	for _, n := range []int{5, 20, 60} {
		frac, moved, total, all := s42Moved(t, n, PlacementDistinct)
		t.Logf("distinct n=%d: %d of %d survivor positions moved (%.3f); all positions moved %.3f (1/n = %.3f)", n, moved, total, frac, all, 1/float64(n))
		if frac > 0.5 {
			t.Errorf("distinct n=%d: one cache left; %.1f%% of the tree positions (pages whose home stayed) held by surviving caches moved to another survivor (%.1f%% of all positions moved; consistent hashing: only the leaver's, ≈ %.1f%%): over the documented half",
				n, 100*frac, 100*all, 100/float64(n))
		}
	}
}

// TestS42RingKeyMovementIsOneOverN PINS a property that holds: one of n
// nodes leaving moves exactly its own keys, ≈ 1/n of them, none between
// survivors; a join moves keys only to the new node.
func TestS42RingKeyMovementIsOneOverN(t *testing.T) {
	keys := simKeys(50000)
	for _, n := range []int{2, 10, 50, 200} {
		ms := nodeIDs(n + 1)
		before := mustRing(t, ms[:n], DefaultVNodes)
		for _, victim := range []int{0, n / 2, n - 1} {
			after, err := NewRingFrom(before, s42Without(ms[:n], victim), DefaultVNodes)
			if err != nil {
				t.Fatal(err)
			}
			moved := 0
			for _, k := range keys {
				a, b := before.Member(before.Lookup(k)), after.Member(after.Lookup(k))
				if a != b {
					if a != ms[victim].ID {
						t.Fatalf("n=%d: key moved between survivors %s→%s", n, a, b)
					}
					moved++
				}
			}
			f := float64(moved) / float64(len(keys))
			if f > 1.4/float64(n) {
				t.Errorf("n=%d victim %d: %.4f of keys moved, 1/n = %.4f", n, victim, f, 1/float64(n))
			}
		}
		joined, err := NewRingFrom(before, ms, DefaultVNodes)
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range keys {
			a, b := before.Member(before.Lookup(k)), joined.Member(joined.Lookup(k))
			if a != b && b != ms[n].ID {
				t.Fatalf("n=%d: a join moved a key %s→%s", n, a, b)
			}
		}
	}
}

// TestS42DistinctHomeIsMonotone PINS a property that holds: with the
// distinct placement the home (ranking[0], rank 2) moves only when the
// home itself leaves, and a join takes homes only for the new cache.
func TestS42DistinctHomeIsMonotone(t *testing.T) {
	for _, n := range []int{3, 20, 100} {
		ms := nodeIDs(n + 1)
		before := mustRing(t, ms[:n], DefaultVNodes)
		after := mustRing(t, s42Without(ms[:n], n/2), DefaultVNodes)
		joined := mustRing(t, ms, DefaultVNodes)
		moved := 0
		for k := range 20000 {
			kh := KeyHash("/h" + strconv.Itoa(k))
			h0 := before.Member(int(before.Ranking(nil, kh)[0]))
			h1 := after.Member(int(after.Ranking(nil, kh)[0]))
			h2 := joined.Member(int(joined.Ranking(nil, kh)[0]))
			if h0 != h1 {
				moved++
				if h0 != ms[n/2].ID {
					t.Fatalf("n=%d: home moved %s→%s though %s left", n, h0, h1, ms[n/2].ID)
				}
			}
			if h0 != h2 && h2 != ms[n].ID {
				t.Fatalf("n=%d: a join moved a home %s→%s", n, h0, h2)
			}
		}
		t.Logf("n=%d: %.4f of homes moved (1/n = %.4f)", n, float64(moved)/20000, 1/float64(n))
	}
}
