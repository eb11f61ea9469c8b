package fdetect

import (
	"math"
	"slices"
	"strconv"
)

// DefaultLossBudget is the chance per heartbeat that LossAware lets a run
// of random losses turn into a suspicion: 2.5e-6 at 10 heartbeats a second
// is 0.09 mistakes per link-hour, under the 0.1 issue 35 allows, and
// √2.5e-6 = 0.16 % is the loss up to which one extra period is enough: a
// link losing 0.1–0.15 % of its heartbeats pays one period, not two. It
// was 1e-7 (one mistake per 280 link-hours), which asked for two extra
// periods from 0.03 % loss (docs/failure-detection.md, "Loss that costs
// little").
const DefaultLossBudget = 2.5e-6

// LossMaxExtra caps the periods LossAware adds: detection never gets
// more than this many periods slower, however lossy the link (at 50 % loss
// it would otherwise wait 23).
const LossMaxExtra = 9

// LossAware wraps a detector for links that drop heartbeats at random: it
// estimates the loss rate p from sequence gaps and moves the freshness
// point on by k−1 periods, k the shortest run of consecutive losses with
// p^k ≤ budget. A link without loss keeps the inner detector's timing
// (k = 1); at 5 % loss and budget 1e-7, k = 6, half a second more at 100 ms
// (k = 5 at the default budget).
// The published detectors model arrival delay, not loss: each gap of two
// lost heartbeats is a suspicion to them, which a 5 % lossy link produces
// every 400 heartbeats.
//
// p is the larger of two moving averages, a fast one (about 50
// heartbeats) quick to rise when a link starts dropping and a slow one
// that forgets it slowly; what they count is the estimator's (LossRate,
// LossRuns). Silence (no arrival at all) does not
// change p, so a crash is detected with the margin of the link's loss
// before it, and gaps longer than the largest margin (outages) are not
// counted as loss.
type LossAware struct {
	inner      Detector
	period     int64
	logBudget  float64
	estimator  LossEstimator
	fast, slow float64 // moving averages of "this heartbeat was lost", over lossFastWindow and lossSlowWindow
	runs       float64 // moving average of "a run of losses ended here", over lossRunsSlowWindow (LossRuns)
	// lostBits has bit d set when heartbeat last−d was counted lost (d <
	// 64): a late arrival undoes exactly what its loss counted, and a
	// duplicate or a heartbeat of an uncounted outage undoes nothing.
	lostBits uint64
	last     uint64
	seen     bool
}

// LossEstimator is how LossAware reads a link's loss rate from its gaps.
type LossEstimator int

const (
	// LossRate, the first estimator: p is the larger of two moving
	// averages of every lost heartbeat, over about 50 and 1,000 heartbeats.
	// A burst's losses raise the slow one for about 1,000 heartbeats.
	LossRate LossEstimator = iota
	// LossRuns counts a run of consecutive losses once in the slow
	// average, now over about 8,000 heartbeats, and lets the fast one (50,
	// every loss) speak only past its first loss. A burst then weighs
	// like one random loss and a lone loss does not raise the margin by
	// itself, while a link that keeps losing (5 % i.i.d.: a loss in the
	// fast window twice over) is still read within tens of heartbeats.
	// It wins where losses are lone or bursts short (less margin at the
	// same or fewer mistakes) and loses where long bursts are frequent
	// (more mistakes for the margin it saves), and it forgets a long lossy
	// spell about eight times slower: docs/failure-detection.md ("Loss
	// that costs little").
	LossRuns
)

// LossEstimatorNames are the estimators' names, by value: the values of
// cluster.loss_estimator.
var LossEstimatorNames = []string{LossRate: "rate", LossRuns: "runs"}

// String is the estimator's name.
func (e LossEstimator) String() string {
	if e >= 0 && int(e) < len(LossEstimatorNames) {
		return LossEstimatorNames[e]
	}
	return "LossEstimator(" + strconv.Itoa(int(e)) + ")"
}

