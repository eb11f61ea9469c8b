package cluster

import (
	"math/rand/v2"
	"net"
	"slices"
	"sync/atomic"
	"time"

	"github.com/edgecache/edge/cluster/wire"
)

// The confirmation probe (cluster.confirm_probe): before this node
// suspects a silent peer, it asks the peer directly, and suspects it only
// if no answer comes within probeWait.
//
// Why. A detector's margin on a clean link is a fraction of a period (it
// has learned that heartbeats come on time), so the first heartbeat lost
// on a link that has lost nothing yet passes the freshness point: a
// suspicion, cleared by the next heartbeat a period later. Measured live
// (docs/failure-detection.md, "Where the live loss scenarios' false
// suspicions come from"): every false suspicion of `ml` at the onset of 5
// % and 20 % loss was one such heartbeat, 55–650 ms into the fault, before
// the link's own estimates or the other links' (networkloss.go) had seen
// any loss. Buying it off with the margin costs every crash a period
// (what Chen's and two-windows' α do); a probe costs a crash only
// probeWait, a few round trips, since a crashed or cut-off peer does not
// answer. SWIM and memberlist's Lifeguard confirm a missed ping the same
// way (memberlist asks others to ping indirectly; a direct question
// suffices here, as the heartbeats are direct).
//
// How. The asks are heartbeat packets marked wire.ProbeAsk, sent over the
// heartbeat socket to the peer's heartbeat address (the path its
// heartbeats and ours take, faults included); their Seq is a fresh random
// nonce, so they take no sequence number from the heartbeats the
// detectors learn from. The peer answers each at once (wire.ProbeAnswer,
// echoing the nonce) to this node's heartbeat address, at most
// answersPerPeriod a period. An answer naming a nonce this node waits for
// proves the peer ran and the path both ways delivered just now: the
// heartbeat was lost, not the peer. Its freshness point then moves on by
// whole periods past the answer (Peer.probeShift, part of localShift, for
// the shadows too), to where the next heartbeat's would have been, and the
// next heartbeat clears the shift. No answer by probeWait: suspected, as
// without the probe. An answer after that is counted (late) and changes
// nothing: trusting the peer again at once would only have it suspected
// again at the next lost heartbeat of the same silence.
//
// Limits. A peer whose probes are answered (or whose freshness point
// moved on past a probe's wait before it was judged) but whose heartbeats
// stay lost is probed at most maxProbeRounds times in one silence; after that its
// detector alone decides (the loss-aware margin has learned the link's
// loss by then). The asks are not a second detector: a peer that answers
// within probeWait is not suspected, whatever the margin said, so the
// probe trades a little detection time on every crash (probeWait) for the
// suspicions of single lost heartbeats. A node without the probe bits
// refuses the asks as malformed heartbeats and never answers: its peers
// suspect it on their detectors alone, as before.

// probeCopies is how many asks a probe sends at once, each with its own
// nonce; any one answer confirms. The loss a probe must get through is
// the loss that made the heartbeat late: under 20 % independent loss each
// way a round trip fails 36 % of the time and all eight 0.03 %; in the
// fault lab's 60 % bursts one round trip in six gets through, one of
// eight 75 % of the time (three copies: 41 %, measured: 4 false
// suspicions in a burst run against 5 without the probe). Eight asks and
// their answers are about 2 KB, once per silence past a freshness point.
const probeCopies = 8

// maxProbeRounds is how many answered probes one silence may have before
// the detector alone decides: three lost heartbeats in a row on a link
// whose loss-aware margin has not covered them is loss the margin will
// have learned, or a peer whose heartbeats no longer leave it.
const maxProbeRounds = 3

// answersPerPeriod bounds the answers this node gives one peer in a
// period: two probes' worth. A replayed ask (the MAC holds, the nonce is
// the attacker's copy) earns at most this many answers, never a flood.
const answersPerPeriod = 2 * probeCopies

// minProbeWait is the least time a probe waits for its answer: on
// loopback or a LAN the round trip is well under a millisecond, but the
// peer must also be scheduled to answer, which on a busy machine takes a
// few milliseconds.
const minProbeWait = 5 * time.Millisecond

