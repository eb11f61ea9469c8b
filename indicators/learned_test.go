package indicators

import (
	"math"
	"math/rand/v2"
	"strconv"
	"testing"
)

// TestCountingFilterForgetsEvictedKeys: the authors' up-to-date filter is a
// counting Bloom filter from which an evicted key is removed, so Δ0 (bits
// set in the advertised snapshot and clear now) is measured and fnr is
// taken over the bits of the keys still held. A plain filter keeps the
// evicted key's bits until the next advertisement.
func TestCountingFilterForgetsEvictedKeys(t *testing.T) {
	for _, counting := range []bool{false, true} {
		cfg := DefaultFilterConfig(1000)
		cfg.Counting, cfg.EstimateEvery = counting, 1
		f, err := NewFilter(cfg)
		if err != nil {
			t.Fatal(err)
		}
		key := func(i int) []byte { return []byte("k" + strconv.Itoa(i)) }
		for i := range 500 {
			f.Insert(key(i))
		}
		f.Advertise(func(yield func([]byte) bool) {
			for i := range 500 {
				if !yield(key(i)) {
					return
				}
			}
		})
		for i := range 200 { // 200 leave, 100 arrive
			f.Evict(key(i))
		}
		for i := 500; i < 600; i++ {
			f.Insert(key(i))
		}
		f.mu.Lock()
		up, adv := f.up.BitSet(), f.adv.BitSet()
		b1up := float64(up.Count())
		d1 := float64(up.DifferenceCardinality(adv))
		d0 := float64(adv.DifferenceCardinality(up))
		evictedPositive := f.up.Test(key(0))
		f.mu.Unlock()
		if counting != (d0 > 0) {
			t.Fatalf("counting=%v: Δ0 = %v", counting, d0)
		}
		if counting == evictedPositive {
			t.Fatalf("counting=%v: evicted key still in the up-to-date filter: %v", counting, evictedPositive)
		}
		fpr, fnr := f.Estimates()
		k := float64(f.K())
		if want := math.Pow((b1up-d1+d0)/float64(f.M()), k); math.Abs(fpr-want) > 1e-12 {
			t.Fatalf("counting=%v: fpr %v, want ((B1−Δ1+Δ0)/m)^k = %v", counting, fpr, want)
		}
		if want := 1 - math.Pow((b1up-d1)/b1up, k); math.Abs(fnr-want) > 1e-12 {
			t.Fatalf("counting=%v: fnr %v, want %v", counting, fnr, want)
		}
		// Every held key still tests positive on the up-to-date filter.
		for i := 200; i < 600; i++ {
			f.mu.Lock()
			ok := f.up.Test(key(i))
			f.mu.Unlock()
			if !ok {
				t.Fatalf("counting=%v: held key %d lost", counting, i)
			}
		}
	}
}

