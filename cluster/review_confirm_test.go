package cluster

import (
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/edgecache/edge/cluster/wire"
)

// probeLab is one monitored peer n1 with a learned clean link whose last
// heartbeat came at last, and a socket for the probes (asks to n1 go
// nowhere). c.mu is held by the caller of its steps.
func probeLab(t *testing.T) (*Cluster, *Peer, time.Time) {
	t.Helper()
	c, p := monitoredPeer(t, 100*time.Millisecond, time.Now().Add(5*time.Second))
	conn, err := wire.NewMemNetwork().Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	c.probeConn = conn
	return c, p, time.Unix(0, p.det.Freshness())
}

// askAtFreshness runs the judge a millisecond past p's freshness point
// (c.mu held) and fails the test unless it sent a probe rather than
// suspecting: where the probe tests start.
func askAtFreshness(t *testing.T, c *Cluster, p *Peer, fresh time.Time) {
	t.Helper()
	if _, suspected := c.judge(p, fresh.Add(time.Millisecond), 0, false); suspected || p.probeUntil.IsZero() {
		t.Fatal("no probe waiting after the freshness point")
	}
}

// TestReviewLateAnswerBeforeJudgeStillSuspects: an answer that comes
// after the probe's wait is, by confirm.go's contract, "counted (late)
// and changes nothing": the suspicion stands. But one that arrives
// between probeUntil and the judge that runs on the deadline timer (a
// millisecond later, more on a busy node) clears probeUntil, so the
// judge sends a second probe instead of suspecting, while the status
// page says "answered too late (suspected all the same)".
func TestReviewLateAnswerBeforeJudgeStillSuspects(t *testing.T) {
	c, p, fresh := probeLab(t)
	c.mu.Lock()
	defer c.mu.Unlock()
	askAtFreshness(t, c, p, fresh)
	until, nonce := p.probeUntil, p.probeNonces[0]
	c.probeAnswered(p, nonce, until.Add(200*time.Microsecond)) // late
	_, suspected := c.judge(p, until.Add(time.Millisecond), 0, false)
	st := c.Confirm()
	t.Logf("suspected %v, probes %+v", suspected, st)
	if st.Late != 1 {
		t.Fatalf("the answer was not counted late: %+v", st)
	}
	if !suspected {
		t.Errorf("a late answer kept the peer trusted (and started probe #%d): the wait was extended past probeWait", st.Asked)
	}
}

// TestReviewProbeOutcomesArePartition: each probe has one outcome
// (answered, unanswered, overtaken). A probe judged unanswered (suspected)
// whose answer then comes was counted unanswered AND late, as if two
// probes; late now counts answers, among the unanswered or overtaken.
func TestReviewProbeOutcomesArePartition(t *testing.T) {
	c, p, fresh := probeLab(t)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.judge(p, fresh.Add(time.Millisecond), 0, false)
	until, nonce := p.probeUntil, p.probeNonces[3]
	if _, ok := c.judge(p, until.Add(time.Millisecond), 0, false); !ok {
		t.Fatal("not suspected after the wait")
	}
	c.probeAnswered(p, nonce, until.Add(2*time.Millisecond))
	st := c.Confirm()
	if sum := st.Answered + st.Unanswered + st.Overtaken; sum != st.Asked || st.Late != 1 || st.Late > st.Unanswered+st.Overtaken {
		t.Errorf("%d probes asked, %d outcomes counted, %d late: %+v", st.Asked, sum, st.Late, st)
	}
}

// TestReviewFutileProbeOnAFarLink: the wait is clamped to a quarter
// period (25 ms at the default 100 ms), so on a link whose round trip is
// longer (another region: 60 ms here) no answer can ever come in time.
// The probe is still sent: every crash of that peer is detected a quarter
// period later, for no false suspicion ever spared, and the answers all
// count as "late".
func TestReviewFutileProbeOnAFarLink(t *testing.T) {
	c, p, fresh := probeLab(t)
	c.mu.Lock()
	defer c.mu.Unlock()
	p.rtt = 0.060
	for range rttSamples {
		p.noteRTT(60 * time.Millisecond) // the far-link test reads the latest samples
	}
	now := fresh.Add(time.Millisecond)
	wait := c.probeWait(p, 0)
	if _, ok := c.judge(p, now, 0, false); !ok {
		t.Errorf("suspicion deferred %v for a probe that cannot be answered within it (round trip 60 ms)", wait)
	}
}

// TestReviewAnswerLimitSurvivesAClockStep: the answer limit's window is
// reset only when a period has passed on the wall clock; after the clock
// steps back (NTP) it never does until the wall clock catches up, and
// a peer's probes go unanswered all that time.
func TestReviewAnswerLimitSurvivesAClockStep(t *testing.T) {
	c, p, _ := probeLab(t)
	c.mu.Lock()
	defer c.mu.Unlock()
	t0 := time.Unix(2000, 0)
	ask := func(i int) wire.Heartbeat {
		return wire.Heartbeat{Node: "n1", Incarnation: 1, Seq: 1, SendNs: int64(i + 1), Probe: wire.ProbeAsk}
	}
	for i := range answersPerPeriod {
		c.mayAnswer(p, ask(i), t0.Add(time.Duration(i)*time.Millisecond))
	}
	stepped := t0.Add(-3 * time.Second) // this node's clock steps back 3 s (within maxSkew)
	for i := range 10 {
		if c.mayAnswer(p, ask(answersPerPeriod+i), stepped.Add(time.Duration(i)*200*time.Millisecond)) {
			return
		}
	}
	t.Error("no ask answered for 2 s (20 periods) after the clock stepped back 3 s")
}