// LossEstimatorNamed is the estimator of a name in LossEstimatorNames.
func LossEstimatorNamed(name string) (LossEstimator, bool) {
	i := slices.Index(LossEstimatorNames, name)
	return LossEstimator(i), i >= 0
}

// DefaultLossEstimator is the node's cluster.loss_estimator.
const DefaultLossEstimator = LossRate

// LossEstimatorParam is the parameter, valid with loss_budget for every
// detector, that picks LossAware's estimator: 0 LossRate, 1 LossRuns.
const LossEstimatorParam = "loss_estimator"

// Windows of the averages, in heartbeats.
const (
	lossFastWindow     = 50
	lossSlowWindow     = 1000
	lossRunsSlowWindow = 8000
)

// NewLossAware wraps inner (heartbeat period in ns) with a loss budget,
// estimating the loss with LossRate.
func NewLossAware(inner Detector, period int64, budget float64) *LossAware {
	return NewLossAwareWith(inner, period, budget, LossRate)
}

// NewLossAwareWith wraps inner with a loss budget and an estimator.
func NewLossAwareWith(inner Detector, period int64, budget float64, e LossEstimator) *LossAware {
	return &LossAware{inner: inner, period: period, logBudget: math.Log(budget), estimator: e}
}

// Observe implements Detector.
func (d *LossAware) Observe(seq uint64, arrival int64) {
	if d.seen && seq > d.last {
		// A gap longer than the margin can ever cover is an outage (a
		// partition, a stalled sender), not random loss: it says nothing
		// about the next heartbeat's chance of being lost, and counting it
		// would slow detection for minutes after every heal.
		shift := seq - d.last
		d.lostBits = shiftBits(d.lostBits, shift)
		if lost := shift - 1; lost <= LossMaxExtra {
			for i := range lost {
				d.lostBits |= 1 << (i + 1)
				d.fast += (1 - d.fast) / lossFastWindow
				d.slow += (1 - d.slow) / lossSlowWindow
			}
			if lost > 0 {
				d.runs += (1 - d.runs) / lossRunsSlowWindow
			}
			d.fast -= d.fast / lossFastWindow
			d.slow -= d.slow / lossSlowWindow
			d.runs -= d.runs / lossRunsSlowWindow
		}
	}
	// back < 63: the run's older neighbour, bit back+1, must still be in
	// the window to tell a split from a shortened run.
	if back := d.last - seq; d.seen && seq < d.last && back < 63 && d.lostBits&(1<<back) != 0 {
		// A late heartbeat counted lost when a newer one came: it was
		// reordered (jitter), not lost. Undo its loss, and for the runs the
		// run it was in: gone if it was the run's only loss, split in two
		// if it was in the middle.
		d.lostBits &^= 1 << back
		d.fast = max(0, d.fast-1.0/lossFastWindow)
		d.slow = max(0, d.slow-1.0/lossSlowWindow)
		older := d.lostBits&(1<<(back+1)) != 0
		newer := back > 1 && d.lostBits&(1<<(back-1)) != 0
		change := -1.0
		if older {
			change++
		}
		if newer {
			change++
		}
		d.runs = max(0, d.runs+change/lossRunsSlowWindow)
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
	return d.ExtraAt(d.Loss())
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

// Loss returns the loss rate the margin is priced at: LossRate's, or
// LossRuns' (runs of losses, the fast average past its first loss).
func (d *LossAware) Loss() float64 {
	if d.estimator == LossRuns {
		return max(d.fast-1.0/lossFastWindow, d.runs)
	}
	return d.LostShare()
}

// LostShare is the share of the link's heartbeats lost (the larger of
// the fast and slow averages of every loss), whatever the estimator: what
// the link's loss is shown as, and how other code tells a lossy link.
func (d *LossAware) LostShare() float64 { return max(d.fast, d.slow) }

// shiftBits moves a window of per-heartbeat bits on by n heartbeats.
func shiftBits(b, n uint64) uint64 {
	if n >= 64 {
		return 0
	}
	return b << n
}

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
