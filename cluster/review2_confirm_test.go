package cluster

import (
	"testing"
	"time"

	"github.com/edgecache/edge/cluster/wire"
)

// TestReview2StaleRTTSkipsTheProbe: the far-link skip reads p.rtt, an
// EWMA (weight 0.1) of the heartbeats' echo round trips. A short delay
// spike on the link (here 5 heartbeats whose echoes took 300 ms: one-way
// congestion, or this process's own stall, since RecvNs is the read time)
// leaves p.rtt above a sixth of a period for ~20 periods after the link
// is clean again (0.3 × 0.9^20 = 36 ms > 16.7 ms). A single lost
// heartbeat in that time is suspected unprobed, though an answer would
// take 0.3 ms: the probe is off exactly after a disturbance. Before
// 49ecc94 it was probed and answered. Nothing measured in the probe's own
// answers (at − probeSentAt) ever corrects p.rtt.
func TestReview2StaleRTTSkipsTheProbe(t *testing.T) {
	c, p, _ := probeLab(t)
	const period = 100 * time.Millisecond
	c.mu.Lock()
	inc, base := p.incarnation, p.lastRecv
	c.mu.Unlock()
	beat := func(i int, rtt time.Duration) {
		recv := base.Add(time.Duration(i) * period)
		c.received(wire.Received{Heartbeat: wire.Heartbeat{Node: "n1", Incarnation: inc, Seq: uint64(50 + i), SendNs: recv.UnixNano(),
			EchoSeq: uint64(40 + i), EchoSendNs: recv.Add(-rtt - time.Millisecond).UnixNano(), EchoHoldNs: int64(time.Millisecond)}, RecvNs: recv.UnixNano()})
	}
	i := 1
	for ; i <= 5; i++ {
		beat(i, 300*time.Millisecond) // the spike
	}
	for ; i <= 25; i++ {
		beat(i, 300*time.Microsecond) // 2 s clean again
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	fresh := time.Unix(0, p.det.Freshness())
	rtt := time.Duration(p.rtt * float64(time.Second))
	_, suspected := c.judge(p, fresh.Add(time.Millisecond), 0, false) // heartbeat 26 lost
	st := c.Confirm()
	t.Logf("p.rtt %v two seconds after the spike (the link's round trip is 0.3 ms); suspected %v; %+v", rtt, suspected, st)
	if suspected || st.Asked != 1 {
		t.Errorf("a lost heartbeat on a 0.3 ms link was suspected without a probe (skipped %d): p.rtt still carries a spike 20 periods old", st.Skipped)
	}
}

// TestReview2ExpiredProbeDecidesALaterPoint: a probe whose wait ends
// while p's freshness point has moved on (this process's delay, or the
// network-loss shift at a burst's onset, grew during the wait) is left
// expired but unjudged. When the moved point passes, periods later and
// still in the same silence, awaitConfirm takes that stale probe as
// "unanswered" and suspects at once: no probe of the new point, even
// though the peer answered the old one (late, after the wait, at
// until+2 ms; since 49ecc94 a late answer no longer clears the probe).
func TestReview2ExpiredProbeDecidesALaterPoint(t *testing.T) {
	c, p, fresh := probeLab(t)
	const period = 100 * time.Millisecond
	c.mu.Lock()
	defer c.mu.Unlock()
	askAtFreshness(t, c, p, fresh)
	until, nonce := p.probeUntil, p.probeNonces[0]
	// The wait ends with the point moved on two periods: not silent.
	if _, ok := c.judge(p, until.Add(time.Millisecond), 2*period, false); ok {
		t.Fatal("suspected though the moved point has not passed")
	}
	c.probeAnswered(p, nonce, until.Add(2*time.Millisecond)) // the peer is alive: answered late
	// The moved point passes, 2 periods after the probe ended.
	_, suspected := c.judge(p, fresh.Add(2*period+time.Millisecond), 2*period, false)
	st := c.Confirm()
	t.Logf("suspected %v; %+v", suspected, st)
	if suspected && st.Asked == 1 {
		t.Errorf("suspected at a point %v after the only probe ended, on that probe (answered late) without asking again", fresh.Add(2*period).Sub(until))
	}
}

// TestReview2SweepProbeLeavesTimerLate: judge called from check (the
// ticker's sweep) may start a probe, but check never re-arms p's timer
// (fire and rejudgeHeld do). The timer was set when the last heartbeat
// came, with the local delay then (20 ms here); the sweep runs with
// today's (0), sees the point passed first and probes. The probe's end
// (5 ms later) is then judged only when the old timer fires, 10 ms after
// it: every crash found by a sweep is detected later by up to the local
// delay that aged out.
func TestReview2SweepProbeLeavesTimerLate(t *testing.T) {
	c, p, fresh := probeLab(t)
	c.local.Store(int64(20 * time.Millisecond))
	c.mu.Lock()
	c.armDeadline(p, fresh.Add(-50*time.Millisecond))
	c.mu.Unlock()
	c.local.Store(0)
	c.check(fresh.Add(6*time.Millisecond), 0)
	c.mu.Lock()
	defer c.mu.Unlock()
	if p.probeUntil.IsZero() {
		t.Fatal("the sweep sent no probe")
	}
	if late := p.deadline.Sub(p.probeUntil); late > 2*time.Millisecond {
		t.Errorf("probe ends at +%v, p's timer fires at +%v: its end judged %v late", p.probeUntil.Sub(fresh), p.deadline.Sub(fresh), late)
	}
}
