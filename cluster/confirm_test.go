package cluster

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/edgecache/edge/cluster/wire"
	"github.com/edgecache/edge/fdetect"
)

// suspicionsOf is how many times node n suspected peer id.
func suspicionsOf(n *gossipNode, id string) uint64 {
	n.c.mu.Lock()
	defer n.c.mu.Unlock()
	if p := n.c.peers[id]; p != nil {
		return p.suspicions
	}
	return 0
}

// probeTrio starts three nodes with the probe on or off (all-to-all,
// 100 ms period, Chen's detector with a 30 ms margin: what ml learns on a
// clean link with a little jitter; on the in-memory network, with none,
// ml's margin stays at a period) and waits until they have learned clean
// links for 12 s. stop ends them (the next trio of the test then runs
// alone).
func probeTrio(t *testing.T, prefix string, confirm bool) (network *wire.MemNetwork, ids []string, addrs map[string]string, nodes map[string]*gossipNode, stop func()) {
	network = networkOf(t)
	ids, addrs, nodes = startGossipNodes(t, prefix, 3, 2, func(c *Config) {
		c.Monitoring, c.ProbeInterval, c.Period, c.ConfirmProbe = MonitorAll, DefaultProbeInterval, 100*time.Millisecond, confirm
		c.Detector, c.DetectorArgs = "chen", fdetect.Params{"alpha_ms": 30}
	})
	stop = func() {
		network.SetFilter(nil)
		stopAll(nodes)
		time.Sleep(3 * DefaultProbeInterval)
	}
	eventually(t, 60*time.Second, "every node trusts every other", allTrust(nodes, ids))
	time.Sleep(12 * time.Second)
	return network, ids, addrs, nodes, stop
}

// monitoredPeer returns a test cluster with the probe on whose peer n1 is
// a monitored, trusted member, its detector (Chen's) fed 50 heartbeats a
// period apart, the last at last. The peer's timer stops at cleanup.
func monitoredPeer(t *testing.T, period time.Duration, last time.Time) (*Cluster, *Peer) {
	t.Helper()
	c := newTestCluster(t, "hybrid", map[string]string{"n1": "127.0.0.1:1"})
	c.cfg.ConfirmProbe = true
	det, _ := fdetect.New("chen", int64(period), nil)
	for seq := uint64(1); seq <= 50; seq++ {
		det.Observe(seq, last.Add(time.Duration(seq-50)*period).UnixNano())
	}
	p := c.peers["n1"]
	p.det, p.member, p.monitored, p.trusted, p.heard, p.seen, p.lastRecv = det, true, true, true, true, true, last
	t.Cleanup(func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		if p.timer != nil {
			p.timer.Stop()
		}
	})
	return c, p
}

// lostHeartbeatRun starts probeTrio, then drops heartbeats of n01 to n00
// for which lose says so (never the probes or their answers), and reports
// how often n00 suspected n01 in the next 3 s and n00's probe record.
func lostHeartbeatRun(t *testing.T, confirm bool, lose func(seq uint64) bool) (uint64, ConfirmState) {
	network, ids, addrs, nodes, stop := probeTrio(t, "c", confirm)
	defer stop()
	observer, silent := nodes[ids[0]], ids[1]
	before := suspicionsOf(observer, silent)
	secret := observer.c.cfg.Secret
	var armed atomic.Bool
	var dropped atomic.Int64
	armed.Store(true)
	network.SetFilter(func(_, to string, b []byte) bool {
		hb, err := wire.Decode(b, secret)
		drop := armed.Load() && err == nil && hb.Probe == wire.NotProbe && hb.Node == silent && to == addrs[ids[0]] && lose(hb.Seq)
		if drop {
			dropped.Add(1)
		}
		return drop
	})
	time.Sleep(3 * time.Second)
	armed.Store(false)
	if dropped.Load() == 0 {
		t.Fatal("no heartbeat was dropped")
	}

	return suspicionsOf(observer, silent) - before, observer.c.Confirm()
}

