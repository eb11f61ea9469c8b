package fdetect

import (
	"testing"
	"time"
)

const revPeriod = int64(100 * time.Millisecond)

// A clean link partitioned for 10 minutes (6000 heartbeats never sent to
// us, not lost at random) and healed: the gap is fed to the loss estimate
// as 1000 random losses, the slow average jumps to 0.63 and the margin sits
// at the cap (+900 ms) for minutes after the heal, on a link that has no
// loss at all. The comment says "Silence … does not change p".
func TestLossAwarePartitionIsNotLoss(t *testing.T) {
	d := NewLossAware(NewML(revPeriod, MLConfig{}), revPeriod, DefaultLossBudget)
	s := uint64(0)
	for ; s < 3000; s++ {
		d.Observe(s, int64(s)*revPeriod+5e6)
	}
	s += 6000                  // partition: 10 minutes without heartbeats
	for i := 0; i < 600; i++ { // one clean minute after the heal
		d.Observe(s, int64(s)*revPeriod+5e6)
		s++
	}
	t.Logf("one clean minute after a 10 min partition: loss %.3f, extra %d periods", d.Loss(), d.Extra())
	if d.Extra() != 0 {
		t.Errorf("clean link, 1 min after a partition healed: +%d periods (%v) of detection time; a partition is not random loss",
			d.Extra(), time.Duration(int64(d.Extra())*revPeriod))
	}
	for i := 0; i < 3000; i++ { // five more clean minutes
		d.Observe(s, int64(s)*revPeriod+5e6)
		s++
	}
	t.Logf("six clean minutes after: loss %.4f, extra %d", d.Loss(), d.Extra())
}

// Reordering without loss (every 20th pair swapped: 5 % of heartbeats come
// one period late, none is lost) is counted as 5 % loss: the late one was
// counted lost when its successor arrived, and its arrival is ignored.
func TestLossAwareReorderIsNotLoss(t *testing.T) {
	for _, e := range []LossEstimator{LossRate, LossRuns} {
		d := NewLossAwareWith(NewChen(revPeriod, 100, 50e6), revPeriod, DefaultLossBudget, e)
		for s := uint64(0); s < 20000; s++ {
			seq := s
			switch s % 20 {
			case 10:
				seq = s + 1
			case 11:
				seq = s - 1
			}
			d.Observe(seq, int64(s)*revPeriod)
		}
		if d.Extra() != 0 {
			t.Errorf("estimator %d: no heartbeat lost, 5 %% reordered: estimated loss %.5f, +%d periods", e, d.Loss(), d.Extra())
		}
	}
}

// Sanity (logs): detection delay past the last heartbeat, ML + LossAware.
func TestLossAwareDetectionDelay(t *testing.T) {
	for _, loss := range []float64{0, 0.05, 0.3} {
		d := NewLossAware(NewML(revPeriod, MLConfig{}), revPeriod, DefaultLossBudget)
		var last int64
		x := uint64(12345)
		for s := uint64(0); s < 5000; s++ {
			x ^= x << 13
			x ^= x >> 7
			x ^= x << 17
			if float64(x%10000)/10000 < loss {
				continue
			}
			last = int64(s)*revPeriod + int64(x%5)*1e6
			d.Observe(s, last)
		}
		delay := time.Duration(d.Freshness() - last)
		t.Logf("loss %.2f: estimated %.3f, extra %d, crash detected %v after the last heartbeat", loss, d.Loss(), d.Extra(), delay)
		if delay > time.Duration(int64(LossMaxExtra+3)*revPeriod) {
			t.Errorf("loss %.2f: %v", loss, delay)
		}
	}
}
