package indicators

import (
	"math"
	"testing"
)

// TestNegativeRateStartsFromTheDerivedNuAndLearns: before any outcome
// fna-rate prices a home's negative as the derived ν does; its outcomes
// then overrule the prior, a derived ν of 1 included, which fna-learned
// keeps as a certainty (on the drift trace such negatives hit 17.6 % of
// the time: docs/indicators.md).
func TestNegativeRateStartsFromTheDerivedNuAndLearns(t *testing.T) {
	var r NegativeRate
	for _, derived := range []float64{0, 0.3, 0.96, 1} {
		if got := r.Nu(derived); math.Abs(got-derived) > 1e-12 {
			t.Fatalf("no outcomes: ν %v for a derived %v, want the derived", got, derived)
		}
	}
	if got := r.Nu(math.NaN()); got != 1 {
		t.Fatalf("no outcomes, derived NaN: ν %v, want 1 (a prior hit chance of 0)", got)
	}
	for i := range 200 {
		r.Observe(i%5 == 0) // 20 % of the negative probes hit
	}
	if rate, n := r.Rate(); math.Abs(rate-0.2) > 0.01 || n < 150 {
		t.Fatalf("rate %v over %v outcomes, want 0.2 over about 200", rate, n)
	}
	if got := r.Nu(1); got > 0.82 || got < 0.78 {
		t.Fatalf("derived 1 after 200 outcomes at 20 %%: ν %v, want near 0.8 (outcomes overrule the prior)", got)
	}
	if got := r.Nu(0.05); got < 0.75 || got > 0.8 {
		t.Fatalf("derived 0.05 after 200 outcomes at 20 %%: ν %v, want near 0.8, a little below", got)
	}
}

// TestNegativeRateForgets: a rate that collapsed drifts back to the
// derived ν once no probe goes to the peer, and a new run of outcomes
// outweighs an old one (a memory of about 500 probes).
func TestNegativeRateForgets(t *testing.T) {
	var r NegativeRate
	for range 1000 {
		r.Observe(false)
	}
	if got := r.Nu(0.7); got < 0.99 {
		t.Fatalf("after 1000 misses ν %v, want near 1", got)
	}
	for range 10 * CalibrationMemory {
		r.Age()
	}
	if got := r.Nu(0.7); math.Abs(got-0.7) > 0.01 {
		t.Fatalf("after %d requests without probes ν %v, want back near the derived 0.7", 10*CalibrationMemory, got)
	}
	for range 1000 {
		r.Observe(false)
	}
	for range 2000 {
		r.Observe(true)
	}
	if rate, _ := r.Rate(); rate < 0.95 {
		t.Fatalf("2000 hits after 1000 misses: rate %v, want the recent hits to dominate", rate)
	}
	// Faded to less than one outcome: no rate to show (a rate of what has
	// faded away would read as a measurement).
	var once NegativeRate
	once.Observe(true)
	for range 10 * CalibrationMemory {
		once.Age()
	}
	if rate, n := once.Rate(); rate != 0 || n >= 1 {
		t.Fatalf("one hit, then %d requests: rate %v over %v, want 0 over less than one", 10*CalibrationMemory, rate, n)
	}
}

// TestExploreChance: exploration costs at most 2 % of the negatives left
// out, and nothing where a probe costs half the miss penalty or more (or
// the penalty is unknown).
func TestExploreChance(t *testing.T) {
	for _, tc := range []struct{ c, m, want float64 }{
		{0, 100, 0.02}, {1, 100, 0.0196}, {25, 100, 0.01}, {50, 100, 0}, {100, 50, 0},
		{1, 0, 0}, {1, -5, 0}, {1, math.NaN(), 0}, {math.NaN(), 100, 0}, {-1, 100, 0},
		{math.Inf(1), math.Inf(1), 0}, {math.Inf(1), 100, 0}, {1, math.Inf(1), 0.02},
	} {
		if got := ExploreChance(tc.c, tc.m); math.Abs(got-tc.want) > 1e-12 {
			t.Errorf("ExploreChance(%v, %v) = %v, want %v", tc.c, tc.m, got, tc.want)
		}
	}
}