// TestConfirmProbeSparesALostHeartbeat: on a clean link the detector's
// margin is a fraction of a period, so one lost heartbeat is a suspicion
// without the probe (the case the probe exists for, checked here so
// that the test exercises it), and none with it: the peer answers.
func TestConfirmProbeSparesALostHeartbeat(t *testing.T) {
	virtualTime(t, func(t *testing.T) {
		// Every 7th heartbeat in the next 3 s (four single losses, each
		// on a link that has lost nothing for 600 ms).
		lose := func(seq uint64) bool { return seq%7 == 0 }
		without, _ := lostHeartbeatRun(t, false, lose)
		with, st := lostHeartbeatRun(t, true, lose)
		t.Logf("suspicions without the probe %d, with it %d; probes %+v", without, with, st)
		if without == 0 {
			t.Fatal("no suspicion without the probe: the test does not reach the case")
		}
		if with != 0 || st.Answered == 0 || st.Unanswered != 0 {
			t.Errorf("with the probe: %d suspicions, probes %+v; want 0 and every probe answered", with, st)
		}
	})
}

// TestConfirmProbeStillDetectsACrash: a crashed peer does not answer, so
// it is suspected a probe's wait after its freshness point, well within
// a period of it.
func TestConfirmProbeStillDetectsACrash(t *testing.T) {
	virtualTime(t, func(t *testing.T) {
		network := networkOf(t)
		ids, addrs, nodes := startGossipNodes(t, "k", 3, 2, func(c *Config) {
			c.Monitoring, c.ProbeInterval, c.Period, c.ConfirmProbe = MonitorAll, DefaultProbeInterval, 100*time.Millisecond, true
		})
		defer func() {
			stopAll(nodes)
			time.Sleep(3 * DefaultProbeInterval)
		}()
		eventually(t, 60*time.Second, "every node trusts every other", allTrust(nodes, ids))
		time.Sleep(10 * time.Second)
		crashed, start := crashAndAwait(t, network, ids, addrs, nodes, 5*time.Second)
		observer := nodes[ids[0]].c
		st := observer.Confirm()
		observer.mu.Lock()
		took := observer.peers[crashed].suspectedAt.Sub(start)
		observer.mu.Unlock()
		t.Logf("suspected %v after the crash; probes %+v", took, st)
		if st.Unanswered == 0 {
			t.Errorf("suspected without an unanswered probe: %+v", st)
		}
		// ml's margin here is a period (no jitter on this network): the
		// crash's phase, the margin and at most a quarter period's wait.
		if limit := 2*100*time.Millisecond + 100*time.Millisecond/4; took <= 0 || took > limit {
			t.Errorf("suspected %v after the crash, want within %v", took, limit)
		}
	})
}

