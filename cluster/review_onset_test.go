package cluster

// A hostile review's tests of the onset estimate (networkloss.go), run in
// time order with a detector margin like ml's on a clean link: what a
// crash, a partition, a hostile field and this node's own late sending
// cost, against the bounds the code's comment states.

import (
	"math"
	"testing"
	"time"

	"github.com/edgecache/edge/cluster/wire"
	"github.com/edgecache/edge/fdetect"
)

// newNetworkLossLabMargin is newNetworkLossLab with a safety margin on
// every link's detector (ml learns about 70 ms on a clean link at the
// default period).
func newNetworkLossLabMargin(t *testing.T, margin time.Duration) *networkLossLab {
	l := newNetworkLossLab(t, true)
	for _, p := range l.peers {
		p.det = fdetect.NewLossAware(fdetect.NewChen(int64(l.period), 1000, int64(margin)), int64(l.period), 1e-7)
		p.lossSeq, p.quickLoss, p.recvBits, p.recvFrom = 0, 0, 0, 0
	}
	l.send(1, 600, func(int, uint64) bool { return false })
	return l
}

// firstSilent plays heartbeats from..to (dropping lost ones) in time order,
// calling delivered after each tick, and returns how long after heartbeat
// last was due link a is first silent (probed every 5 ms; -1: never), with
// the onset estimate on or off. A fresh lab per call: both see one history.
func firstSilent(t *testing.T, onset bool, from, to, last uint64, lost func(link int, seq uint64) bool, delivered func(l *networkLossLab, seq uint64)) time.Duration {
	l := newNetworkLossLabMargin(t, 70*time.Millisecond)
	a := l.peers[0]
	next := from
	for now := l.at(from); now.Before(l.at(to)); now = now.Add(5 * time.Millisecond) {
		for next <= to && !l.at(next).After(now) {
			l.send(next, next, lost)
			if delivered != nil {
				delivered(l, next)
			}
			next++
		}
		if l.silentWithOnset(a, now, onset) {
			return now.Sub(l.at(last))
		}
	}
	return -1
}

// TestReviewOnsetPartitionCost: this node and d cut off from a, b and c
// after heartbeat 603. Clean before the cut, the onset costs at most its
// capped period; one heartbeat lost just before the cut lifts the cap (a
// cut with one random loss looks like a burst's onset), and the far side
// is then deferred until its windows hold no arrival: the bound the
// comment states, about onsetWindow periods and the slack after the cut.
func TestReviewOnsetPartitionCost(t *testing.T) {
	for _, tc := range []struct {
		name   string
		lost   func(link int, seq uint64) bool
		within time.Duration // how much later than without the onset, at most
	}{
		{"clean before the cut", func(link int, seq uint64) bool { return link <= 2 && seq >= 604 }, 110 * time.Millisecond},
		{"fellow link d lost one", func(link int, seq uint64) bool { return link <= 2 && seq >= 604 || link == 3 && seq == 602 }, 300 * time.Millisecond},
		{"fellow link d lost the one at the cut", func(link int, seq uint64) bool { return link <= 2 && seq >= 604 || link == 3 && seq == 604 }, 300 * time.Millisecond},
		{"cut link b lost one before the cut", func(link int, seq uint64) bool { return link <= 2 && seq >= 604 || link == 1 && seq == 602 }, 300 * time.Millisecond},
	} {
		without := firstSilent(t, false, 601, 630, 603, tc.lost, nil)
		with := firstSilent(t, true, 601, 630, 603, tc.lost, nil)
		t.Logf("%s: suspected %v after the last heartbeat with the onset, %v without", tc.name, with, without)
		if with < 0 || with-without > tc.within || with > time.Duration(onsetWindow)*l100+l100/2+20*time.Millisecond {
			t.Errorf("%s: suspected %v after the last heartbeat with the onset, %v without (bound: %v later, %v after the cut)",
				tc.name, with, without, tc.within, time.Duration(onsetWindow)*l100+l100/2)
		}
	}
}

// l100 is the labs' heartbeat period.
const l100 = 100 * time.Millisecond

