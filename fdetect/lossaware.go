package fdetect

import "math"

// DefaultLossBudget is the chance per heartbeat that LossAware lets a run
// of random losses turn into a suspicion: 1e-7 at 10 heartbeats a second is
// about one mistake per 280 link-hours, so a 20-link cluster on a 5 % lossy
// network goes 14 hours between false suspicions (docs/failure-detection.md).
const DefaultLossBudget = 1e-7

// LossMaxExtra caps the periods LossAware adds: detection never gets
// more than this many periods slower, however lossy the link (at 50 % loss
// it would otherwise wait 23).
const LossMaxExtra = 9

// LossAware wraps a detector for links that drop heartbeats at random: it
// estimates the loss rate p from sequence gaps and moves the freshness
// point on by k−1 periods, k the shortest run of consecutive losses with
// p^k ≤ budget. A link without loss keeps the inner detector's timing
// (k = 1); at 5 % loss and budget 1e-7, k = 6, half a second more at 100 ms.
// The published detectors model arrival delay, not loss: each gap of two
// lost heartbeats is a suspicion to them, which a 5 % lossy link produces
// every 400 heartbeats.
//
// p is the larger of two moving averages of the per-heartbeat loss
// indicator, over about 50 and 1,000 heartbeats: quick to rise when a link
// starts dropping, slow to forget it. Silence (no arrival at all) does not
// change p, so a crash is detected with the margin of the link's loss
// before it, and gaps longer than the largest margin (outages) are not
// counted as loss.
type LossAware struct {
	inner      Detector
	period     int64
	logBudget  float64
	fast, slow float64 // moving averages of "this heartbeat was lost"
	last       uint64
	seen       bool
}

// NewLossAware wraps inner (heartbeat period in ns) with a loss budget.
func NewLossAware(inner Detector, period int64, budget float64) *LossAware {
	return &LossAware{inner: inner, period: period, logBudget: math.Log(budget)}
}

// Observe implements Detector.
func (d *LossAware) Observe(seq uint64, arrival int64) {
	if d.seen && seq > d.last {
		// A gap longer than the margin can ever cover is an outage (a
		// partition, a stalled sender), not random loss: it says nothing
		// about the next heartbeat's chance of being lost, and counting it
		// would slow detection for minutes after every heal.
		if lost := seq - d.last - 1; lost <= LossMaxExtra {
			for range lost {
				d.fast += (1 - d.fast) / 50
				d.slow += (1 - d.slow) / 1000
			}
			d.fast -= d.fast / 50
			d.slow -= d.slow / 1000
		}
	}
	if d.seen && seq < d.last {
		// A late heartbeat was counted lost when a newer one came: it was
		// reordered (jitter), not lost. Undo about one loss's worth.
		d.fast = max(0, d.fast-1.0/50)
		d.slow = max(0, d.slow-1.0/1000)
	}
	if !d.seen || seq > d.last {
		d.last, d.seen = seq, true
	}
	d.inner.Observe(seq, arrival)
}

// Freshness implements Detector.
func (d *LossAware) Freshness() int64 {
	return d.inner.Freshness() + int64(d.Extra())*d.period
}

// Extra is the number of periods added to the inner detector's point.
func (d *LossAware) Extra() int {
	return d.ExtraAt(max(d.fast, d.slow))
}

// ExtraAt is the number of periods this wrapper adds at loss rate p: the
// cluster asks it for the loss every link shows at once (a burst on the
// network), which a link's own slow averages learn too late.
func (d *LossAware) ExtraAt(p float64) int {
	if p <= 0 || math.Log(p) <= d.logBudget {
		return 0
	}
	if p >= 1 {
		return LossMaxExtra
	}
	k := math.Ceil(d.logBudget / math.Log(p))
	return int(min(k-1, LossMaxExtra))
}

// Loss returns the estimated loss rate.
func (d *LossAware) Loss() float64 { return max(d.fast, d.slow) }

// Margined is a detector that can say its current safety margin (ns): how
// far past the expected arrival it waits.
type Margined interface {
	Margin() int64
}

// Margin is the inner detector's margin (0 if it has none to say) plus the
// periods added for loss.
func (d *LossAware) Margin() int64 {
	var m int64
	if in, ok := d.inner.(Margined); ok {
		m = in.Margin()
	}
	return m + int64(d.Extra())*d.period
}