// rttSamples is how many of a link's latest round trips the far-link test
// reads: the least of eight, since any one of a probe's eight asks will
// do, and eight samples (less than a second at the default period) let a
// delay spike, or a stall of ours that made echoes look slow, pass at
// once (the smoothed RTT keeps one for about 20 periods).
const rttSamples = 8

// noteRTT records a round trip to p. c.mu is held.
func (p *Peer) noteRTT(d time.Duration) {
	p.rttSamples[p.rttNext%rttSamples] = d
	p.rttNext++
}

// leastRTT is the least of p's latest round trips (0 while none is known).
// c.mu is held.
func (p *Peer) leastRTT() time.Duration {
	n := min(p.rttNext, rttSamples)
	if n == 0 {
		return 0
	}
	return slices.Min(p.rttSamples[:n])
}

// probeWait is how long a probe of p waits for an answer: four smoothed
// round trips plus this process's recent scheduling delay, at least
// minProbeWait and at most a quarter period (what a crash may cost on top
// of its detection time). c.mu is held.
func (c *Cluster) probeWait(p *Peer, local time.Duration) time.Duration {
	w := 4*time.Duration(p.rtt*float64(time.Second)) + local
	return min(max(w, minProbeWait), c.cfg.Period/4)
}

// confirmStats counts probes and answers, for the status page.
type confirmStats struct {
	asked, answered, late, unanswered, overtaken, skipped, superseded, abandoned atomic.Uint64
	answersGiven, answersRefused                                                 atomic.Uint64
}

// awaitConfirm is judge's last step before suspecting p, whose freshness
// point passed: it reports whether the suspicion waits for a probe's
// answer, sending the probe if none is in flight. c.mu is held.
func (c *Cluster) awaitConfirm(p *Peer, now time.Time, local time.Duration) bool {
	if !c.cfg.ConfirmProbe || c.probeConn == nil {
		return false
	}
	point := c.freshnessPoint(p, now, local)
	if !p.probeUntil.IsZero() {
		if now.Before(p.probeUntil) {
			return true
		}
		waited := p.probeUntil.Sub(p.probeSentAt)
		p.probeUntil = time.Time{} // its nonces stay: a late answer still counts
		if !point.After(p.probeFor.Add(waited)) {
			c.countProbe(&c.confirm.unanswered, "unanswered")
			return false
		}
		// The point moved on past the probe's wait while it waited (our
		// own delay grew, or the network's loss): that probe said
		// nothing of this point. Ask again, within the probes a silence
		// may have.
		p.probeRounds++
		c.countProbe(&c.confirm.superseded, "superseded")
	}
	if p.probeRounds >= maxProbeRounds || p.udp == nil {
		return false
	}
	wait := c.probeWait(p, local)
	if rtt := p.leastRTT(); 2*wait < 3*rtt {
		// A far link (another region): no answer could come within
		// the wait, so a probe would only delay the suspicion.
		c.countProbe(&c.confirm.skipped, "skipped")
		return false
	}
	for i := range p.probeNonces {
		p.probeNonces[i] = rand.Uint64() | 1 // 0 is "none"
	}
	p.probeSentAt, p.probeUntil, p.probeFor = now, now.Add(wait), point
	c.countProbe(&c.confirm.asked, "asked")
	asks := make([]wire.Heartbeat, 0, probeCopies)
	for _, n := range p.probeNonces {
		asks = append(asks, c.probePacket(wire.ProbeAsk, p.ID, n, now))
	}
	// Sent off c.mu: a socket write is quick, but judge runs on every
	// deadline timer and the monitor's sweep.
	go c.sendProbePackets(c.probeConn, p.udp, asks)
	// The timer at the wait's end: a probe the sweep started would
	// otherwise be judged when a timer set earlier fires.
	c.armDeadline(p, now)
	return true
}

// countProbe counts a probe's outcome for the status page (n) and the
// metric.
func (c *Cluster) countProbe(n *atomic.Uint64, outcome string) {
	n.Add(1)
	c.metrics.ConfirmProbes.WithLabelValues(outcome).Inc()
}

// probePacket is this node's ask or answer to the peer to carrying nonce,
// sent at.
func (c *Cluster) probePacket(kind wire.ProbeKind, to string, nonce uint64, at time.Time) wire.Heartbeat {
	return wire.Heartbeat{Node: c.cfg.NodeID, To: to, Incarnation: c.incarnation, Seq: nonce, SendNs: at.UnixNano(), Region: c.cfg.Region, Probe: kind}
}

