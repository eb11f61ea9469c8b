package cluster

import (
	"slices"
	"time"

	"github.com/edgecache/edge/cluster/wire"
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
//
// The onset (cluster.network_loss_onset). The quick estimates count a lost
// heartbeat only when a later one reveals the gap, so in a burst's first
// two or three periods they are still near 0 while the links already miss
// heartbeats: a link silent for two periods then looked like a crash to
// every node at once (measured: 8–11 false suspicions per `make chaos`
// loss-burst run, all at the first burst's onset). So the network's loss
// for a peer is also read from the other links' last onsetWindow due
// heartbeats: the missing ones (revealed or still overdue by more than
// onTimeSlack) over those due, and this node's heartbeats to them that
// their echoes show lost (a heartbeat echoes the newest of ours its
// sender had received: ours sent after it, long enough before, were lost
// on the way, revealed at once; noteEcho). It counts only links that delivered at
// least one of them (one silent throughout is an outage or a crash, not
// loss), and only when at least two of them miss heartbeats: a crash
// among clean links with one other heartbeat late, or one bad link, is
// judged as before. Links that merely stopped together are also what a
// node sees when a partition cuts it off with a few fellows from the
// rest, so until a missing heartbeat is known lost (a later arrival or an
// echo) the onset adds at most one period (onsetUnrevealedExtra): a burst
// shows its gaps within that period and is deferred in full. A partition
// is not always that cheap (a hostile review measured it): one heartbeat
// lost anywhere just before the cut (background loss) lifts the cap, and
// the far side is then deferred until its links' windows hold no
// arrival, about onsetWindow periods and the slack after the cut (450 ms
// at the default period against 175 ms without the onset); a minority of
// three, seen from the majority, is two stopped links besides the judged
// one and costs the capped period. At that moment a cut with one random
// loss and a burst's onset look the same.

// quickLossWeight is the weight of one heartbeat in a link's quick loss
// estimate: about 10 heartbeats, a second at the default 100 ms period,
// the length of a burst that the slow averages miss.
const quickLossWeight = 0.1

// onsetWindow is how many of a link's latest due heartbeats the onset
// estimate reads: four periods, long enough that a 60 % burst shows on
// most links within its first two or three, short enough to forget it
// half a second after it ends.
const onsetWindow = 4

// noteQuickLoss takes heartbeat seq of p's current incarnation, arrived at
// at, into p's quick loss estimate and its window of arrivals. c.mu is held.
func (c *Cluster) noteQuickLoss(p *Peer, seq uint64, at time.Time) {
	switch {
	case p.lossSeq == 0 || seq > p.lossSeq+fdetect.LossMaxExtra+1:
		// The first, or after a gap longer than the margin can cover: an
		// outage, not loss (as in LossAware). Counting it would widen every
		// margin for seconds after each partition heals; the window starts
		// here, and what came before says nothing about loss.
		p.recvBits, p.recvFrom, p.lossAt = 1, seq, at
	case seq > p.lossSeq:
		for range seq - p.lossSeq - 1 {
			p.quickLoss += (1 - p.quickLoss) * quickLossWeight
		}
		p.quickLoss -= p.quickLoss * quickLossWeight
		p.recvBits = p.recvBits<<(seq-p.lossSeq) | 1
		p.lossAt = at
	case seq < p.lossSeq:
		// Reordered: counted lost when a newer one came.
		p.quickLoss = max(0, p.quickLoss-quickLossWeight)
		if seq >= p.recvFrom && p.lossSeq-seq < 64 {
			p.recvBits |= 1 << (p.lossSeq - seq)
		}
	}
	p.lossSeq = max(p.lossSeq, seq)
}

// recentLoss reads q's last onsetWindow heartbeats due by now: how many
// are missing (lost, or overdue past onTimeSlack), how many of those a
// later arrival revealed lost, and how many arrived. c.mu is held.
func (c *Cluster) recentLoss(q *Peer, now time.Time) (missing, revealed, arrived int) {
	if q.lossSeq == 0 {
		return 0, 0, 0
	}
	top := q.lossSeq // the newest heartbeat due by now
	if late := now.Sub(q.lossAt) - c.onTimeSlack(); late > 0 {
		top += uint64(late / c.cfg.Period)
	}
	for s := top; s >= q.recvFrom && top-s < onsetWindow; s-- {
		switch {
		case s > q.lossSeq:
			missing++ // overdue
		case q.recvBits&(1<<(q.lossSeq-s)) != 0:
			arrived++
		default:
			missing++
			revealed++
		}
	}
	if q.echoLost > 0 && now.Sub(q.echoLostAt) < onsetWindow*c.cfg.Period {
		lost := min(q.echoLost, onsetWindow)
		missing, revealed = missing+lost, revealed+lost
	}
	return missing, revealed, arrived
}

// sentRing is how many of this node's latest heartbeats to a peer are
// remembered for reading its echoes: more than fdetect.LossMaxExtra, so a
// run of losses the margin could cover is counted whole.
const sentRing = 16

// sentBeat is one heartbeat this node sent to a peer.
type sentBeat struct {
	seq    uint64
	sendNs int64
}

// noteSent remembers that this node sent heartbeat seq to p at sendNs.
// c.mu is held.
func (p *Peer) noteSent(seq uint64, sendNs int64) {
	p.sent[p.sentNext] = sentBeat{seq, sendNs}
	p.sentNext = (p.sentNext + 1) % sentRing
}

// noteEcho takes p's heartbeat h, arrived at at, as evidence about this
// node's heartbeats to p. h echoes the newest of ours p had received when
// it sent h; ours sent after that one, early enough to have reached p
// before it sent h (a round trip and onTimeSlack before h arrived), were
// lost on the way. Counting them from this node's own record of what it
// sent, not from how long p says it held the echo, leaves out this node's
// own late sending (a stalled sender sends late, and its heartbeats are
// recorded when they went), heartbeats it never sent to p, and p's clock.
// c.mu is held.
func (c *Cluster) noteEcho(p *Peer, h wire.Heartbeat, at time.Time) {
	if h.EchoSeq == 0 || !p.monitored {
		return
	}
	cutoff := at.Add(-time.Duration(p.rtt*float64(time.Second)) - c.onTimeSlack()).UnixNano()
	lost := 0
	for _, b := range p.sent {
		if b.seq > h.EchoSeq && b.sendNs != 0 && b.sendNs <= cutoff {
			lost++
		}
	}
	if lost == 0 || lost > fdetect.LossMaxExtra {
		return // none lost, or an outage
	}
	p.echoLost, p.echoLostAt = lost, at
}

// onsetLoss is the share of the heartbeats due lately on the links other
// than except's that are missing, or 0 without the evidence the onset
// needs, and whether a later arrival revealed any of them lost (see the
// top of this file). c.mu is held.
func (c *Cluster) onsetLoss(except *Peer, now time.Time) (loss float64, revealed bool) {
	if !c.cfg.NetworkLossOnset {
		return 0, false
	}
	var missing, lost, due, missingLinks int
	for _, q := range c.peers {
		if q == except || !q.monitored || !q.heard {
			continue
		}
		m, r, a := c.recentLoss(q, now)
		if a == 0 {
			continue // silent throughout: an outage or a crash, not loss
		}
		missing, lost, due = missing+m, lost+r, due+m+a
		if m > 0 {
			missingLinks++
		}
	}
	if missingLinks < 2 {
		return 0, false
	}
	return float64(missing) / float64(due), lost > 0
}

// onsetUnrevealedExtra caps the periods the onset adds while none of the
// missing heartbeats is known lost: links that stopped together may be
// the far side of a partition that cut this node off with its fellows,
// and a period later a burst has revealed its gaps (and is deferred in
// full) while a partition still has not.
const onsetUnrevealedExtra = 1

// networkLoss is the lower median of the quick loss estimates of the
// monitored links heard from, or their onset loss if higher (the gauge
// and the status page). c.mu is held.
func (c *Cluster) networkLoss(now time.Time) float64 { return c.networkLossBesides(nil, now) }

// networkLossBesides is networkLoss over the links other than except's:
// a silent link reveals no gaps, so its own estimate would drag the
// median down exactly when its silence is in question. c.mu is held.
func (c *Cluster) networkLossBesides(except *Peer, now time.Time) float64 {
	onset, _ := c.onsetLoss(except, now)
	return max(c.quickNetworkLoss(except), onset)
}

// quickNetworkLoss is the lower median of the quick estimates of the
// links other than except's. c.mu is held.
func (c *Cluster) quickNetworkLoss(except *Peer) float64 {
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
func (c *Cluster) networkLossExtra(p *Peer, now time.Time) int {
	quick, onset := c.networkLossParts(p, now)
	return max(quick, onset)
}

// networkLossParts are the periods the quick estimates and the onset
// estimate each add to p's margin (0 and 0 with the margin off or a
// detector without a loss budget). c.mu is held.
func (c *Cluster) networkLossParts(p *Peer, now time.Time) (quick, onset int) {
	if !c.cfg.NetworkLossMargin {
		return 0, 0
	}
	la, ok := p.det.(*fdetect.LossAware)
	if !ok {
		return 0, 0
	}
	quick = extraBeyondLink(la, c.quickNetworkLoss(p))
	if loss, revealed := c.onsetLoss(p, now); loss > 0 {
		onset = extraBeyondLink(la, loss)
		if !revealed {
			onset = min(onset, onsetUnrevealedExtra)
		}
	}
	return quick, onset
}

// extraBeyondLink is how many periods la adds at the network's loss net
// beyond those it adds at its own link's loss.
func extraBeyondLink(la *fdetect.LossAware, net float64) int {
	if net <= la.Loss() {
		return 0
	}
	return max(0, la.ExtraAt(net)-la.Extra())
}

// networkLossShift is networkLossExtra in time. c.mu is held.
func (c *Cluster) networkLossShift(p *Peer, now time.Time) time.Duration {
	return time.Duration(c.networkLossExtra(p, now)) * c.cfg.Period
}

// noteDeferred counts p's suspicion as deferred by the network's loss (its
// freshness point passed without the network's periods and not with them),
// once per silence. c.mu is held.
func (c *Cluster) noteDeferred(p *Peer, now time.Time, local time.Duration) {
	if p.deferredFor.Equal(p.lastRecv) {
		return
	}
	quick, onset := c.networkLossParts(p, now)
	if max(quick, onset) == 0 {
		return
	}
	// Suspected with only the given periods of the network's loss added?
	suspectedWith := func(periods int) bool {
		shift := c.ownShift(p, local) + time.Duration(periods)*c.cfg.Period
		return fdetect.Suspect(p.det, now.Add(-shift).UnixNano())
	}
	if suspectedWith(0) {
		p.deferredFor = p.lastRecv
		c.netDeferred.Add(1)
		c.metrics.NetworkLossDeferrals.Inc()
		if suspectedWith(quick) { // deferred for the onset alone
			c.onsetDeferred.Add(1)
			c.metrics.NetworkOnsetDeferrals.Inc()
		}
	}
}

// NetworkLossState is the network-loss margin's state, for the status page.
type NetworkLossState struct {
	On       bool    `json:"on"`       // cluster.network_loss_margin
	Onset    bool    `json:"onset"`    // cluster.network_loss_onset
	Loss     float64 `json:"loss"`     // the network's loss now: the lower median of the links' quick estimates, or the onset's estimate if higher
	Deferred uint64  `json:"deferred"` // suspicions deferred by it since start, each silence once
	// OnsetDeferred are those of Deferred that the onset estimate alone
	// deferred (the quick estimates would not have).
	OnsetDeferred uint64 `json:"onset_deferred"`
	MaxExtra      int    `json:"max_extra"` // the most periods it adds to a peer's margin now
}

// NetworkLoss returns the network-loss margin's state.
func (c *Cluster) NetworkLoss() NetworkLossState {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := time.Now()
	s := NetworkLossState{On: c.cfg.NetworkLossMargin, Onset: c.cfg.NetworkLossOnset, Loss: c.networkLoss(now), Deferred: c.netDeferred.Load(), OnsetDeferred: c.onsetDeferred.Load()}
	for _, p := range c.peers {
		if p.monitored {
			s.MaxExtra = max(s.MaxExtra, c.networkLossExtra(p, now))
		}
	}
	return s
}
