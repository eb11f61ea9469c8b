package routing

// S42 review: member weights.
//
// TestS42HugeWeightIsAnErrorNotAPanic DEMONSTRATED A DEFECT (failed before
// 2026-12-07; weights above MaxWeight are an error now):
// NewRing validates weights (negative, NaN, Inf are errors) but a large
// finite weight overflows the int32 point count (ring.go: counts =
// int32(max(1, round(v·w)))) and NewRing panics in makeslice instead of
// returning an error.
//
// TestS42DistinctPlacementHonoursWeights DEMONSTRATED A DEFECT (failed
// before 2026-12-07; Ranking is weighted rendezvous hashing now):
// Member.Weight is "relative capacity", and the ring honours it, but the
// rendezvous Ranking (the home and every tree rank with the distinct
// placement, the cluster default) ignores it: a weight-4 member is home
// to the same share of pages as a weight-1 member.

import (
	"fmt"
	"testing"
)

func TestS42HugeWeightIsAnErrorNotAPanic(t *testing.T) {
	for _, w := range []float64{float64(1<<31) / DefaultVNodes, 1e12} {
		func() {
			defer func() {
				if p := recover(); p != nil {
					t.Errorf("weight %g: NewRing panicked: %v", w, p)
				}
			}()
			r, err := NewRing([]Member{{ID: "a", Weight: w}, {ID: "b"}}, DefaultVNodes)
			if err == nil {
				t.Logf("weight %g: accepted, %d points (counts %v)", w, r.Points(), r.counts)
			}
		}()
	}
}

func TestS42DistinctPlacementHonoursWeights(t *testing.T) {
	ms := []Member{{ID: "big", Weight: 4}, {ID: "a"}, {ID: "b"}, {ID: "c"}}
	r := mustRing(t, ms, DefaultVNodes)
	big := r.IndexOf("big")
	ringHome, rankHome := 0, 0
	const pages = 20000
	for k := range pages {
		kh := KeyHash(fmt.Sprintf("/p%d", k))
		if r.RankMember(kh, 2) == big {
			ringHome++
		}
		if int(r.Ranking(nil, kh)[0]) == big {
			rankHome++
		}
	}
	t.Logf("weight-4 member of 4 (total weight 7): home of %.3f of pages with the paper placement, %.3f with distinct (fair share 4/7 = %.3f)",
		float64(ringHome)/pages, float64(rankHome)/pages, 4.0/7)
	if f := float64(rankHome) / pages; f < 0.45 {
		t.Errorf("distinct placement: the weight-4 member is home to %.3f of pages, want ≈ 4/7 (weights ignored by Ranking)", f)
	}
}
