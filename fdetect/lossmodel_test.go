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
	d := NewML(revPeriod, MLConfig{Quantile: 0.999, LossModel: true})
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
// the geometric run length gives them their chance. The margin stays within
// the loss-aware wrapper's cap.
func TestLossModelCoversIIDLossAtATightTarget(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	d := NewML(revPeriod, MLConfig{Quantile: 1 - 1.0/300000, LossModel: true})
	lossyLink(d, rng, 0, 30000, func(uint64) bool { return rng.Float64() < 0.05 })
	m := time.Duration(d.Margin())
	t.Logf("5 %% i.i.d. loss, target 1 − 1/300000: margin %v", m)
	if m < 35*time.Duration(revPeriod)/10 || m > time.Duration(lossAwareMaxExtra+1)*time.Duration(revPeriod) {
		t.Errorf("margin %v, want 3.5–10 periods: 0.05^4 = 6e-6 means runs of 4 must be (mostly) covered, and never more than the cap", m)
	}
	// The same link with no loss: back to the jitter within the memory.
	clean := NewML(revPeriod, MLConfig{Quantile: 1 - 1.0/300000, LossModel: true})
	lossyLink(clean, rng, 0, 30000, func(uint64) bool { return false })
	if c := time.Duration(clean.Margin()); c >= time.Duration(revPeriod) {
		t.Errorf("clean link: margin %v, want under a period", c)
	}
}

func BenchmarkMLLossModel(b *testing.B) {
	rng := rand.New(rand.NewPCG(5, 6))
	d := NewML(revPeriod, MLConfig{Quantile: 0.999, LossModel: true})
	b.ReportAllocs()
	for i := range b.N {
		s := uint64(i)
		if rng.Float64() < 0.01 {
			continue
		}
		d.Observe(s, int64(s)*revPeriod+int64(rng.Float64()*5e6))
		_ = d.Freshness()
	}
}