// TestParsePolicyKnowsFNARate: fna-rate is a home-aware policy by name.
func TestParsePolicyKnowsFNARate(t *testing.T) {
	p, err := ParsePolicy("fna-rate")
	if err != nil || p != FNARate || !p.HomeAware() {
		t.Fatalf("ParsePolicy(fna-rate) = %q, %v; home-aware %v", p, err, p.HomeAware())
	}
	if _, err := ParsePolicy("fna-rates"); err == nil {
		t.Fatal("fna-rates parsed")
	}
}

// TestNegativeRatePriorBorrowsThePool: a home with no outcomes of its own
// starts from its derived chance scaled by how its group's other peers'
// negatives realised (the pool's κ), so a fresh pair of ingress and home
// does not wait for misses its group already showed; its own outcomes
// then decide as before.
func TestNegativeRatePriorBorrowsThePool(t *testing.T) {
	var r NegativeRate
	if got := r.NuWith(0.3, 0.1); math.Abs(got-0.93) > 1e-12 {
		t.Fatalf("no outcomes, derived 0.3, pooled κ 0.1: ν %v, want 0.93", got)
	}
	for _, bad := range []float64{math.NaN(), math.Inf(1), -1} {
		if got := r.NuWith(0.3, bad); math.Abs(got-0.3) > 1e-12 {
			t.Fatalf("pooled κ %v: ν %v, want the derived 0.3", bad, got)
		}
	}
	pool := &CalibrationPool{}
	var seen, fresh Replica
	seen.SharePool(pool)
	fresh.SharePool(pool)
	for range 500 {
		seen.ObserveHomeNegativeProbe(0.3, false) // promised 70 % hits, none came
	}
	k := pool.kappaExcept(&fresh)
	if k > 0.1 {
		t.Fatalf("pool κ for the fresh peer %v, want near 0", k)
	}
	e, derived := fresh.RateHomeExclusion()
	if want := fresh.negRate.NuWith(derived, k); e.Nu != want {
		t.Fatalf("fresh peer: ν %v, want the rate's ν with the pool's κ %v", e.Nu, want)
	}
	if got := fresh.negRate.NuWith(0.3, k); got < 0.97 {
		t.Fatalf("derived 0.3 with the pool's κ %v: ν %v, want near 1", k, got)
	}
	var alone Replica
	alone.SetEstimates(0.001, 0.5)
	if e, derived := alone.RateHomeExclusion(); math.Abs(e.Nu-derived) > 1e-12 {
		t.Fatalf("a peer with no pool and no outcomes: ν %v, want the derived %v", e.Nu, derived)
	}
}

// countingDraws answers IntN with pick and Float64 with f, counting calls.
type countingDraws struct {
	pick, intN, floats int
	f                  float64
}

func (d *countingDraws) IntN(int) int     { d.intN++; return d.pick }
func (d *countingDraws) Float64() float64 { d.floats++; return d.f }

// TestExploreHomePicksOneOfLeft: the pick is the IntN-th home of left in
// ascending order, asked when the draw is below ExploreChance; one home
// left takes no IntN draw (a seeded simulation's draws stay as they
// were), none left takes no draw at all.
func TestExploreHomePicksOneOfLeft(t *testing.T) {
	cost := func(int) float64 { return 1 }
	d := &countingDraws{pick: 1, f: 0}
	if got := ExploreHome(0b10110, cost, 100, d); got != 0b00100 {
		t.Fatalf("left 10110, pick 1: %b, want 00100", got)
	}
	d = &countingDraws{f: 0}
	if got := ExploreHome(0b1000, cost, 100, d); got != 0b1000 || d.intN != 0 || d.floats != 1 {
		t.Fatalf("one home left: %b with %d IntN and %d Float64 draws, want 1000 with 0 and 1", got, d.intN, d.floats)
	}
	d = &countingDraws{f: 0.5}
	if got := ExploreHome(0b1000, cost, 100, d); got != 0 {
		t.Fatalf("a draw above the chance explored %b", got)
	}
	d = &countingDraws{}
	if got := ExploreHome(0, cost, 100, d); got != 0 || d.intN+d.floats != 0 {
		t.Fatalf("nothing left: %b after %d draws, want 0 after none", got, d.intN+d.floats)
	}
}

