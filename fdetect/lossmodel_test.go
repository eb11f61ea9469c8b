package fdetect

import (
	"math/rand/v2"
	"testing"
	"time"
)

// lossyLink feeds d n heartbeats at Δ = 100 ms with 1–6 ms of uniform
// jitter; lost(s) says whether heartbeat s is lost. It returns the margin
// (ns) right after the last arrival and that arrival's time.
func lossyLink(d *ML, rng *rand.Rand, from, n uint64, lost func(uint64) bool) (last int64) {
	for s := from; s < from+n; s++ {
		if lost(s) {
			continue
		}
		last = int64(s)*revPeriod + int64(1e6+rng.Float64()*5e6)
		d.Observe(s, last)
	}
	return last
}

// TestLossModelWidensOnlyAfterALoss: on a link whose losses come in bursts
// (one every 2 500 heartbeats, 0.04 % of arrivals, each followed by eight
// heartbeats lost one time in two), the composite
// margin is a few milliseconds on a clean run and covers a lost heartbeat
// (more than a period) right after a loss, when the next is likely lost too.
// A single quantile cannot do both: it must cover losses always or never.
func TestLossModelWidensOnlyAfterALoss(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	d := NewML(revPeriod, MLConfig{Quantile: 0.999, LossModel: LossModelBudget})
	burstUntil := uint64(0)
	lost := func(s uint64) bool {
		if s < burstUntil {
			return rng.IntN(2) == 0
		}
		if s > 1000 && s%2500 == 0 {
			burstUntil = s + 8
			return true
		}
		return false
	}
	lossyLink(d, rng, 0, 100000, lost)
	calm := time.Duration(d.Margin())
	// A loss now: heartbeat 100000 lost, 100001 arrives.
	d.Observe(100001, 100001*revPeriod+3e6)
	after := time.Duration(d.Margin())
	t.Logf("margin on a clean run %v, right after a loss %v", calm, after)
	if calm > 20*time.Millisecond {
		t.Errorf("clean run: margin %v, want the jitter's few ms (losses are rare there)", calm)
	}
	if after < time.Duration(revPeriod) {
		t.Errorf("right after a loss in a bursty link: margin %v, want more than a period", after)
	}
}

// TestLossModelCoversIIDLossAtATightTarget: 5 % i.i.d. loss and a target
// of one unsafe prediction in 300 000 (0.1 per link-hour at Δ = 100 ms):
// runs of four and five losses must be covered, though few were ever seen;
// the geometric run length gives them their chance: every run of three is
// covered and some of the runs of four. The margin stays within the
// loss-aware wrapper's cap.
func TestLossModelCoversIIDLossAtATightTarget(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	d := NewML(revPeriod, MLConfig{Quantile: 1 - 1.0/300000, LossModel: LossModelBudget})
	lossyLink(d, rng, 0, 30000, func(uint64) bool { return rng.Float64() < 0.05 })
	m := time.Duration(d.Margin())
	t.Logf("5 %% i.i.d. loss, target 1 − 1/300000: margin %v", m)
	if m < 3*time.Duration(revPeriod)+3*time.Millisecond || m > time.Duration(LossMaxExtra+1)*time.Duration(revPeriod) {
		t.Errorf("margin %v, want every run of three covered (3 periods + the 3 ms of jitter above the prediction) and part of runs of four (0.05^4 = 6e-6 is above the target), never more than the cap", m)
	}
	// The same link with no loss: back to the jitter within the memory.
	clean := NewML(revPeriod, MLConfig{Quantile: 1 - 1.0/300000, LossModel: LossModelBudget})
	lossyLink(clean, rng, 0, 30000, func(uint64) bool { return false })
	if c := time.Duration(clean.Margin()); c >= time.Duration(revPeriod) {
		t.Errorf("clean link: margin %v, want under a period", c)
	}
}

// TestLossModelSurvivalIsMonotone: the chance that the next arrival comes
// after m never rises with m, across zero (where the delay errors' two
// windows meet) and across the loss runs' steps; a discontinuity at 0 once
// snapped margins to exactly 5 periods.
func TestLossModelSurvivalIsMonotone(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	for _, mode := range []int{LossModelBudget, LossModelPriced} {
		d := NewML(revPeriod, MLConfig{Quantile: 0.999, LossModel: mode})
		lossyLink(d, rng, 0, 20000, func(uint64) bool { return rng.Float64() < 0.1 })
		f, _ := d.loss.lateChance(d.errs, 0.001, float64(revPeriod))
		if f == nil {
			t.Fatal("no survival function seen")
		}
		prev := f(-float64(revPeriod))
		for x := -float64(revPeriod); x < 10*float64(revPeriod); x += 5e5 {
			v := f(x)
			if v > prev+1e-12 || v < 0 || v > 1 {
				t.Fatalf("mode %d: P(L > %v) = %v after %v: not a falling chance", mode, time.Duration(x), v, prev)
			}
			prev = v
		}
		if m := time.Duration(d.Margin()); m%time.Duration(revPeriod) == 0 {
			t.Errorf("mode %d: margin exactly %v: snapped to a loss run's step", mode, m)
		}
	}
}

// BenchmarkMLLossModel: ml with each loss model on a link that loses 1 %
// (budget) and 2 % (priced) of its heartbeats: every loss invalidates the
// cached margins, so these are the costs with a solve every ~50 arrivals.
func BenchmarkMLLossModel(b *testing.B) {
	for _, c := range []struct {
		name string
		mode int
		loss float64
	}{{"budget", LossModelBudget, 0.01}, {"priced", LossModelPriced, 0.02}} {
		b.Run(c.name, func(b *testing.B) {
			rng := rand.New(rand.NewPCG(5, 6))
			d := NewML(revPeriod, MLConfig{Quantile: 0.999, LossModel: c.mode})
			b.ReportAllocs()
			for i := range b.N {
				s := uint64(i)
				if rng.Float64() < c.loss {
					continue
				}
				d.Observe(s, int64(s)*revPeriod+int64(rng.Float64()*5e6))
				_ = d.Freshness()
			}
		})
	}
}
