package cluster

import (
	"sync/atomic"
	"time"
)

// The shared-silence hold: a peer is not suspected for a silence every
// other peer shares. When the network delays or drops everything for a
// moment (a congested switch, a hypervisor pause of the links, a route
// change), every monitored peer goes quiet at once, and a detector fast
// enough to catch a crash in two periods suspects them all — each a
// mistake that sends the peer's pages to their next home or the origin.
// A crash is one peer silent while the others still arrive on time. So a
// peer whose freshness point has passed is suspected only with evidence
// that the network delivers: a heartbeat from another peer that arrived on
// time after this peer's was due. Without it the suspicion is held, up to
// holdCap past the due time (an isolated node, or one whose peers all
// died, still suspects them, later), and re-judged as soon as an on-time
// heartbeat arrives.
//
// When heartbeats come on time again after a silence shared by all
// (no on-time heartbeat for quietAfter, and another peer still overdue),
// the peers whose heartbeat was due inside it and not heard since get
// their whole freshness interval from that moment, once, as after a stall
// of this process (localShift): their delayed or next heartbeats are on
// the way, and the relay of a link can deliver a newer heartbeat of one
// peer before the held-up ones of another. A peer already overdue when
// the silence began is not moved on: a crashed one would otherwise be
// kept in view by every later gap of the others' heartbeats.
//
// This is the idea of Lifeguard's local health awareness (Dadgar,
// Phillips and Currey, "Lifeguard: Local Health Awareness for More
// Accurate Failure Detection", 2018), applied to heartbeats: memberlist
// applies it to its own probes, which decide membership, not this node's
// routing view. It sits outside every detector (shadows included), so the
// detectors are compared on equal terms (cluster.shared_silence_hold).

// onTimeSlack is how late a heartbeat may arrive, beyond the previous one's
// arrival plus its sequence gap in periods, and still count as on time.
func (c *Cluster) onTimeSlack() time.Duration { return c.cfg.Period / 2 }

// quietAfter is how long no heartbeat at all may come on time before the
// silence counts as shared: two and a half periods, more than the gaps of
// the merged arrivals of two or more live peers (under one period) or of
// one peer that lost a heartbeat (two).
func (c *Cluster) quietAfter() time.Duration { return 5 * c.cfg.Period / 2 }

// holdCap is how long past a peer's due time a suspicion may be held:
// memberlist's probe timeout (and never under four periods, refuteAfter),
// a silence shorter than which is not even a failed probe there.
func (c *Cluster) holdCap() time.Duration { return c.refuteAfter }

// arrivedOnTime records a heartbeat of p with sequence seq received at at,
// before p's state takes it in, and reports whether it is evidence that
// the network delivers: it came on time and, with
// Config.SharedSilenceLossless, its predecessor was not lost either. c.mu
// is held.
func (c *Cluster) arrivedOnTime(p *Peer, seq uint64, at time.Time) bool {
	const maxGap = 1 << 20 // sequence gaps beyond this (a wrapped or reset counter) say nothing
	// Measured from the newest heartbeat of p's current incarnation, not
	// the last to arrive: a reordered older one would stretch the gap.
	baseSeq, baseAt := p.newestSeq, p.newestAt
	if seq > baseSeq {
		p.newestSeq, p.newestAt = seq, at
	}
	if baseSeq == 0 || seq <= baseSeq || seq-baseSeq > maxGap {
		return false // the first, a reordered or an older one
	}
	expected := baseAt.Add(time.Duration(seq-baseSeq) * c.cfg.Period)
	if at.Sub(expected) > c.onTimeSlack() {
		return false
	}
	if !c.onTimeAt.IsZero() && at.Sub(c.onTimeAt) >= c.quietAfter() && c.othersOverdue(p, at) {
		c.recoveredAt, c.silenceFrom = at, c.onTimeAt
		if c.cfg.SharedSilenceHold {
			c.silence.ended.Add(1)
			c.metrics.SharedSilences.Inc()
		}
	}
	c.onTimeAt = at
	if c.cfg.SharedSilenceLossless && seq != baseSeq+1 {
		// On time after a loss: under loss on every link (a burst) the
		// heartbeats that get through come on time, and a silent peer's
		// are most likely lost too, not stopped.
		return false
	}
	c.evidenceAt = at
	return true
}