// TestNuCalibration: before any outcome ν is the derived one; with many
// outcomes a bin's realised hit rate replaces the derived one (the paper's
// estimate predicting 90 % hits where 20 % came gives ν ≈ 0.8); a bin with
// no outcomes borrows the others' κ; and, on a fresh peer, a few misses at
// a small predicted chance, which the derived ν expects, do not move it
// enough to stop probing there.
func TestNuCalibration(t *testing.T) {
	var c NuCalibration
	if got := c.Nu(0.3); math.Abs(got-0.3) > 1e-12 {
		t.Fatalf("no outcomes: ν %v, want the derived 0.3", got)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 3000 {
		c.Observe(0.9, rng.Float64() < 0.2)
	}
	if got := c.Nu(0.1); math.Abs(got-0.8) > 0.05 {
		t.Fatalf("ν %v after 3000 outcomes at 20 %% realised, want ≈ 0.8", got)
	}
	if k := c.Kappa(); math.Abs(k-0.2/0.9) > 0.05 {
		t.Fatalf("κ %v, want ≈ %v", k, 0.2/0.9)
	}
	if got, want := c.Nu(0.96), 1-0.04*c.Kappa(); math.Abs(got-want) > 1e-12 {
		t.Fatalf("an unvisited bin: ν %v, want the derived chance scaled by κ, %v", got, want)
	}
	var fresh NuCalibration
	for range 9 {
		fresh.Observe(0.04, false)
	}
	if got := fresh.Nu(0.96); 1-got < 0.03 {
		t.Fatalf("9 misses at 4 %% predicted moved ν to %v: the bin would never be probed again", got)
	}
}

// TestSelectNoWorse: exact for up to ExactUpTo candidates, and beyond that
// never priced worse than Select's set or fno's (Select over the positive
// candidates alone).
func TestSelectNoWorse(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for iter := range 2000 {
		n := 1 + rng.IntN(24)
		cands := make([]Candidate, n)
		var negative uint64
		for j := range cands {
			cands[j] = Candidate{Cost: float64(1 + rng.IntN(100)), Rho: rng.Float64()}
			if rng.IntN(2) == 0 {
				negative |= 1 << uint(j)
			}
		}
		m := float64(50 + rng.IntN(500))
		got := Cost(cands, SelectNoWorse(cands, m, negative), m)
		if n <= ExactUpTo {
			if want := Cost(cands, BruteForce(cands, m), m); math.Abs(got-want) > 1e-9 {
				t.Fatalf("iter %d, n %d: φ %v, optimum %v", iter, n, got, want)
			}
			continue
		}
		pos := make([]Candidate, n)
		copy(pos, cands)
		for j := range pos {
			if negative&(1<<uint(j)) != 0 {
				pos[j].Rho = 1
			}
		}
		if a, b := Cost(cands, Select(cands, m), m), Cost(cands, Select(pos, m), m); got > a+1e-9 || got > b+1e-9 {
			t.Fatalf("iter %d, n %d: φ %v, Select %v, fno's set %v", iter, n, got, a, b)
		}
	}
}

// FuzzNuCalibration: any sequence of outcomes and derived values keeps ν in
// [0, 1] and never NaN.
func FuzzNuCalibration(f *testing.F) {
	f.Add([]byte{0, 255, 128, 3, 7}, 0.5)
	f.Fuzz(func(t *testing.T, outcomes []byte, derived float64) {
		var c NuCalibration
		for _, b := range outcomes {
			c.Observe(float64(b)/200-0.1, b%3 == 0)
		}
		if nu := c.Nu(derived); nu < 0 || nu > 1 || math.IsNaN(nu) {
			t.Fatalf("ν %v for derived %v", nu, derived)
		}
	})
}

// BenchmarkSelectNoWorse: the exact search up to ExactUpTo candidates and
// the two PGM runs beyond (docs/indicators.md, "Selection cost").
func BenchmarkSelectNoWorse(b *testing.B) {
	rng := rand.New(rand.NewPCG(12, 13))
	for _, n := range []int{3, 5, 8, 10, 16} {
		c := randomCands(rng, n, false)
		negative := uint64(0b1010101010101010) & (1<<uint(n) - 1)
		b.Run("n="+strconv.Itoa(n), func(b *testing.B) {
			b.ReportAllocs()
			var sink uint64
			for b.Loop() {
				sink ^= SelectNoWorse(c, 100, negative)
			}
			_ = sink
		})
	}
}

// TestNuCalibrationKeepsCertaintyAndForgets: a derived ν of 1 (fnr = 0
// just after an advertisement) is never moved by what other probes found;
// and a collapsed κ drifts back to the derived ν as requests pass without
// probes (Age), so that the peer is tried again (found by review: it
// stayed collapsed until the peer restarted).
func TestNuCalibrationKeepsCertaintyAndForgets(t *testing.T) {
	var c NuCalibration
	for range 50 {
		c.Observe(0.008, true)
	}
	if got := c.Nu(1); got != 1 {
		t.Fatalf("ν %v for a derived 1, want 1", got)
	}
	var collapsed NuCalibration
	for range 100 {
		collapsed.Observe(0.5, false)
	}
	if got := collapsed.Nu(0.2); got < 0.85 {
		t.Fatalf("after 100 misses ν %v for a derived 0.2, want it near 1", got)
	}
	for range 5 * CalibrationMemory {
		collapsed.Age()
	}
	if got := collapsed.Nu(0.2); math.Abs(got-0.2) > 0.05 {
		t.Fatalf("after %d requests without probes ν %v, want back near the derived 0.2", 5*CalibrationMemory, got)
	}
}

// TestCountingFilterIgnoresUnknownEvictions: evicting a key the counting
// filter never held (or twice) must not clear the bits of keys it holds,
// and an advertisement rebuilds the counts from the key set.
func TestCountingFilterIgnoresUnknownEvictions(t *testing.T) {
	cfg := DefaultFilterConfig(1000)
	cfg.Counting = true
	f, err := NewFilter(cfg)
	if err != nil {
		t.Fatal(err)
	}
	key := func(i int) []byte { return []byte("k" + strconv.Itoa(i)) }
	for i := range 50 {
		f.Insert(key(i))
	}
	for i := 1000; i < 1200; i++ {
		f.Evict(key(i))
	}
	f.Evict(key(0))
	f.Evict(key(0))
	snap := f.Advertise(func(yield func([]byte) bool) {
		for i := 1; i < 50; i++ {
			if !yield(key(i)) {
				return
			}
		}
	})
	for i := 1; i < 50; i++ {
		f.mu.Lock()
		ok := f.up.Test(key(i)) && f.adv.Test(key(i))
		f.mu.Unlock()
		if !ok {
			t.Fatalf("held key %d lost from the filter (snapshot epoch %d)", i, snap.Epoch)
		}
	}
}

// TestCalibrationPoolSharesWhatPeersShowed: a replica with no outcomes of
// its own starts from what its client's other replicas' negatives showed
// (the pool's κ), not from the derived ν; its own outcomes outweigh the
// pool once it has some; a replica without a pool, or a derived ν of 1, is
// unchanged; and the pool forgets as the replicas do.
func TestCalibrationPoolSharesWhatPeersShowed(t *testing.T) {
	var pool CalibrationPool
	var a, b, alone Replica
	a.SharePool(&pool)
	b.SharePool(&pool)
	// a's negatives were promised 90 % hits and came 5 % of the time.
	for i := range 2000 {
		a.ObserveHomeNegativeProbe(0.1, i%20 == 0)
	}
	if k := pool.Kappa(); math.Abs(k-0.05/0.9) > 0.03 {
		t.Fatalf("pool κ %v, want ≈ %v", k, 0.05/0.9)
	}
	// b has no outcomes yet: its ν starts from the pool's κ.
	var fresh NuCalibration
	if got, want := fresh.NuWith(0.1, pool.Kappa()), 1-0.9*pool.Kappa(); math.Abs(got-want) > 1e-9 {
		t.Fatalf("fresh replica with the pool: ν %v, want %v", got, want)
	}
	b.mu.RLock()
	got := b.nuCal.NuWith(0.1, b.pool.kappaExcept(&b))
	b.mu.RUnlock()
	if got < 0.9 {
		t.Fatalf("b's ν %v: the pool showed these negatives miss, want ≥ 0.9", got)
	}
	if k := b.Calibration(); math.Abs(k-pool.Kappa()) > 1e-9 {
		t.Fatalf("b's κ %v before any outcome, want the pool's %v", k, pool.Kappa())
	}
	// A replica alone keeps the derived ν.
	alone.mu.RLock()
	got = alone.nuCal.NuWith(0.1, alone.pool.kappaExcept(&alone))
	alone.mu.RUnlock()
	if math.Abs(got-0.1) > 1e-12 {
		t.Fatalf("replica without a pool: ν %v, want the derived 0.1", got)
	}
	// b's own outcomes, where its negatives do hit, outweigh the pool.
	for range 400 {
		b.ObserveHomeNegativeProbe(0.1, true)
	}
	b.mu.RLock()
	got = b.nuCal.NuWith(0.1, b.pool.kappaExcept(&b))
	b.mu.RUnlock()
	if got > 0.2 {
		t.Fatalf("after 400 hits of its own b's ν %v, want it near its realised 0", got)
	}
	// Certainty is kept.
	if got := fresh.NuWith(1, pool.Kappa()); got != 1 {
		t.Fatalf("derived ν 1 with a pool: %v, want 1", got)
	}
	// The pool forgets with the requests its replicas read.
	var p2 CalibrationPool
	var c Replica
	c.SharePool(&p2)
	for range 100 {
		c.ObserveHomeNegativeProbe(0.5, false)
	}
	for range 8 * CalibrationMemory {
		c.Count(false, true)
	}
	if k := p2.Kappa(); math.Abs(k-1) > 0.05 {
		t.Fatalf("pool κ %v after %d requests without probes, want back near 1", k, 8*CalibrationMemory)
	}
	var none *CalibrationPool
	if none.Kappa() != 1 {
		t.Fatal("a nil pool's κ is not 1")
	}
	// A replica alone in its pool is priced as one with no pool: its own
	// outcomes are not its prior too (found by review: counted twice).
	var solo, bare Replica
	solo.SharePool(&CalibrationPool{})
	for range 125 {
		solo.ObserveHomeNegativeProbe(0.96, false)
		bare.ObserveHomeNegativeProbe(0.96, false)
	}
	if ks, kb := solo.Calibration(), bare.Calibration(); ks != kb {
		t.Fatalf("alone in a pool κ %v, without one %v: want the same", ks, kb)
	}
	// A replica that leaves (replaced at its peer's restart) takes its
	// outcomes with it.
	var p3 CalibrationPool
	var old, other Replica
	old.SharePool(&p3)
	other.SharePool(&p3)
	for range 300 {
		old.ObserveHomeNegativeProbe(0.5, false)
	}
	if k := other.Calibration(); k > 0.1 {
		t.Fatalf("before the restart the other member's κ %v, want the departed one's (near 0)", k)
	}
	old.SharePool(nil)
	if k := other.Calibration(); k != 1 {
		t.Fatalf("after the member left, the other's κ %v, want 1", k)
	}
}

// TestFirstPositivesBeforeAndAfterAdvertisement: requests read before a
// peer's first advertisement are not indications and do not prime q at 0;
// the first positive indications after it are then priced as the
// formulas say, not π = 1 (never asked). Found live: a sixth of a cold
// node's positive indications were dropped that way. And π's 0/0 (no
// positive counted yet) is 0 for a filter that reports no false positives,
// 1 for one that does.
func TestFirstPositivesBeforeAndAfterAdvertisement(t *testing.T) {
	var r Replica
	for range 3 * QWindow {
		r.Count(false, true) // nothing advertised yet
	}
	if r.qHome.primed || r.qHome.n != 0 || r.q.n != 0 {
		t.Fatalf("indications counted before any advertisement: %+v, %+v", r.qHome, r.q)
	}
	cfg := DefaultFilterConfig(1000)
	f, err := NewFilter(cfg)
	if err != nil {
		t.Fatal(err)
	}
	key := func(i int) []byte { return []byte("k" + strconv.Itoa(i)) }
	for i := range 100 {
		f.Insert(key(i))
	}
	snap := f.Advertise(func(yield func([]byte) bool) {
		for i := range 100 {
			if !yield(key(i)) {
				return
			}
		}
	})
	if err := r.Apply(EncodeFull(snap)); err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		r.Count(r.Test(key(i)), true)
	}
	e := r.HomeExclusion()
	if e.Q <= 0 || e.Pi >= 0.5 {
		t.Fatalf("after the advertisement: q %v, π %v; want q > 0 and a positive priced as likely right", e.Q, e.Pi)
	}
	if pi := Exclusions(0, 0, 0.1).Pi; pi != 0 {
		t.Fatalf("q = 0, fpr = 0: π %v, want 0", pi)
	}
	if pi := Exclusions(0, 0.01, 0.1).Pi; pi != 1 {
		t.Fatalf("q = 0, fpr = 0.01: π %v, want 1", pi)
	}
}

