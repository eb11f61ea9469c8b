package ringsim

import (
	"testing"

	"github.com/edgecache/edge/routing"
)

// TestBalance at v = 160: the busiest node's exact arc share, and its share
// of a million keys, stay within 1.3× the mean for 10, 100 and 1000 nodes.
func TestBalance(t *testing.T) {
	if testing.Short() {
		t.Skip("hashes a million keys")
	}
	for _, n := range []int{10, 100, 1000} {
		res, err := SimulateRing(RingConfig{Nodes: n, VNodes: routing.DefaultVNodes, Keys: 1000 * n, ViewFraction: 1, Seed: 1})
		if err != nil {
			t.Fatal(err)
		}
		if res.ArcMaxMean > 1.3 {
			t.Errorf("n=%d: arc max/mean %.3f > 1.3", n, res.ArcMaxMean)
		}
		if res.BalanceMaxMean > 1.3 {
			t.Errorf("n=%d: keys max/mean %.3f > 1.3", n, res.BalanceMaxMean)
		}
		if res.AddMovedBetweenSurvivors != 0 || res.RemoveMovedBetweenSurvivors != 0 {
			t.Errorf("n=%d: keys moved between survivors: %+v", n, res)
		}
		t.Logf("n=%d: keys max/mean %.3f min/mean %.3f, arcs max/mean %.3f", n, res.BalanceMaxMean, res.BalanceMinMean, res.ArcMaxMean)
	}
}

// TestSpreadAndLoadUnderViews: with views of at least C/t nodes, spread and
// load stay within t·log2 C (the paper's O(t log C), constant 1).
func TestSpreadAndLoadUnderViews(t *testing.T) {
	for _, tc := range []struct {
		nodes int
		frac  float64
	}{{16, 0.5}, {64, 0.5}, {64, 0.25}, {200, 0.5}} {
		res, err := SimulateRing(RingConfig{Nodes: tc.nodes, VNodes: routing.DefaultVNodes, Keys: 20000, Views: 16, ViewFraction: tc.frac, Seed: 5})
		if err != nil {
			t.Fatal(err)
		}
		if float64(res.SpreadMax) > res.Bound || res.LoadMaxRatio > res.Bound {
			t.Errorf("C=%d t=%.0f: spread max %d, load max/mean %.2f, bound %.1f", tc.nodes, 1/tc.frac, res.SpreadMax, res.LoadMaxRatio, res.Bound)
		}
	}
}

// TestOriginFetchesBoundedByDQ checks the paper's bound in the static
// model: at most d·q origin fetches per page, for hot and Zipf loads.
func TestOriginFetchesBoundedByDQ(t *testing.T) {
	for _, c := range []TreeConfig{
		{Caches: 1000, Arity: 4, Q: 2, Requests: 50000, Hot: true, Scheme: "tree", Seed: 1},
		{Caches: 1000, Arity: 4, Q: 2, Requests: 50000, Hot: true, Scheme: "tree", Placement: routing.PlacementDistinct, Seed: 1},
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
		tr := routing.Tree{Size: c.Caches, Arity: c.Arity}
		if res.MaxHops > tr.Depth(c.Caches) {
			t.Errorf("%+v: %d hops > tree depth %d", c, res.MaxHops, tr.Depth(c.Caches))
		}
	}
}

func TestHotPageLoad(t *testing.T) {
	base := TreeConfig{Caches: 1000, Arity: 4, Q: 2, Requests: 100000, Hot: true, Seed: 1}
	paper, distinct, ring := base, base, base
	paper.Scheme, distinct.Scheme, ring.Scheme = "tree", "tree", "ring"
	distinct.Placement = routing.PlacementDistinct
	rp, _ := SimulateTrees(paper)
	rd, _ := SimulateTrees(distinct)
	rr, _ := SimulateTrees(ring)
	if rp.MaxLoadRatio > 8 || rd.MaxLoadRatio > 2 || rr.MaxLoadRatio < 900 {
		t.Errorf("max load ratio: paper %.2f (≤ 8), distinct %.2f (≤ 2), ring %.2f (≈ 1000)", rp.MaxLoadRatio, rd.MaxLoadRatio, rr.MaxLoadRatio)
	}
}

// TestHybridOneOriginFetchPerPage: the hybrid scheme fetches each page from
// the origin once (like the ring) yet spreads a hot page like the tree.
func TestHybridOneOriginFetchPerPage(t *testing.T) {
	for _, p := range []routing.Placement{routing.PlacementPaper, routing.PlacementDistinct} {
		z, err := SimulateTrees(TreeConfig{Caches: 200, Arity: 4, Q: 2, Requests: 100000, ZipfS: 0.8, Pages: 20000, Scheme: "hybrid", HotThreshold: 64, Placement: p, Seed: 9})
		if err != nil {
			t.Fatal(err)
		}
		if z.MaxOriginFetchesPerPage != 1 || z.OriginFetches != z.DistinctPages {
			t.Errorf("%v zipf: %d origin fetches for %d pages (max %d per page), want one each", p, z.OriginFetches, z.DistinctPages, z.MaxOriginFetchesPerPage)
		}
	}
	hot, _ := SimulateTrees(TreeConfig{Caches: 1000, Arity: 4, Q: 2, Requests: 100000, Hot: true, Scheme: "hybrid", HotThreshold: 64, Placement: routing.PlacementDistinct, Seed: 1})
	if hot.OriginFetches != 1 || hot.MaxLoadRatio > 2 {
		t.Errorf("hot page: %d origin fetches, max load %.2f", hot.OriginFetches, hot.MaxLoadRatio)
	}
}