// holds reports whether p's suspicion is held: p is silent past its
// freshness point, but no heartbeat from anyone came on time (and, with
// SharedSilenceLossless, after no loss) since p's was due, another
// monitored peer could have sent one, p's link shows no loss, and the
// hold has not reached holdCap. c.mu is held.
func (c *Cluster) holds(p *Peer, now time.Time) bool {
	if !c.cfg.SharedSilenceHold {
		return false
	}
	due := p.lastRecv.Add(c.cfg.Period)
	if c.evidenceAt.After(due) || !now.Before(due.Add(c.holdCap())) {
		return false
	}
	if p.lossy() {
		// A lossy link's silence is left to the loss-aware margin. Measured:
		// at 20 % loss on every link the hold kept suspicions that had been
		// cutting large peer answers crawling under TCP's retransmissions
		// (resumed from the origin on the suspicion), and such an answer
		// then ran into the client's timeout: 3 client errors in 8 runs
		// with the hold there, 0 in 7 without (docs/failure-detection.md).
		return false
	}
	// With one other peer (three nodes) its next heartbeat, a period away
	// at most, releases a crashed peer's suspicion; with none (two nodes)
	// nothing could, and the detector decides alone.
	for _, q := range c.peers {
		if q != p && q.monitored && q.trusted && q.heard {
			return true
		}
	}
	return false
}

// othersOverdue reports whether a trusted monitored peer other than p has
// been silent for over a period at at: a silence that p alone broke was
// shared, not just a gap in p's own heartbeats. c.mu is held.
func (c *Cluster) othersOverdue(p *Peer, at time.Time) bool {
	for _, q := range c.peers {
		if q != p && q.monitored && q.trusted && q.heard && at.Sub(q.lastRecv) > c.cfg.Period {
			return true
		}
	}
	return false
}

// recoveryShift is how far p's freshness point moves for the last shared
// silence: to a whole interval after its end, if p's heartbeat was due
// inside it and p has not been heard since (0 otherwise). c.mu is held.
func (c *Cluster) recoveryShift(p *Peer) time.Duration {
	if !c.cfg.SharedSilenceHold || !c.recoveredAt.After(p.lastRecv) || p.lastRecv.Add(c.cfg.Period).Before(c.silenceFrom) {
		return 0
	}
	return c.recoveredAt.Sub(p.lastRecv)
}

// rejudgeHeld judges again the peers whose suspicion is held, once a
// heartbeat came on time: with that evidence a silent one is suspected at
// once. c.mu is held; the suspicions are the caller's to report.
func (c *Cluster) rejudgeHeld(from *Peer, now time.Time) []suspicion {
	var out []suspicion
	local := time.Duration(c.local.Load())
	for _, q := range c.peers {
		if !q.held || q == from {
			continue
		}
		if s, ok := c.judge(q, now, local, c.inGrace(now)); ok {
			out = append(out, s)
		} else {
			c.armDeadline(q, now)
		}
	}
	return out
}

// silenceCounts are the hold's totals, for the status page.
type silenceCounts struct {
	held, ended atomic.Uint64
}

// countHeld counts a suspicion newly held.
func (c *Cluster) countHeld() {
	c.silence.held.Add(1)
	c.metrics.HeldSuspicions.Inc()
}

// SharedSilenceState is the hold's state, for the status page.
type SharedSilenceState struct {
	On      bool   `json:"on"`       // cluster.shared_silence_hold
	HeldNow int    `json:"held_now"` // peers whose suspicion is held now
	Held    uint64 `json:"held"`     // suspicions held since start
	Ended   uint64 `json:"ended"`    // shared silences that ended since start
}

// SharedSilence returns the hold's state.
func (c *Cluster) SharedSilence() SharedSilenceState {
	s := SharedSilenceState{On: c.cfg.SharedSilenceHold, Held: c.silence.held.Load(), Ended: c.silence.ended.Load()}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, p := range c.peers {
		if p.held {
			s.HeldNow++
		}
	}
	return s
}