// TestQAfterEmptyWindows: windows with no positive indication (a peer that
// held nothing yet) leave q at exactly 0, and the window under way then
// speaks for q as soon as it has a positive, so that the first positive
// indications are not priced π = 1 for a whole window.
func TestQAfterEmptyWindows(t *testing.T) {
	var e QEstimator
	for range 2 * QWindow {
		e.Observe(false)
	}
	if q := e.Q(); q != 0 {
		t.Fatalf("q %v after empty windows", q)
	}
	e.Observe(true)
	e.Observe(false)
	if q := e.Q(); q != 0.5 {
		t.Fatalf("q %v with one positive of two in the window under way, want 0.5", q)
	}
	if pi := Exclusions(e.Q(), 1e-9, 0.5).Pi; pi >= 0.01 {
		t.Fatalf("π %v for a positive from a nearly empty filter, want near 0", pi)
	}
	for range QWindow - 2 {
		e.Observe(false)
	}
	if q := e.Q(); q != 0.01 {
		t.Fatalf("q %v once the window with 1 %% positives ended, want 0.01 (it primes the average; a quarter of it was a fourfold drop in one request)", q)
	}
	for range QWindow {
		e.Observe(false)
	}
	if q := e.Q(); math.Abs(q-0.75*0.01) > 1e-12 {
		t.Fatalf("q %v after a window with none, want the paper's average %v", q, 0.75*0.01)
	}
}

