package fdetect

import (
	"math/rand/v2"
	"testing"
)

// runsBudget is the budget the runs estimator is measured with
// (docs/failure-detection.md): 0.09 false suspicions per link-hour at 10
// heartbeats a second.
const runsBudget = 2.5e-6

// A burst of five heartbeats lost in a row on a clean link: the rate
// estimator counts five losses and keeps the margin two periods up for
// hundreds of heartbeats; the runs estimator counts one run, which asks
// for the one period a lone loss asks for.
func TestLossRunsBurstWeighsLikeOneLoss(t *testing.T) {
	rate := NewLossAwareWith(NewChen(revPeriod, 100, 50e6), revPeriod, runsBudget, LossRate)
	runs := NewLossAwareWith(NewChen(revPeriod, 100, 50e6), revPeriod, runsBudget, LossRuns)
	s := uint64(0)
	feed := func(n int) {
		for range n {
			rate.Observe(s, int64(s)*revPeriod)
			runs.Observe(s, int64(s)*revPeriod)
			s++
		}
	}
	feed(3000)
	s += 5 // the burst
	feed(200)
	t.Logf("200 heartbeats after a burst of 5: rate %.4f (+%d), runs %.5f (+%d)", rate.Loss(), rate.Extra(), runs.Loss(), runs.Extra())
	if runs.Extra() != 1 {
		t.Errorf("runs: +%d periods 200 heartbeats after one burst, want 1 (a lone loss's)", runs.Extra())
	}
	if rate.Extra() < 2 {
		t.Errorf("rate: +%d periods, want ≥ 2 (what the runs estimator is measured against)", rate.Extra())
	}
}

// A lone loss: the runs estimator's fast average speaks only past its
// first loss, so the margin rises by the one period the slow one asks for,
// where the rate estimator's fast average asks for three.
func TestLossRunsLoneLossAddsOnePeriod(t *testing.T) {
	rate := NewLossAwareWith(NewChen(revPeriod, 100, 50e6), revPeriod, runsBudget, LossRate)
	runs := NewLossAwareWith(NewChen(revPeriod, 100, 50e6), revPeriod, runsBudget, LossRuns)
	for s := range uint64(1000) {
		if s == 500 {
			continue
		}
		rate.Observe(s, int64(s)*revPeriod)
		runs.Observe(s, int64(s)*revPeriod)
		if s == 501 {
			if runs.Extra() != 1 || rate.Extra() < 2 {
				t.Fatalf("right after a lone loss: runs +%d (want 1), rate +%d (want ≥ 2)", runs.Extra(), rate.Extra())
			}
		}
	}
}

// 5 % i.i.d. loss with the runs estimator: no suspicion once the link is
// learnt, a margin of 3–5 periods (0.05^5 ≤ 2.5e-6 < 0.05^4), and a crash
// still detected within a second.
func TestLossRunsIIDLoss(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	d := NewLossAwareWith(NewChen(revPeriod, 100, 50e6), revPeriod, runsBudget, LossRuns)
	var mistakes, early int
	var last int64
	for s := range uint64(20000) {
		if rng.Float64() < 0.05 {
			continue
		}
		at := int64(s) * revPeriod
		if at > d.Freshness() && s > 0 {
			if s > 2000 {
				mistakes++
			} else {
				early++
			}
		}
		d.Observe(s, at)
		last = at
	}
	t.Logf("5 %% loss: estimated %.4f, +%d periods, suspicions %d while learning, %d after", d.Loss(), d.Extra(), early, mistakes)
	if e := d.Extra(); e < 3 || e > 5 {
		t.Errorf("5 %% loss: +%d periods, want 3–5", e)
	}
	if mistakes != 0 {
		t.Errorf("5 %% loss: %d suspicions after the first 2,000 heartbeats, want 0", mistakes)
	}
	if wait := d.Freshness() - last; wait > int64(1e9) {
		t.Errorf("a crash would be detected %d ms after the last heartbeat, want under 1 s", wait/1e6)
	}
}

func TestLossEstimatorParam(t *testing.T) {
	d, err := New("ml", revPeriod, Params{LossBudgetParam: runsBudget, LossEstimatorParam: 1})
	if la, ok := d.(*LossAware); err != nil || !ok || la.estimator != LossRuns {
		t.Fatalf("loss_estimator=1: %T %v, want LossAware with LossRuns", d, err)
	}
	if d, err := New("ml", revPeriod, Params{LossBudgetParam: 0, LossEstimatorParam: 1}); err != nil {
		t.Fatalf("loss_budget=0 with an estimator: %v, want the bare detector", err)
	} else if _, ok := d.(*LossAware); ok {
		t.Fatal("loss_budget=0 with an estimator wrapped the detector")
	}
	for _, bad := range []Params{
		{LossBudgetParam: runsBudget, LossEstimatorParam: 2},
		{LossBudgetParam: runsBudget, LossEstimatorParam: 0.5},
		{LossBudgetParam: runsBudget, LossEstimatorParam: -1},
		{LossEstimatorParam: 1}, // no budget: nothing to estimate for
	} {
		if _, err := New("chen", revPeriod, bad); err == nil {
			t.Errorf("%v accepted", bad)
		}
	}
}

