package routing

import (
	"sync"
	"testing"
)

func TestTreeShape(t *testing.T) {
	for _, tr := range []Tree{{Size: 1, Arity: 2}, {Size: 2, Arity: 4}, {Size: 10, Arity: 2}, {Size: 21, Arity: 4}, {Size: 1000, Arity: 4}, {Size: 1001, Arity: 3}} {
		fl := tr.FirstLeaf()
		if tr.Size > 1 && fl != (tr.Size-2)/tr.Arity+2 {
			t.Fatalf("%+v: first leaf %d", tr, fl)
		}
		for i := 2; i <= tr.Size; i++ {
			p := tr.Parent(i)
			lo, hi := tr.Children(p)
			if i < lo || i > hi {
				t.Fatalf("%+v: %d not among the children %d..%d of its parent %d", tr, i, lo, hi, p)
			}
			lo, hi = tr.Children(i)
			if tr.IsLeaf(i) != (lo > tr.Size) {
				t.Fatalf("%+v: rank %d leaf=%v but children %d..%d", tr, i, tr.IsLeaf(i), lo, hi)
			}
		}
		// Every non-root rank has exactly one parent: children ranges tile 2..Size.
		next := 2
		for i := 1; i <= tr.Size && next <= tr.Size; i++ {
			lo, hi := tr.Children(i)
			if lo > tr.Size {
				break
			}
			if lo != next {
				t.Fatalf("%+v: children of %d start at %d, want %d", tr, i, lo, next)
			}
			next = hi + 1
		}
	}
	tr := Tree{Size: 21, Arity: 4} // full: 1, 4, 16 nodes per level
	if tr.Depth(1) != 0 || tr.Depth(5) != 1 || tr.Depth(6) != 2 || tr.Depth(21) != 2 {
		t.Errorf("depths %d %d %d %d", tr.Depth(1), tr.Depth(5), tr.Depth(6), tr.Depth(21))
	}
}

func TestPathClimbsToRankTwoAndCollapses(t *testing.T) {
	r := mustRing(t, nodeIDs(50), DefaultVNodes)
	tr := Tree{Size: 50, Arity: 4}
	kh := KeyHash("/page")
	for leaf := tr.FirstLeaf(); leaf <= tr.Size; leaf++ {
		path := r.AppendPath(nil, kh, tr, leaf, PlacementPaper, nil)
		if len(path) == 0 || len(path) > tr.Depth(leaf) {
			t.Fatalf("leaf %d: path %v longer than depth %d", leaf, path, tr.Depth(leaf))
		}
		if path[len(path)-1].Rank != 2 && tr.Parent(path[len(path)-1].Rank) != 1 {
			t.Fatalf("leaf %d: path ends at rank %d, not below the root", leaf, path[len(path)-1].Rank)
		}
		for i := 1; i < len(path); i++ {
			if path[i].Member == path[i-1].Member {
				t.Fatalf("leaf %d: consecutive duplicates in %v", leaf, path)
			}
		}
		if path[0].Member != r.RankMember(kh, leaf) && path[0].Rank < leaf {
			t.Fatalf("leaf %d: first hop %v", leaf, path[0])
		}
	}
	// One cache: every rank is that cache, so the path is one hop.
	one := mustRing(t, nodeIDs(1), 10)
	if p := one.AppendPath(nil, kh, Tree{Size: 30, Arity: 2}, 30, PlacementPaper, nil); len(p) != 1 {
		t.Errorf("single-cache path %v", p)
	}
}

func TestDistinctPlacementNeverRepeatsACache(t *testing.T) {
	r := mustRing(t, nodeIDs(100), DefaultVNodes)
	tr := Tree{Size: 100, Arity: 4}
	kh := KeyHash("/hot")
	ranking := r.Ranking(nil, kh)
	seen := map[int]int{}
	for i := 2; i <= tr.Size; i++ {
		m := int(ranking[i-2])
		if prev, dup := seen[m]; dup {
			t.Fatalf("member %d plays ranks %d and %d", m, prev, i)
		}
		seen[m] = i
	}
}

func TestPathAllocatesNothing(t *testing.T) {
	r := mustRing(t, nodeIDs(100), DefaultVNodes)
	tr := Tree{Size: 100, Arity: 4}
	buf := make([]Hop, 0, 16)
	kh := KeyHash("/a")
	allocs := testing.AllocsPerRun(1000, func() {
		buf = r.AppendPath(buf[:0], kh, tr, tr.Size, PlacementPaper, nil)
		_ = r.Lookup(kh)
	})
	if allocs != 0 {
		t.Errorf("%.1f allocations per path", allocs)
	}
}