// TestCalibrationPoolTotalsFollowTheShares: the pool's running totals
// (a member's prior is total − its share, O(1)) stay the sum of the shares
// as members change, leave and rejoin.
func TestCalibrationPoolTotalsFollowTheShares(t *testing.T) {
	var pool CalibrationPool
	rs := make([]Replica, 5)
	for i := range rs {
		rs[i].SharePool(&pool)
	}
	rng := rand.New(rand.NewPCG(5, 6))
	for step := range 20000 {
		r := &rs[rng.IntN(len(rs))]
		switch rng.IntN(10) {
		case 0:
			r.SharePool(nil)
		case 1:
			r.SharePool(&pool)
		case 2:
			r.Count(false, true)
		default:
			r.ObserveHomeNegativeProbe(rng.Float64(), rng.IntN(3) == 0)
		}
		if step%1000 == 0 {
			pool.mu.Lock()
			var sum poolShare
			for _, s := range pool.shares {
				sum.hits += s.hits
				sum.predicted += s.predicted
			}
			total := pool.total
			pool.mu.Unlock()
			if math.Abs(sum.hits-total.hits) > 1e-6 || math.Abs(sum.predicted-total.predicted) > 1e-6 {
				t.Fatalf("step %d: totals %+v, shares sum to %+v", step, total, sum)
			}
		}
	}
}