// replayRun is lostHeartbeatRun (n01's heartbeats to n00 lost when lose
// says so; probes pass) with, if attack, an on-path observer that has
// captured one of n00's asks to n01 and replays it to n01, 16 copies
// every 5 ms. It reports n00's suspicions of n01 and both probe records.
func replayRun(t *testing.T, attack bool, lose func(seq uint64) bool) (uint64, ConfirmState, ConfirmState) {
	network, ids, addrs, nodes, stopTrio := probeTrio(t, "a", true)
	stop := make(chan struct{})
	done := make(chan struct{})
	defer func() {
		close(stop)
		<-done
		stopTrio()
	}()
	observer, silent := nodes[ids[0]], ids[1]
	before := suspicionsOf(observer, silent)
	secret := observer.c.cfg.Secret
	var captured atomic.Value
	network.SetFilter(func(_, to string, b []byte) bool {
		hb, err := wire.Decode(b, secret)
		if err != nil {
			return false
		}
		if hb.Probe == wire.ProbeAsk && hb.Node == ids[0] && to == addrs[silent] {
			captured.CompareAndSwap(nil, append([]byte(nil), b...)) // the first one seen, stale from then on
		}
		return hb.Probe == wire.NotProbe && hb.Node == silent && to == addrs[ids[0]] && lose(hb.Seq)
	})
	attacker, err := network.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	target, _ := net.ResolveUDPAddr("udp", addrs[silent])
	go func() {
		defer close(done)
		defer attacker.Close()
		for {
			select {
			case <-stop:
				return
			case <-time.After(5 * time.Millisecond):
			}
			if b, ok := captured.Load().([]byte); ok && attack {
				for range answersPerPeriod { // 16 copies every 5 ms
					_, _ = attacker.WriteToUDP(b, target)
				}
			}
		}
	}()
	time.Sleep(3 * time.Second)
	return suspicionsOf(observer, silent) - before, observer.c.Confirm(), nodes[silent].c.Confirm()
}

// TestReviewReplayedAsksSilenceTheAnswers: the verifier keeps probes out
// of the replay window, and the answerer's only guard is answersPerPeriod
// (16 a peer a period). A replayer without the secret who captured one of
// n00's asks to n01 (valid for maxSkew, 5 s) replays it in bursts of 16:
// n01 spends n00's whole allowance on the copies and leaves n00's real
// asks unanswered, so every lost heartbeat is a suspicion again (the
// probe switched off from outside).
func TestReviewReplayedAsksSilenceTheAnswers(t *testing.T) {
	virtualTime(t, func(t *testing.T) {
		lose := func(seq uint64) bool { return seq%7 == 0 }
		quiet, st0, _ := replayRun(t, false, lose)
		attacked, st1, ans := replayRun(t, true, lose)
		t.Logf("suspicions without the replayer %d (%+v), with it %d (%+v); n01 answered %d, refused %d", quiet, st0, attacked, st1, ans.AnswersGiven, ans.AnswersRefused)
		if quiet != 0 {
			t.Fatalf("suspicions without the replayer: %d", quiet)
		}
		if attacked != 0 {
			t.Errorf("a replayer of one captured ask made %d suspicions the probe had spared", attacked)
		}
	})
}

// TestReviewAnswerGoesOnlyToThePeer: an ask's answer goes to the peer's
// heartbeat address; for a peer whose configured name did not resolve
// (p.udp nil) it went to the packet's source, which whoever replays a captured ask chooses (UDP
// source addresses are not authenticated): the node reflects answers to
// any address.
func TestReviewAnswerGoesOnlyToThePeer(t *testing.T) {
	c := newTestCluster(t, "hybrid", map[string]string{"n1": "127.0.0.1:1"})
	c.cfg.ConfirmProbe = true
	network := wire.NewMemNetwork()
	conn, _ := network.Listen("127.0.0.1:0")
	victim, _ := network.Listen("192.0.2.7:53")
	defer conn.Close()
	defer victim.Close()
	c.probeConn = conn
	c.mu.Lock()
	c.peers["n1"].udp = nil // cluster.peers named a host not resolvable at start
	c.mu.Unlock()
	ask := wire.Heartbeat{Node: "n1", Incarnation: 1, Seq: 12345, SendNs: time.Now().UnixNano(), Probe: wire.ProbeAsk}
	c.probeReceived(wire.Received{Heartbeat: ask, RecvNs: time.Now().UnixNano(), From: victim.LocalAddr().(*net.UDPAddr)})
	_ = victim.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
	buf := make([]byte, wire.MaxPacket)
	if n, _, err := victim.ReadFromUDP(buf); err == nil {
		t.Errorf("a %d-byte answer went to the ask's claimed source %v, not to n1's address", n, victim.LocalAddr())
	}
}