// sendProbePackets encodes and sends asks or answers to addr, counted
// with the heartbeats sent. A send error is the probe's unanswered case,
// not an error of ours.
func (c *Cluster) sendProbePackets(conn wire.PacketConn, addr *net.UDPAddr, hs []wire.Heartbeat) {
	for _, h := range hs {
		b, err := h.Encode(c.cfg.Secret)
		if err != nil {
			c.log.Error("confirmation probe", "err", err)
			return
		}
		if _, err := conn.WriteToUDP(b, addr); err == nil {
			c.metrics.HeartbeatPackets.WithLabelValues("sent").Inc()
			c.metrics.HeartbeatBytes.WithLabelValues("sent").Add(float64(len(b)))
		}
	}
}

// probeReceived handles an accepted ask or answer from a peer: an ask is
// answered at once (within answersPerPeriod), an answer confirms the
// probe it names.
func (c *Cluster) probeReceived(r wire.Received) {
	at := time.Unix(0, r.RecvNs)
	p := c.lockPeer(r.Node)
	if p == nil {
		return
	}
	if r.Probe == wire.ProbeAsk {
		// Answered at p's heartbeat address only: the packet's source is
		// not authenticated, and whoever replays an ask chooses it. A
		// peer whose address did not resolve yet is not answered (it
		// suspects this node on its detector alone, as without probes).
		addr, conn := p.udp, c.probeConn
		if addr == nil {
			c.refuseAnswer("no_route")
		}
		ok := addr != nil && conn != nil && c.mayAnswer(p, r.Heartbeat, at)
		c.mu.Unlock()
		if !ok {
			return
		}
		c.confirm.answersGiven.Add(1)
		c.metrics.ProbeAnswers.WithLabelValues("sent").Inc()
		c.sendProbePackets(conn, addr, []wire.Heartbeat{c.probePacket(wire.ProbeAnswer, r.Node, r.Seq, time.Now())})
		return
	}
	c.probeAnswered(p, r.Seq, at)
	c.mu.Unlock()
}

// mayAnswer reports whether p's ask h, received at, may be answered.
// Asks skip the heartbeats' replay window (their Seq is a nonce), so this
// is their replay check: only the asks of p's newest probe (its
// incarnation and send time; the copies of one probe share them), each
// nonce once, so a captured ask replayed later or again earns nothing,
// and, whatever gets through, at most answersPerPeriod answers a period.
// An asker whose clock steps back is not answered until it passes its
// newest probe's send time again: its probes go unanswered, and it
// suspects this node on its detector alone meanwhile. c.mu is held.
func (c *Cluster) mayAnswer(p *Peer, h wire.Heartbeat, at time.Time) bool {
	switch {
	case h.Incarnation > p.askInc || h.Incarnation == p.askInc && h.SendNs > p.askSendNs:
		p.askInc, p.askSendNs, p.askSeen = h.Incarnation, h.SendNs, p.askSeen[:0]
	case h.Incarnation == p.askInc && h.SendNs == p.askSendNs && len(p.askSeen) < probeCopies && !slices.Contains(p.askSeen, h.Seq):
	default:
		c.refuseAnswer("replayed")
		return false
	}
	if d := at.Sub(p.answersFrom); d >= c.cfg.Period || d < 0 {
		// A period on, or this node's clock stepped back.
		p.answersFrom, p.answersGiven = at, 0
	}
	if p.answersGiven >= answersPerPeriod {
		c.refuseAnswer("limited")
		return false
	}
	p.askSeen = append(p.askSeen, h.Seq)
	p.answersGiven++
	return true
}

// refuseAnswer counts an ask left unanswered, by reason.
func (c *Cluster) refuseAnswer(reason string) {
	c.confirm.answersRefused.Add(1)
	c.metrics.ProbeAnswers.WithLabelValues(reason).Inc()
}