// TestReviewOnsetOwnLateSendingIsNotLoss: this node's heartbeat sender ran
// 70 ms late once (a pause short of the stall threshold), so every peer's
// next heartbeat echoes our previous one. Our late heartbeat was recorded
// when it went out, so it had no time to arrive: no loss, and a peer that
// crashed meanwhile is suspected as without the onset.
func TestReviewOnsetOwnLateSendingIsNotLoss(t *testing.T) {
	lost := func(link int, seq uint64) bool { return link == 0 && seq >= 604 }
	ours := func(l *networkLossLab, seq uint64) {
		l.c.mu.Lock()
		defer l.c.mu.Unlock()
		for _, q := range l.peers[1:] {
			sent := l.at(seq)
			if seq == 603 {
				sent = sent.Add(70 * time.Millisecond)
			}
			q.noteSent(seq, sent.UnixNano())
			echo := seq - 1 // the peer got ours of the tick before
			if seq == 604 {
				echo = 602 // ours of 603 left late, after the peer sent
			}
			l.c.noteEcho(q, wire.Heartbeat{EchoSeq: echo, EchoSendNs: 1}, l.at(seq))
		}
	}
	without := firstSilent(t, false, 601, 630, 603, lost, ours)
	with := firstSilent(t, true, 601, 630, 603, lost, ours)
	if with != without {
		t.Errorf("crashed a suspected %v after its last heartbeat with the onset, %v without", with, without)
	}
}

// TestReviewOnsetDeferralBounded: a crashed a while every other link loses
// 60 % for good and two of them echo one of ours lost on every heartbeat:
// a is still suspected within fdetect.LossMaxExtra periods past its
// margin.
func TestReviewOnsetDeferralBounded(t *testing.T) {
	lost := func(link int, seq uint64) bool { return link == 0 && seq >= 604 || link > 0 && burst60(link, seq) }
	echo := func(l *networkLossLab, seq uint64) {
		l.c.mu.Lock()
		defer l.c.mu.Unlock()
		for _, q := range l.peers[1:3] {
			q.noteSent(seq, l.at(seq).UnixNano())
			l.c.noteEcho(q, wire.Heartbeat{EchoSeq: seq - 2, EchoSendNs: 1}, l.at(seq))
		}
	}
	with := firstSilent(t, true, 601, 700, 603, lost, echo)
	without := firstSilent(t, false, 601, 700, 603, lost, echo)
	t.Logf("suspected %v after the last heartbeat (without the onset %v)", with, without)
	if limit := 170*time.Millisecond + fdetect.LossMaxExtra*l100 + 10*time.Millisecond; with < 0 || with > limit {
		t.Errorf("suspected %v after the last heartbeat: beyond the margin and LossMaxExtra periods (%v)", with, limit)
	}
}

// TestReviewOnsetHostileFields: huge and wrapping sequence numbers, clock
// extremes and absurd echoes neither panic nor loop, and the counts stay
// within a window per link.
func TestReviewOnsetHostileFields(t *testing.T) {
	l := newNetworkLossLab(t, true)
	l.c.mu.Lock()
	defer l.c.mu.Unlock()
	q := l.peers[1]
	for _, s := range []uint64{math.MaxUint64 - 3, math.MaxUint64 - 1, math.MaxUint64, 1, 5, math.MaxUint64 - 2, 0, 2} {
		l.c.noteQuickLoss(q, s, l.at(700))
		q.noteSent(s, l.at(700).UnixNano())
		for _, now := range []time.Time{l.at(700), l.at(700).Add(math.MaxInt64 / 2), time.Unix(0, math.MinInt64), time.Unix(1<<40, 0)} {
			m, r, a := l.c.recentLoss(q, now)
			if m+a > 2*onsetWindow || r > m || m < 0 || a < 0 {
				t.Errorf("seq %d now %v: missing %d revealed %d arrived %d", s, now, m, r, a)
			}
		}
	}
	for _, echo := range []uint64{0, 1, math.MaxUint64, math.MaxUint64 - 1} {
		for _, at := range []time.Time{l.at(700), time.Unix(0, math.MinInt64), time.Unix(1<<40, 0)} {
			q.echoLost = 0
			l.c.noteEcho(q, wire.Heartbeat{EchoSeq: echo, EchoSendNs: 1, EchoHoldNs: math.MaxInt64}, at)
			if q.echoLost < 0 || q.echoLost > fdetect.LossMaxExtra {
				t.Errorf("echo %d at %v: echoLost %d", echo, at, q.echoLost)
			}
		}
	}
	if loss, _ := l.c.onsetLoss(nil, l.at(700)); loss < 0 || loss > 1 || math.IsNaN(loss) {
		t.Errorf("onset loss %v", loss)
	}
}
