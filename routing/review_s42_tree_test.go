package routing

// S42 review: tree positions and AppendPath's inputs.
//
// TestS42DistinctPlacementTreeLargerThanView DEMONSTRATED A DEFECT (failed
// before 2026-12-07; AppendPath now gives no path for such a tree): with
// PlacementDistinct and a tree with more non-root ranks than
// members, AppendPath wraps the ranking (tree.go: ranking[(i-2)%len]) and
// silently gives one cache two ranks of one page's tree — and a path that
// visits the same cache twice (A → B → A) — although the placement is
// documented as "no cache plays two ranks of one page's tree". It should
// refuse or clamp. (The cluster passes Size = ring.Len(), so it does not
// reach this today.)
//
// TestS42AppendPathBadInputsDoNotPanic DEMONSTRATED A DEFECT (failed before
// 2026-12-07):
// AppendPath panics (integer divide by zero) on PlacementDistinct with an
// empty ranking and on a Tree with Arity 0; it does not call Validate.
//
// TestS42PathProperties PINS properties that hold: leaf→child of the root, parent
// steps, consecutive duplicates collapsed, Rank = the rank nearest the
// root, one-node ring, empty ring, Size 1.

import (
	"fmt"
	"testing"
)

func TestS42DistinctPlacementTreeLargerThanView(t *testing.T) {
	r := mustRing(t, nodeIDs(5), DefaultVNodes)
	tr := Tree{Size: 21, Arity: 4} // 20 non-root ranks over 5 caches
	kh := KeyHash("/hot")
	ranking := r.Ranking(nil, kh)
	plays := map[int][]int{}
	for i := 2; i <= tr.Size; i++ {
		p := r.AppendPath(nil, kh, Tree{Size: tr.Size, Arity: 4}, i, PlacementDistinct, ranking)
		if len(p) == 0 {
			continue // refused: the ranking is shorter than the tree
		}
		plays[p[0].Member] = append(plays[p[0].Member], i) // p[0] plays rank i (the leaf end of the climb from i)
	}
	for m, ranks := range plays {
		if len(ranks) > 1 {
			t.Errorf("distinct placement: member %d plays ranks %v of one page's tree", m, ranks)
		}
	}
	deep := Tree{Size: 40, Arity: 2}
	for leaf := deep.FirstLeaf(); leaf <= deep.Size; leaf++ {
		p := r.AppendPath(nil, kh, deep, leaf, PlacementDistinct, ranking)
		seen := map[int]bool{}
		for _, h := range p {
			if seen[h.Member] {
				t.Errorf("distinct placement, %+v: leaf %d path %v visits member %d twice", deep, leaf, p, h.Member)
				return
			}
			seen[h.Member] = true
		}
	}
}

func TestS42AppendPathBadInputsDoNotPanic(t *testing.T) {
	r := mustRing(t, nodeIDs(4), 10)
	kh := KeyHash("/x")
	for name, f := range map[string]func(){
		"distinct, nil ranking": func() { r.AppendPath(nil, kh, Tree{Size: 4, Arity: 2}, 4, PlacementDistinct, nil) },
		"arity 0":               func() { r.AppendPath(nil, kh, Tree{Size: 4, Arity: 0}, 4, PlacementPaper, nil) },
	} {
		func() {
			defer func() {
				if p := recover(); p != nil {
					t.Errorf("%s: AppendPath panicked: %v", name, p)
				}
			}()
			f()
		}()
	}
}

func TestS42PathProperties(t *testing.T) {
	for _, n := range []int{1, 2, 3, 7, 50, 300} {
		r := mustRing(t, nodeIDs(n), DefaultVNodes)
		for _, d := range []int{2, 3, 4, 8} {
			tr := Tree{Size: n, Arity: d}
			if n < 2 {
				tr.Size = 9 // one cache, a tree bigger than the view
			}
			for k := range 50 {
				kh := KeyHash(fmt.Sprintf("/k%d", k))
				ranking := r.Ranking(nil, kh)
				for _, pl := range []Placement{PlacementPaper, PlacementDistinct} {
					if pl == PlacementDistinct && tr.Size-1 > n {
						continue // the wrap case is the defect above
					}
					for leaf := tr.FirstLeaf(); leaf <= tr.Size; leaf++ {
						path := r.AppendPath(nil, kh, tr, leaf, pl, ranking)
						// expand the climb rank by rank and compare
						var want []Hop
						for i := leaf; i >= 2; i = tr.Parent(i) {
							m := r.RankMember(kh, i)
							if pl == PlacementDistinct {
								m = int(ranking[i-2])
							}
							if len(want) > 0 && want[len(want)-1].Member == m {
								want[len(want)-1].Rank = i
								continue
							}
							want = append(want, Hop{i, m})
						}
						if fmt.Sprint(path) != fmt.Sprint(want) {
							t.Fatalf("n=%d d=%d leaf %d %v: path %v want %v", n, d, leaf, pl, path, want)
						}
						// The climb ends at the child of the root above the leaf (ranks 2..d+1),
						// rank 2 only for leaves under rank 2 (DESIGN's "→ rank 2 → origin" is loose).
						if len(path) == 0 || tr.Parent(path[len(path)-1].Rank) != 1 {
							t.Fatalf("n=%d d=%d leaf %d: path %v does not end below the root", n, d, leaf, path)
						}
						if len(path) > tr.Depth(leaf) {
							t.Fatalf("path longer than depth")
						}
						if pl == PlacementDistinct && len(path) != tr.Depth(leaf) {
							t.Fatalf("distinct n=%d: path %v collapsed ranks of distinct caches", n, path)
						}
					}
				}
			}
		}
	}
	empty := mustRing(t, nil, 10)
	if p := empty.AppendPath(nil, 1, Tree{Size: 10, Arity: 2}, 10, PlacementPaper, nil); len(p) != 0 {
		t.Errorf("empty ring path %v", p)
	}
	one := mustRing(t, nodeIDs(1), 10)
	if p := one.AppendPath(nil, 1, Tree{Size: 1, Arity: 2}, 1, PlacementPaper, nil); len(p) != 0 {
		t.Errorf("size-1 tree path %v", p)
	}
}