// What holds for the rate estimator holds for runs: a partition's gap is
// not loss (reordering: TestLossAwareReorderIsNotLoss, both estimators).
func TestLossRunsOutageIsNotLoss(t *testing.T) {
	o := NewLossAwareWith(NewChen(revPeriod, 100, 50e6), revPeriod, runsBudget, LossRuns)
	for s := range uint64(200) {
		o.Observe(s, int64(s)*revPeriod)
	}
	for s := uint64(250); s < 300; s++ {
		o.Observe(s, int64(s)*revPeriod)
	}
	if o.Loss() != 0 || o.Extra() != 0 {
		t.Errorf("after an outage: loss %.5f, +%d periods; want the clean link's 0", o.Loss(), o.Extra())
	}
}

// A run of four lost heartbeats that all arrive late after all was no
// loss: the runs average ends where it began (it undid one run per late
// heartbeat before, erasing real runs counted earlier), and a late
// heartbeat in the middle of a run splits it in two. Found by a hostile
// review.
func TestLossRunsReorderUndoesWhatItCounted(t *testing.T) {
	d := NewLossAwareWith(NewChen(revPeriod, 100, 50e6), revPeriod, runsBudget, LossRuns)
	s := uint64(0)
	obs := func(seq uint64) { d.Observe(seq, int64(s)*revPeriod) }
	for ; s < 1000; s++ {
		obs(s)
	}
	for range 10 { // ten real lone losses
		s++
		for range 100 {
			obs(s)
			s++
		}
	}
	before := d.runs
	obs(s + 4) // s..s+3 missing: one run
	obs(s)
	obs(s + 1)
	obs(s + 2)
	obs(s + 3) // all late: nothing was lost
	if got := (d.runs - before) * lossRunsSlowWindow; got < -0.01 || got > 0.01 {
		t.Errorf("a fully reordered run of 4 changed the runs average by %.3f runs, want 0", got)
	}
	s += 5
	before = d.runs
	obs(s + 4) // s..s+3 missing: one run
	obs(s + 1) // late, in the middle: s and s+2..s+3 are two runs
	if got := (d.runs - before) * lossRunsSlowWindow; got < 1.9 || got > 2.1 {
		t.Errorf("a run split by a late heartbeat counts %.3f runs, want 2", got)
	}
	before = d.runs
	obs(s + 1) // a duplicate undoes nothing
	if d.runs != before {
		t.Error("a duplicate heartbeat changed the runs average")
	}
}

// Bad budgets stop the detector's construction, NaN included (it passed
// the range check and made Extra() int(NaN)). Found by a hostile review.
func TestLossBudgetRejectsNaN(t *testing.T) {
	for _, s := range []string{"loss_budget=NaN", "loss_budget=-1e-9", "loss_budget=1", "loss_budget=+Inf"} {
		p, err := ParseParams([]string{s})
		if err != nil {
			continue
		}
		if _, err := New("chen", revPeriod, p); err == nil {
			t.Errorf("%s accepted", s)
		}
	}
}

// LostShare reads the share of heartbeats lost whatever the estimator:
// what the status page shows and what tells other code a link is lossy
// (cluster/whole.go, at 1 %). Loss, under runs, is the margin's price and
// reads lower on a steadily lossy link.
func TestLostShareIsTheLossWhateverTheEstimator(t *testing.T) {
	rate := NewLossAwareWith(NewChen(revPeriod, 100, 50e6), revPeriod, runsBudget, LossRate)
	runs := NewLossAwareWith(NewChen(revPeriod, 100, 50e6), revPeriod, runsBudget, LossRuns)
	rng := rand.New(rand.NewPCG(5, 6))
	const n = 3000
	above := [2]int{}
	for s := range uint64(n) {
		if rng.Float64() < 0.03 {
			continue
		}
		rate.Observe(s, int64(s)*revPeriod)
		runs.Observe(s, int64(s)*revPeriod)
		if s > n/2 {
			if rate.LostShare() >= 0.01 {
				above[0]++
			}
			if runs.LostShare() >= 0.01 {
				above[1]++
			}
			if rate.LostShare() != runs.LostShare() {
				t.Fatalf("heartbeat %d: LostShare %v with rate, %v with runs", s, rate.LostShare(), runs.LostShare())
			}
		}
	}
	if above[1] < n/2*9/10 {
		t.Errorf("3 %% i.i.d. loss: LostShare ≥ 1 %% for %d of the last %d heartbeats, want ≥ 90 %%", above[1], n/2)
	}
}