// probeAnswered takes an answer naming nonce, received at: if this node
// waits for it and its wait has not ended, p is alive and its freshness
// point moves on past at by whole periods. An answer after the wait is
// only counted (late): its probe is judged unanswered all the same (or
// overtaken, if a heartbeat comes before the judge). c.mu is held.
func (c *Cluster) probeAnswered(p *Peer, nonce uint64, at time.Time) {
	if nonce == 0 || !slices.Contains(p.probeNonces[:], nonce) {
		return // a copy answered already, a replay, or a stale probe
	}
	p.probeNonces = [probeCopies]uint64{} // one answer per probe
	if p.probeUntil.IsZero() || at.After(p.probeUntil) {
		// Counted, nothing more: its suspicion stands until the next
		// heartbeat. Trusted again now, the peer would be probed and
		// suspected again at the next lost heartbeat of the same
		// silence, two suspicions where the detector alone makes one;
		// and the wait would have been longer than probeWait.
		c.countProbe(&c.confirm.late, "late")
		return
	}
	p.probeUntil = time.Time{}
	p.probeRounds++
	p.noteRTT(at.Sub(p.probeSentAt))
	c.countProbe(&c.confirm.answered, "answered")
	local := time.Duration(c.local.Load())
	if fresh := c.freshnessPoint(p, at, local); !at.Before(fresh) {
		p.probeShift += (at.Sub(fresh)/c.cfg.Period + 1) * c.cfg.Period
	}
	c.armDeadline(p, at)
}

// probeHeartbeat clears p's probe state as a heartbeat arrives: the
// heartbeat settles the silence whatever the probe would have said. c.mu
// is held.
func (c *Cluster) probeHeartbeat(p *Peer) {
	if !p.probeUntil.IsZero() {
		c.countProbe(&c.confirm.overtaken, "overtaken")
	}
	p.clearProbe()
}

// abandonProbe ends p's probe, if one is waiting, when this node stops
// monitoring p (it left the membership, or is no longer a neighbour nor
// routed to): no judge will run on it, so it would otherwise have no
// outcome. Its nonces go too; an answer after this is not counted. c.mu
// is held.
func (c *Cluster) abandonProbe(p *Peer) {
	if !p.probeUntil.IsZero() {
		c.countProbe(&c.confirm.abandoned, "abandoned")
	}
	p.clearProbe()
}

// clearProbe forgets p's probe and what its answers gave: a new silence
// starts from the detector alone. c.mu is held.
func (p *Peer) clearProbe() {
	p.probeNonces = [probeCopies]uint64{}
	p.probeUntil = time.Time{}
	p.probeShift, p.probeRounds = 0, 0
}

// ConfirmState is the confirmation probe's record, for the status page.
type ConfirmState struct {
	On bool `json:"on"` // cluster.confirm_probe
	// Asked probes (probeCopies asks each) end answered (in time: no
	// suspicion), unanswered (suspected), overtaken (a heartbeat came
	// first), superseded (the freshness point moved on past the wait,
	// asked again) or abandoned (this node stopped monitoring the peer
	// during the wait); Late counts answers that came after the wait, whose
	// probes are among the unanswered, overtaken, superseded or abandoned
	// (an answer after the wait, before the judge ran, of a peer that then
	// stopped being monitored).
	Asked      uint64 `json:"asked"`
	Answered   uint64 `json:"answered"`
	Unanswered uint64 `json:"unanswered"`
	Overtaken  uint64 `json:"overtaken"`
	Superseded uint64 `json:"superseded"`
	Abandoned  uint64 `json:"abandoned"`
	Late       uint64 `json:"late"`
	// Skipped are silences not probed: the link's round trip is too long
	// for an answer within the wait.
	Skipped uint64 `json:"skipped"`
	// AnswersGiven are the answers this node gave its peers' probes,
	// AnswersRefused the asks it left unanswered (replayed, over the
	// limit of a period).
	AnswersGiven   uint64 `json:"answers_given"`
	AnswersRefused uint64 `json:"answers_refused"`
}

// Confirm returns the confirmation probe's record.
func (c *Cluster) Confirm() ConfirmState {
	return ConfirmState{On: c.cfg.ConfirmProbe, Asked: c.confirm.asked.Load(), Answered: c.confirm.answered.Load(), Unanswered: c.confirm.unanswered.Load(),
		Overtaken: c.confirm.overtaken.Load(), Superseded: c.confirm.superseded.Load(), Abandoned: c.confirm.abandoned.Load(), Late: c.confirm.late.Load(), Skipped: c.confirm.skipped.Load(),
		AnswersGiven: c.confirm.answersGiven.Load(), AnswersRefused: c.confirm.answersRefused.Load()}
}
