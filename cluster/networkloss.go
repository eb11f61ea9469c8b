package cluster

import (
	"slices"
	"time"

	"github.com/edgecache/edge/fdetect"
)

// The network-loss margin: loss that every link shows at once widens every
// link's margin at once. The loss-aware margin (fdetect.LossAware) learns
// a link's loss rate from that link's own sequence gaps, over about 50 and
// 1,000 heartbeats: right for a link that keeps dropping, but a burst on
// the network (a congested switch dropping 60 % of everything for a
// second) is over before a link's averages have risen, and every run of
// lost heartbeats inside it looks like a crash. Under such a burst each
// link's heartbeats that get through reveal their own gaps within a few
// periods, so this node sees the burst on all its links together long
// before any one link's averages do.
//
// So each monitored link also keeps a quick loss estimate (a moving
// average over about 10 heartbeats, a second at the default period), and
// the network's loss, for a peer, is the lower median of them over the
// other links (its own, silent, reveals no gaps): high only when at least
// half of them lose, so one bad link widens its own margin (its own
// estimates do that) but not the others'. A peer's freshness point moves on
// by the periods the loss-aware margin would add at the network's loss
// beyond those it adds at the link's own (localShift), for the main
// detector and the shadows alike.
//
// A crash is unaffected when the other links are clean (the network's loss
// stays near 0: a silent link reveals no gaps), and is detected up to
// fdetect.LossMaxExtra periods later during a burst or right after one,
// while the quick estimates decay (about two seconds). Measured in
// docs/failure-detection.md ("Network loss", cluster.network_loss_margin).

// quickLossWeight is the weight of one heartbeat in a link's quick loss
// estimate: about 10 heartbeats, a second at the default 100 ms period,
// the length of a burst that the slow averages miss.
const quickLossWeight = 0.1

// noteQuickLoss takes heartbeat seq of p's current incarnation into p's
// quick loss estimate. c.mu is held.
func (c *Cluster) noteQuickLoss(p *Peer, seq uint64) {
	switch {
	case p.lossSeq == 0:
	case seq > p.lossSeq:
		// A gap longer than the margin can cover is an outage, not loss
		// (as in LossAware): counting it would widen every margin for
		// seconds after each partition heals.
		if lost := seq - p.lossSeq - 1; lost <= fdetect.LossMaxExtra {
			for range lost {
				p.quickLoss += (1 - p.quickLoss) * quickLossWeight
			}
			p.quickLoss -= p.quickLoss * quickLossWeight
		}
	case seq < p.lossSeq:
		// Reordered: counted lost when a newer one came.
		p.quickLoss = max(0, p.quickLoss-quickLossWeight)
	}
	p.lossSeq = max(p.lossSeq, seq)
}

// networkLoss is the lower median of the quick loss estimates of the
// monitored links heard from (the gauge and the status page). c.mu is held.
func (c *Cluster) networkLoss() float64 { return c.networkLossBesides(nil) }

// networkLossBesides is networkLoss over the links other than except's:
// a silent link reveals no gaps, so its own estimate would drag the
// median down exactly when its silence is in question. c.mu is held.
func (c *Cluster) networkLossBesides(except *Peer) float64 {
	var v []float64
	for _, p := range c.peers {
		if p != except && p.monitored && p.heard && p.lossSeq != 0 {
			v = append(v, p.quickLoss)
		}
	}
	if len(v) == 0 {
		return 0
	}
	slices.Sort(v)
	return v[(len(v)-1)/2]
}

// networkLossExtra is how many periods the network's loss adds to p's
// loss-aware margin beyond its own link's loss: 0 with
// cluster.network_loss_margin off or a detector without a loss budget.
// c.mu is held.
func (c *Cluster) networkLossExtra(p *Peer) int {
	if !c.cfg.NetworkLossMargin {
		return 0
	}
	la, ok := p.det.(*fdetect.LossAware)
	if !ok {
		return 0
	}
	net := c.networkLossBesides(p)
	if net <= la.Loss() {
		return 0
	}
	return max(0, la.ExtraAt(net)-la.Extra())
}

// networkLossShift is networkLossExtra in time. c.mu is held.
func (c *Cluster) networkLossShift(p *Peer) time.Duration {
	return time.Duration(c.networkLossExtra(p)) * c.cfg.Period
}

// noteDeferred counts p's suspicion as deferred by the network's loss (its
// freshness point passed without the network's periods and not with them),
// once per silence. c.mu is held.
func (c *Cluster) noteDeferred(p *Peer, now time.Time, local time.Duration) {
	shift := c.networkLossShift(p)
	if shift == 0 || p.deferredFor.Equal(p.lastRecv) {
		return
	}
	if fdetect.Suspect(p.det, now.Add(-(c.localShift(p, local) - shift)).UnixNano()) {
		p.deferredFor = p.lastRecv
		c.netDeferred.Add(1)
		c.metrics.NetworkLossDeferrals.Inc()
	}
}

// NetworkLossState is the network-loss margin's state, for the status page.
type NetworkLossState struct {
	On       bool    `json:"on"`        // cluster.network_loss_margin
	Loss     float64 `json:"loss"`      // the network's loss now: the lower median of the links' quick estimates
	Deferred uint64  `json:"deferred"`  // suspicions deferred by it since start, each silence once
	MaxExtra int     `json:"max_extra"` // the most periods it adds to a peer's margin now
}

// NetworkLoss returns the network-loss margin's state.
func (c *Cluster) NetworkLoss() NetworkLossState {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := NetworkLossState{On: c.cfg.NetworkLossMargin, Loss: c.networkLoss(), Deferred: c.netDeferred.Load()}
	for _, p := range c.peers {
		if p.monitored {
			s.MaxExtra = max(s.MaxExtra, c.networkLossExtra(p))
		}
	}
	return s
}