// TestProbeAnswerRules: only an answer naming a nonce this node waits
// for counts (a replay or a second copy does nothing); an answer in time
// moves the freshness point on past it by whole periods, and the next
// heartbeat clears the shift; an answer after the wait is counted and
// changes nothing (the suspicion stands until a heartbeat); asks are
// answered at most answersPerPeriod a period.
func TestProbeAnswerRules(t *testing.T) {
	const period = 100 * time.Millisecond
	t0 := time.Now()
	c, p := monitoredPeer(t, period, t0.Add(50*period))
	c.mu.Lock()
	defer c.mu.Unlock()
	fresh := time.Unix(0, p.det.Freshness())

	// A probe in flight (no socket here: set as awaitConfirm sets it).
	p.probeNonces = [probeCopies]uint64{11, 13, 15}
	p.probeSentAt, p.probeUntil = fresh, fresh.Add(5*time.Millisecond)
	for _, nonce := range []uint64{12, 0} {
		c.probeAnswered(p, nonce, fresh.Add(2*time.Millisecond))
		if p.probeRounds != 0 || p.probeShift != 0 || p.probeUntil.IsZero() {
			t.Fatalf("an answer naming %d counted", nonce)
		}
	}
	c.probeAnswered(p, 13, fresh.Add(2*time.Millisecond))
	if p.probeRounds != 1 || c.Confirm().Answered != 1 || !p.probeUntil.IsZero() {
		t.Fatalf("an answer in time: rounds %d, %+v", p.probeRounds, c.Confirm())
	}
	if p.probeShift != period {
		t.Errorf("shift %v after an answer just past the freshness point, want one period", p.probeShift)
	}
	c.probeAnswered(p, 15, fresh.Add(3*time.Millisecond))
	if p.probeRounds != 1 || p.probeShift != period {
		t.Error("a second copy's answer counted again")
	}
	if c.silent(p, fresh.Add(period-time.Millisecond), 0) || !c.silent(p, fresh.Add(period+time.Millisecond), 0) {
		t.Error("the answer did not move the freshness point on by exactly one period")
	}
	c.probeHeartbeat(p)
	if p.probeShift != 0 || p.probeRounds != 0 {
		t.Errorf("a heartbeat left shift %v, rounds %d", p.probeShift, p.probeRounds)
	}

	// Unanswered in time: suspected; the late answer is counted only.
	p.probeNonces = [probeCopies]uint64{21, 23, 25}
	p.probeSentAt, p.probeUntil = fresh, fresh.Add(5*time.Millisecond)
	p.probeUntil = time.Time{} // expired: judged unanswered
	c.setTrust(p, false)
	c.probeAnswered(p, 23, fresh.Add(8*time.Millisecond))
	if p.trusted || p.probeShift != 0 || c.Confirm().Late != 1 {
		t.Errorf("a late answer: trusted %v, shift %v, %+v", p.trusted, p.probeShift, c.Confirm())
	}

	// Asks: each nonce of the newest probe once; an older probe's, or
	// a nonce seen, is a replay; at most answersPerPeriod a period.
	ask := func(sendNs int64, nonce uint64) wire.Heartbeat {
		return wire.Heartbeat{Node: "n1", Incarnation: 1, Seq: nonce, SendNs: sendNs, Probe: wire.ProbeAsk}
	}
	at := t0
	for i := range probeCopies {
		if !c.mayAnswer(p, ask(100, uint64(i+1)), at) {
			t.Fatalf("ask %d of a probe refused", i+1)
		}
	}
	if c.mayAnswer(p, ask(100, 1), at) || c.mayAnswer(p, ask(100, 99), at) {
		t.Error("a nonce answered twice, or a ninth ask of one probe answered")
	}
	for i := range probeCopies {
		if !c.mayAnswer(p, ask(200, uint64(i+1)), at.Add(time.Millisecond)) {
			t.Fatalf("ask %d of a newer probe refused", i+1)
		}
	}
	if c.mayAnswer(p, ask(100, 3), at.Add(2*time.Millisecond)) {
		t.Error("an older probe's ask answered after a newer one")
	}
	if c.mayAnswer(p, ask(300, 1), at.Add(3*time.Millisecond)) {
		t.Error("more than answersPerPeriod asks answered in a period")
	}
	if !c.mayAnswer(p, ask(400, 1), at.Add(period)) {
		t.Error("an ask a period later refused")
	}
	if st := c.Confirm(); st.AnswersRefused != 4 {
		t.Errorf("refused %d asks, want 4: %+v", st.AnswersRefused, st)
	}
}

// TestExpiredProbeDoesNotSpinAHeldPeersTimer: a probe that expired while
// the peer's suspicion is held (shared silence) leaves the deadline at
// the hold's time, not at the probe's expiry (which, past, would re-arm
// the timer every millisecond until the hold ended); a probe still in
// flight sets the deadline to its wait's end.
func TestExpiredProbeDoesNotSpinAHeldPeersTimer(t *testing.T) {
	const period = 100 * time.Millisecond
	now := time.Now()
	c, p := monitoredPeer(t, period, now.Add(-2*period))
	c.cfg.SharedSilenceHold = true
	c.mu.Lock()
	defer c.mu.Unlock()
	p.held, p.probeUntil = true, now.Add(-time.Millisecond)
	c.armDeadline(p, now)
	if want := p.lastRecv.Add(period + c.holdCap()); p.deadline.Before(want) {
		t.Errorf("held with an expired probe: deadline in %v, want the hold's (%v)", p.deadline.Sub(now), want.Sub(now))
	}
	p.held, p.probeUntil = false, now.Add(4*time.Millisecond)
	c.armDeadline(p, now)
	if d := p.deadline.Sub(now); d < 4*time.Millisecond || d > 6*time.Millisecond {
		t.Errorf("a probe in flight: deadline in %v, want its wait's end (4 ms, +1 ms)", d)
	}
}

