package routing

// S42 review: ring edge cases. All tests here PIN properties that hold
// (run with -race): empty and one-node rings, duplicate and empty ids,
// forced point collisions (Lookup = definition, the lowest id wins in
// every build order, monotone when the winner leaves), many vnodes,
// hostile keys (empty, huge, binary) never panic and agree with a linear
// scan, and concurrent lookups during view swaps.

import (
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
)

func s42Linear(r *Ring, h uint64) int {
	for i, p := range r.points {
		if p >= h {
			return int(r.owners[i])
		}
	}
	if len(r.points) == 0 {
		return -1
	}
	return int(r.owners[0])
}

func TestS42EmptyOneAndBadRings(t *testing.T) {
	empty := mustRing(t, nil, DefaultVNodes)
	if empty.Lookup(0) != -1 || empty.Lookup(^uint64(0)) != -1 || empty.Owner("") != "" || empty.Len() != 0 || len(empty.Arcs()) != 0 {
		t.Error("empty ring")
	}
	if p := empty.Ranking(nil, 1); len(p) != 0 {
		t.Errorf("empty ranking %v", p)
	}
	one := mustRing(t, []Member{{ID: "solo"}}, 1)
	for _, h := range []uint64{0, 1, one.points[0], one.points[0] + 1, ^uint64(0)} {
		if one.Lookup(h) != 0 {
			t.Errorf("one-node ring: Lookup(%x) = %d", h, one.Lookup(h))
		}
	}
	if a := one.Arcs(); len(a) != 1 || a[0] != 1 {
		t.Errorf("one-node arcs %v", a)
	}
	for _, ms := range [][]Member{
		{{ID: "a"}, {ID: "b"}, {ID: "a"}},
		{{ID: "a"}, {ID: ""}},
		{{ID: "a", Weight: -0.5}},
	} {
		if _, err := NewRing(ms, 10); err == nil {
			t.Errorf("accepted %v", ms)
		}
		rt := NewRouter(10)
		_ = rt.SetView(nodeIDs(3))
		if err := rt.SetView(ms); err == nil || rt.Ring().Len() != 3 {
			t.Errorf("router: bad view %v replaced the good one", ms)
		}
	}
}

// Forced collisions: member points placed by hand at equal positions.
func TestS42CollisionsResolveToLowestIDInEveryOrder(t *testing.T) {
	mk := func(ids []string, all []ringPoint) *Ring {
		r := &Ring{vnodes: 1, ids: ids, counts: make([]int32, len(ids)), all: all}
		for i := range ids {
			r.counts[i] = 1
			r.idHash = append(r.idHash, KeyHash(ids[i]))
		}
		for k, p := range all {
			if k > 0 && all[k-1].pos == p.pos {
				continue
			}
			r.points, r.owners = append(r.points, p.pos), append(r.owners, p.owner)
		}
		r.buildIndex()
		return r
	}
	// a, b, c all at 100; d at 1<<63.
	prev := mk([]string{"a", "b", "c", "d"}, []ringPoint{{100, 0, 0}, {100, 1, 0}, {100, 2, 0}, {1 << 63, 3, 0}})
	for _, h := range []uint64{0, 50, 100} {
		if prev.Member(prev.Lookup(h)) != "a" {
			t.Errorf("collision at 100: Lookup(%d)=%s want a", h, prev.Member(prev.Lookup(h)))
		}
	}
	// a leaves: b must take 100 (only a's keys move)
	r, err := NewRingFrom(prev, []Member{{ID: "b"}, {ID: "c"}, {ID: "d"}}, 1)
	if err != nil {
		t.Fatal(err)
	}
	if r.Member(r.Lookup(100)) != "b" || r.Member(r.Lookup(1<<63)) != "d" {
		t.Errorf("after a left: 100→%s, 1<<63→%s", r.Member(r.Lookup(100)), r.Member(r.Lookup(1<<63)))
	}
	// c leaves instead: nothing moves
	r, err = NewRingFrom(prev, []Member{{ID: "a"}, {ID: "b"}, {ID: "d"}}, 1)
	if err != nil {
		t.Fatal(err)
	}
	if r.Member(r.Lookup(100)) != "a" {
		t.Errorf("after c left: 100→%s", r.Member(r.Lookup(100)))
	}
	for _, h := range []uint64{0, 99, 100, 101, 1 << 63, 1<<63 + 1} {
		if r.Lookup(h) != s42Linear(r, h) {
			t.Errorf("Lookup(%x) %d linear %d", h, r.Lookup(h), s42Linear(r, h))
		}
	}
}

func TestS42ManyVNodesAndHostileKeys(t *testing.T) {
	r := mustRing(t, nodeIDs(7), 5000) // 35 000 points
	if r.Points() != 35000 {
		t.Logf("%d points (some collided?)", r.Points())
	}
	var sum float64
	for _, a := range r.Arcs() {
		sum += a
	}
	if sum < 0.999 || sum > 1.001 {
		t.Errorf("arcs sum %v", sum)
	}
	rng := rand.New(rand.NewPCG(42, 42))
	for range 20000 {
		h := rng.Uint64()
		if rng.IntN(4) == 0 {
			h = r.points[rng.IntN(len(r.points))] - uint64(rng.IntN(2))
		}
		if r.Lookup(h) != s42Linear(r, h) {
			t.Fatalf("Lookup(%x) disagrees with a linear scan", h)
		}
	}
	for _, h := range []uint64{0, 1, ^uint64(0), ^uint64(0) - 1, r.points[0], r.points[len(r.points)-1], r.points[len(r.points)-1] + 1} {
		if r.Lookup(h) != s42Linear(r, h) {
			t.Fatalf("edge Lookup(%x)", h)
		}
	}
	keys := []string{"", "\x00", strings.Repeat("\xff", 1<<20), "\xc3\x28invalid utf8", strings.Repeat("a", 10<<20)}
	for _, k := range keys {
		kh := KeyHash(k)
		if r.Owner(k) == "" {
			t.Errorf("no owner for a %d-byte key", len(k))
		}
		tr := Tree{Size: 7, Arity: 2}
		_ = r.AppendPath(nil, kh, tr, 7, PlacementDistinct, r.Ranking(nil, kh))
		_ = r.AppendPath(nil, kh, tr, 7, PlacementPaper, nil)
	}
	// hostile member ids (binary, huge) are accepted and deterministic
	ms := []Member{{ID: "\x00"}, {ID: "\x00\x00"}, {ID: strings.Repeat("z", 1<<16)}, {ID: "é"}}
	a, b := mustRing(t, ms, 50), mustRing(t, []Member{ms[3], ms[1], ms[2], ms[0]}, 50)
	if !slices.Equal(a.points, b.points) || !slices.Equal(a.owners, b.owners) {
		t.Error("member order changed the ring")
	}
}

func TestS42RouterConcurrentSwapAndLookup(t *testing.T) {
	rt := NewRouter(DefaultVNodes)
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for g := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]Hop, 0, 16)
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				r := rt.Ring()
				kh := uint64(i*(g+1)) * 0x9e3779b97f4a7c15
				n := r.Len()
				if m := r.Lookup(kh); m >= n || (n > 0 && m < 0) {
					t.Errorf("lookup %d on %d members", m, n)
					return
				}
				if n > 1 {
					buf = r.AppendPath(buf[:0], kh, Tree{Size: n, Arity: 4}, n, PlacementDistinct, r.Ranking(nil, kh))
				}
			}
		}()
	}
	for i := range 200 {
		if err := rt.SetView(nodeIDs(i % 13)); err != nil {
			t.Fatal(err)
		}
	}
	close(stop)
	wg.Wait()
}