// TestNegativeRatePriorWearsAway: the prior's weight fades with the
// outcomes, so a home whose derived ν is 0 (a prior hit chance of 1) and
// whose negatives all miss, observed back to back, is priced as a
// near-certain miss. (With requests between the probes the prior comes
// back a little each time, and a floor of probes remains:
// TestNegativeRateProbeFloor.) A prior kept at ten
// probes held ν at or below 1 − 10/510 ≈ 0.98 (the memory keeps about 500
// outcomes), where at M = 100 a probe costing 1 or 2 still paid in the
// model and never in fact (docs/indicators.md, "The client's own fills").
// With few outcomes the prior still speaks, and after a long silence it
// is back.
func TestNegativeRatePriorWearsAway(t *testing.T) {
	var r NegativeRate
	for range 5 {
		r.Observe(false)
	}
	if got := r.Nu(0); got > 0.7 {
		t.Fatalf("derived 0, five misses: ν %v, want the prior still heard (about 1 − 10/15)", got)
	}
	for range 3000 {
		r.Observe(false)
	}
	if got := r.Nu(0); got < 0.999 {
		t.Fatalf("derived 0, 3005 misses: ν %v, want above 0.999 (1 − ν below 1 %% of a probe's worth at M/c = 100)", got)
	}
	for range 10 * CalibrationMemory {
		r.Age()
	}
	if got := r.Nu(0); got > 0.05 {
		t.Fatalf("derived 0 after %d requests without probes: ν %v, want back near the prior's 0", 10*CalibrationMemory, got)
	}
}

// TestNegativeRateProbeFloor: a home whose derived ν is 0 and whose
// negatives never hit, aged once per request for a key homed there (as
// Replica.Count does) and probed whenever its priced hit chance 1 − ν
// exceeds c/M, settles at a steady share of probed requests. Each probe
// wears the prior, each request gives it back, so the outcomes kept (about
// the probe share × CalibrationMemory) hold 1 − ν at c/M when the share is
// about NegativeRatePrior·M/(CalibrationMemory·c): probes cost about
// M·NegativeRatePrior/CalibrationMemory = M/2000 per home request,
// whatever c (the prior's floor; exploration's, c·ExploreChance, is
// separate and is the larger where probes are cheap). That is the price of a prior that comes back after silence
// (docs/indicators.md). The prior kept at ten probes for ever probed every
// request once M/c passed about 51.
func TestNegativeRateProbeFloor(t *testing.T) {
	perRequest := NegativeRatePrior / CalibrationMemory // in units of M
	for _, mc := range []float64{20, 100, 500} {
		var r NegativeRate
		probes := 0
		const warm, run = 10 * CalibrationMemory, 20 * CalibrationMemory
		for i := range warm + run {
			if 1-r.Nu(0) > 1/mc {
				r.Observe(false)
				if i >= warm {
					probes++
				}
			}
			r.Age()
		}
		share := float64(probes) / run
		cost := share / mc // c·share in units of M
		t.Logf("M/c %v: probes on %.4f of home requests, cost %.6f M per request (model %.6f)", mc, share, cost, perRequest)
		if cost < perRequest/2 || cost > perRequest*1.5 {
			t.Errorf("M/c %v: probes cost %.6f M per request, want about %.6f (NegativeRatePrior/CalibrationMemory)", mc, cost, perRequest)
		}
		if share > 0.5 {
			t.Errorf("M/c %v: probes on %.2f of requests that never hit", mc, share)
		}
	}
}