// TestProbeAbandonedWhenMonitoringStops: a probe still waiting when this
// node stops monitoring the peer (it left the membership) ends counted
// abandoned, so every probe asked has one outcome, and its answer, if it
// comes after that, neither counts nor moves the peer's point.
func TestProbeAbandonedWhenMonitoringStops(t *testing.T) {
	c, p, fresh := probeLab(t)
	c.mu.Lock()
	defer c.mu.Unlock()
	askAtFreshness(t, c, p, fresh)
	nonce := p.probeNonces[0]
	p.member, p.neighbour = false, false // memberDown, and not a neighbour
	c.updateMonitored(fresh.Add(2 * time.Millisecond))
	if p.monitored || !p.probeUntil.IsZero() {
		t.Fatalf("monitored %v, probe waiting until %v: want neither", p.monitored, p.probeUntil)
	}
	c.probeAnswered(p, nonce, fresh.Add(3*time.Millisecond))
	st := c.Confirm()
	if st.Asked != 1 || st.Abandoned != 1 || st.Answered+st.Unanswered+st.Overtaken+st.Superseded+st.Late != 0 {
		t.Errorf("probe record %+v: want one asked, abandoned, and nothing else", st)
	}
	if p.probeShift != 0 || p.probeRounds != 0 {
		t.Errorf("probe shift %v, rounds %d after the abandon: want none", p.probeShift, p.probeRounds)
	}
	// Monitored again later (a member and a neighbour once more, trusted
	// as memberUp leaves it), it starts unheard: no probe before a
	// heartbeat, and the abandoned nonce earns nothing.
	p.member, p.neighbour = true, true
	c.setTrust(p, true)
	c.updateMonitored(fresh.Add(4 * time.Millisecond))
	if !p.monitored || p.heard {
		t.Fatalf("monitored %v, heard %v: want monitored again, not yet heard", p.monitored, p.heard)
	}
	c.probeAnswered(p, nonce, fresh.Add(5*time.Millisecond))
	if got := c.Confirm(); got != st || p.probeShift != 0 || !p.probeUntil.IsZero() {
		t.Errorf("record %+v (was %+v), shift %v, probe until %v after monitoring resumed", got, st, p.probeShift, p.probeUntil)
	}
}

// TestLateAnswerOfAnAbandonedProbe (found by a review): an answer after the
// wait but before the judge ran is counted late; if the peer then stops
// being monitored, its probe ends abandoned. The outcomes still add up,
// and late stays among the ended probes.
func TestLateAnswerOfAnAbandonedProbe(t *testing.T) {
	c, p, fresh := probeLab(t)
	c.mu.Lock()
	defer c.mu.Unlock()
	askAtFreshness(t, c, p, fresh)
	c.probeAnswered(p, p.probeNonces[0], p.probeUntil.Add(time.Millisecond)) // late, not yet judged
	p.member, p.neighbour = false, false
	c.updateMonitored(p.probeUntil.Add(2 * time.Millisecond))
	st := c.Confirm()
	if st.Asked != st.Answered+st.Unanswered+st.Overtaken+st.Superseded+st.Abandoned {
		t.Errorf("outcomes do not add up: %+v", st)
	}
	if st.Late != 1 || st.Abandoned != 1 || st.Late > st.Unanswered+st.Overtaken+st.Superseded+st.Abandoned {
		t.Errorf("want one late answer of one abandoned probe: %+v", st)
	}
}