// TestOriginFetchesBoundedByDQ checks the paper's bound in the static
// model: at most d·q origin fetches per page, for hot and Zipf loads.
func TestOriginFetchesBoundedByDQ(t *testing.T) {
	for _, c := range []TreeSimConfig{
		{Caches: 1000, Arity: 4, Q: 2, Requests: 50000, Hot: true, Scheme: "tree", Seed: 1},
		{Caches: 1000, Arity: 4, Q: 2, Requests: 50000, Hot: true, Scheme: "tree", Placement: PlacementDistinct, Seed: 1},
		{Caches: 100, Arity: 2, Q: 3, Requests: 50000, ZipfS: 0.9, Pages: 500, Scheme: "tree", Seed: 2},
		{Caches: 64, Arity: 8, Q: 1, Requests: 20000, Hot: true, Scheme: "tree", Seed: 3},
	} {
		res, err := SimulateTrees(c)
		if err != nil {
			t.Fatal(err)
		}
		if res.MaxOriginFetchesPerPage > c.Arity*c.Q {
			t.Errorf("%+v: %d origin fetches for one page > d·q = %d", c, res.MaxOriginFetchesPerPage, c.Arity*c.Q)
		}
		tr := Tree{Size: c.Caches, Arity: c.Arity}
		if res.MaxHops > tr.Depth(c.Caches) {
			t.Errorf("%+v: %d hops > tree depth %d", c, res.MaxHops, tr.Depth(c.Caches))
		}
	}
}

func TestHotPageLoad(t *testing.T) {
	base := TreeSimConfig{Caches: 1000, Arity: 4, Q: 2, Requests: 100000, Hot: true, Seed: 1}
	paper, distinct, ring := base, base, base
	paper.Scheme, distinct.Scheme, ring.Scheme = "tree", "tree", "ring"
	distinct.Placement = PlacementDistinct
	rp, _ := SimulateTrees(paper)
	rd, _ := SimulateTrees(distinct)
	rr, _ := SimulateTrees(ring)
	if rp.MaxLoadRatio > 8 || rd.MaxLoadRatio > 2 || rr.MaxLoadRatio < 900 {
		t.Errorf("max load ratio: paper %.2f (≤ 8), distinct %.2f (≤ 2), ring %.2f (≈ 1000)", rp.MaxLoadRatio, rd.MaxLoadRatio, rr.MaxLoadRatio)
	}
}

// TestQRuleConcurrent: concurrent requests count exactly, and exactly the
// requests from the q-th on are told to store.
func TestQRuleConcurrent(t *testing.T) {
	c := NewCounters(1000, 2)
	const n = 64
	var wg sync.WaitGroup
	var mu sync.Mutex
	stores := 0
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, store := c.Observe(7, 3); store {
				mu.Lock()
				stores++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if stores != n-1 {
		t.Errorf("%d requests told to store, want %d (all but the first)", stores, n-1)
	}
	if cnt, _ := c.Observe(7, 3); cnt != n+1 {
		t.Errorf("count %d, want %d", cnt, n+1)
	}
	if cnt, store := c.Observe(7, 4); cnt != 1 || store {
		t.Errorf("another rank shares the counter: %d %v", cnt, store)
	}
	small := NewCounters(2, 2)
	for p := range uint64(10) {
		small.Observe(p, 2)
	}
	if small.Len() > 2 {
		t.Errorf("counters not bounded: %d", small.Len())
	}
}

// TestHybridOneOriginFetchPerPage: the hybrid scheme fetches each page from
// the origin once (like the ring) yet spreads a hot page like the tree.
func TestHybridOneOriginFetchPerPage(t *testing.T) {
	for _, p := range []Placement{PlacementPaper, PlacementDistinct} {
		z, err := SimulateTrees(TreeSimConfig{Caches: 200, Arity: 4, Q: 2, Requests: 100000, ZipfS: 0.8, Pages: 20000, Scheme: "hybrid", HotThreshold: 64, Placement: p, Seed: 9})
		if err != nil {
			t.Fatal(err)
		}
		if z.MaxOriginFetchesPerPage != 1 || z.OriginFetches != z.DistinctPages {
			t.Errorf("%v zipf: %d origin fetches for %d pages (max %d per page), want one each", p, z.OriginFetches, z.DistinctPages, z.MaxOriginFetchesPerPage)
		}
	}
	hot, _ := SimulateTrees(TreeSimConfig{Caches: 1000, Arity: 4, Q: 2, Requests: 100000, Hot: true, Scheme: "hybrid", HotThreshold: 64, Placement: PlacementDistinct, Seed: 1})
	if hot.OriginFetches != 1 || hot.MaxLoadRatio > 2 {
		t.Errorf("hot page: %d origin fetches, max load %.2f", hot.OriginFetches, hot.MaxLoadRatio)
	}
}
