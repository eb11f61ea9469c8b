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
