package cluster

import (
	"testing"
	"time"

	"github.com/edgecache/edge/cluster/wire"
	"github.com/edgecache/edge/fdetect"
)

// networkLossLab is four monitored links fed heartbeats by hand: each
// link's loss-aware detector and the cluster's quick estimates see the
// same sequence, as received does.
type networkLossLab struct {
	t      *testing.T
	c      *Cluster
	peers  []*Peer
	t0     time.Time
	now    time.Time // the last heartbeat sent
	period time.Duration
}

func newNetworkLossLab(t *testing.T, on bool) *networkLossLab {
	const period = 100 * time.Millisecond
	c := newTestCluster(t, "hybrid", map[string]string{"n1": "127.0.0.1:1", "n2": "127.0.0.1:2"})
	c.cfg.NetworkLossMargin = on
	c.cfg.NetworkLossOnset = on
	l := &networkLossLab{t: t, c: c, t0: time.Unix(1000, 0), period: period}
	c.peers = map[string]*Peer{}
	for _, id := range []string{"a", "b", "c", "d"} {
		det := fdetect.NewLossAware(fdetect.NewChen(int64(period), 1000, 0), int64(period), 1e-7)
		p := &Peer{ID: id, det: det, monitored: true, trusted: true, heard: true}
		c.peers[id] = p
		l.peers = append(l.peers, p)
	}
	// A clean minute on every link: the slow averages know no loss.
	l.send(1, 600, func(int, uint64) bool { return false })
	return l
}

// at is when heartbeat seq is due (and, sent on a clean link, arrives).
func (l *networkLossLab) at(seq uint64) time.Time { return l.t0.Add(time.Duration(seq) * l.period) }

// send delivers heartbeats from..to on every link, in time order, except
// those lost(link, seq) drops.
func (l *networkLossLab) send(from, to uint64, lost func(link int, seq uint64) bool) {
	for seq := from; seq <= to; seq++ {
		l.now = l.at(seq)
		for i, p := range l.peers {
			if lost(i, seq) {
				continue
			}
			at := l.at(seq)
			l.c.mu.Lock()
			p.det.Observe(seq, at.UnixNano())
			l.c.noteQuickLoss(p, seq, at)
			p.lastRecv, p.heard = at, true
			l.c.mu.Unlock()
		}
	}
}

func (l *networkLossLab) silent(p *Peer, now time.Time) bool {
	l.c.mu.Lock()
	defer l.c.mu.Unlock()
	return l.c.silent(p, now, 0)
}

// burst60 drops 3 of every 5 heartbeats, each link at another phase.
func burst60(link int, seq uint64) bool { return (seq+uint64(link))%5 < 3 }

// TestNetworkLossDefersSuspicionsInABurst: 60 % loss on every link for
// half a second, link a's last five heartbeats all lost. Its own estimates
// have not learned the burst (a clean minute before it), so the loss-aware
// margin alone suspects it; with the network's loss it is not suspected.
func TestNetworkLossDefersSuspicionsInABurst(t *testing.T) {
	for _, on := range []bool{false, true} {
		l := newNetworkLossLab(t, on)
		a := l.peers[0]
		l.send(601, 605, func(link int, seq uint64) bool { return link == 0 || burst60(link, seq) })
		now := l.at(605).Add(l.period / 2)
		got := l.silent(a, now)
		if got == on {
			t.Errorf("network_loss_margin %v: a silent %v after five lost heartbeats in a burst (network loss %.2f, link loss %.3f)",
				on, got, l.c.networkLoss(l.now), a.det.(*fdetect.LossAware).Loss())
		}
		if on && l.c.NetworkLoss().MaxExtra == 0 {
			t.Errorf("status: no extra periods during the burst (network loss %.2f)", l.c.networkLoss(l.now))
		}
		if on {
			l.c.mu.Lock()
			l.c.judge(a, now, 0, false)
			l.c.judge(a, now.Add(time.Millisecond), 0, false)
			l.c.mu.Unlock()
			if n := l.c.NetworkLoss().Deferred; n != 1 {
				t.Errorf("deferred %d suspicions, want 1 (one silence counted once)", n)
			}
		}
	}
}

// TestNetworkLossLeavesACrashAlone: with the other links clean, a crashed
// peer is suspected as soon as without the network-loss margin.
func TestNetworkLossLeavesACrashAlone(t *testing.T) {
	l := newNetworkLossLab(t, true)
	a := l.peers[0]
	l.send(601, 605, func(link int, _ uint64) bool { return link == 0 })
	if got := l.c.networkLoss(l.now); got > 0.01 {
		t.Fatalf("network loss %.3f with three clean links and one silent", got)
	}
	if !l.silent(a, l.at(603)) {
		t.Errorf("crashed peer not suspected three periods after its last heartbeat on a clean network")
	}
}

// TestOneLossyLinkDoesNotWidenTheOthers: one link at 60 % loss is that
// link's loss, not the network's: the lower median keeps the others'
// margins (a crash among them is still caught on time).
func TestOneLossyLinkDoesNotWidenTheOthers(t *testing.T) {
	l := newNetworkLossLab(t, true)
	a := l.peers[0]
	l.send(601, 700, func(link int, seq uint64) bool { return link == 1 && burst60(link, seq) })
	l.send(701, 705, func(link int, seq uint64) bool { return link == 0 || (link == 1 && burst60(link, seq)) })
	if got := l.c.networkLoss(l.now); got > 0.01 {
		t.Errorf("network loss %.3f with one lossy link of four", got)
	}
	if !l.silent(a, l.at(703)) {
		t.Errorf("crashed peer on a clean link not suspected in time while another link loses")
	}
	if l.c.networkLossExtra(l.peers[1], l.now) != 0 {
		t.Errorf("the lossy link got network periods: its own estimates are its margin")
	}
}

// TestNetworkLossForgetsABurst: about two seconds of clean heartbeats after
// a burst, the network adds nothing: a crash then is caught on time.
func TestNetworkLossForgetsABurst(t *testing.T) {
	l := newNetworkLossLab(t, true)
	l.send(601, 610, burst60)
	if l.c.networkLoss(l.now) < 0.2 {
		t.Fatalf("network loss %.3f after a second of 60 %% loss on every link", l.c.networkLoss(l.now))
	}
	l.send(611, 640, func(int, uint64) bool { return false })
	for _, p := range l.peers {
		if n := l.c.networkLossExtra(p, l.now); n != 0 {
			t.Errorf("%s: %d network periods three seconds after the burst (network loss %.4f)", p.ID, n, l.c.networkLoss(l.now))
		}
	}
}

// TestQuickLossIgnoresOutagesAndReordering: a gap longer than the margin
// can cover (a partition healing) and a reordered heartbeat are not loss.
func TestQuickLossIgnoresOutagesAndReordering(t *testing.T) {
	l := newNetworkLossLab(t, true)
	l.send(650, 660, func(int, uint64) bool { return false }) // 49 missing: an outage
	if l.c.networkLoss(l.now) != 0 {
		t.Errorf("network loss %.3f after an outage", l.c.networkLoss(l.now))
	}
	a := l.peers[0]
	l.c.mu.Lock()
	l.c.noteQuickLoss(a, 663, l.at(663)) // 661 and 662 counted lost
	lost := a.quickLoss
	l.c.noteQuickLoss(a, 661, l.at(661)) // reordered, not lost
	l.c.noteQuickLoss(a, 662, l.at(662))
	l.c.mu.Unlock()
	if a.quickLoss >= lost/2 {
		t.Errorf("quick loss %.3f after both 'lost' heartbeats came late (was %.3f)", a.quickLoss, lost)
	}
}

// silentWithOnset reports whether p is silent at now with the onset
// estimate on or off (the quick estimates on in both).
func (l *networkLossLab) silentWithOnset(p *Peer, now time.Time, onset bool) bool {
	l.c.cfg.NetworkLossOnset = onset
	defer func() { l.c.cfg.NetworkLossOnset = true }()
	return l.silent(p, now)
}

func (l *networkLossLab) onsetLoss(except *Peer, now time.Time) (float64, bool) {
	l.c.mu.Lock()
	defer l.c.mu.Unlock()
	return l.c.onsetLoss(except, now)
}

// firstJudged is when a peer silent from heartbeat seq is first judged
// live: the lab's detector (Chen, no safety margin) is past its freshness
// point at seq's due time; ml's learned margin on a clean link is about
// 70 ms at the default period.
func (l *networkLossLab) firstJudged(seq uint64) time.Time {
	return l.at(seq).Add(70 * time.Millisecond)
}

// TestNetworkLossOnsetDefersTheFirstBurst: a clean minute, then loss on
// every link; link a loses every heartbeat from 601. When a is first
// judged, b and c miss their 601 and nothing is revealed lost yet, so the
// onset adds one period; a period later b's 602 has revealed its 601 lost
// and the onset defers a in full. Without the onset estimate a is
// suspected at once (the 8–11 false suspicions of each chaos loss-burst
// run, all at the first burst's onset).
func TestNetworkLossOnsetDefersTheFirstBurst(t *testing.T) {
	l := newNetworkLossLab(t, true)
	a := l.peers[0]
	dropped := map[[2]int]bool{{1, 601}: true, {2, 601}: true, {2, 602}: true, {3, 602}: true}
	lost := func(link int, seq uint64) bool { return link == 0 || dropped[[2]int{link, int(seq)}] }
	l.send(601, 601, lost)
	if now := l.firstJudged(601); !l.silentWithOnset(a, now, false) {
		t.Fatalf("without the onset estimate a is not suspected: the test no longer shows the onset's mistake")
	} else if l.silentWithOnset(a, now, true) {
		loss, revealed := l.onsetLoss(a, now)
		t.Errorf("a suspected at the burst's onset (onset loss %.3f, revealed %v)", loss, revealed)
	}
	l.send(602, 602, lost)
	now := l.firstJudged(602)
	if loss, revealed := l.onsetLoss(a, now); !revealed || loss < 0.2 {
		t.Fatalf("a period into the burst: onset loss %.3f, revealed %v", loss, revealed)
	}
	if l.silent(a, now) {
		t.Errorf("a suspected a period into the burst, with a loss revealed")
	}
	if !l.silentWithOnset(a, now, false) {
		t.Errorf("without the onset estimate a is not suspected a period into the burst")
	}
	l.c.mu.Lock()
	l.c.judge(a, now, 0, false)
	l.c.mu.Unlock()
	if s := l.c.NetworkLoss(); s.OnsetDeferred != 1 || s.Deferred != 1 {
		t.Errorf("deferred %d, by the onset alone %d; want 1 and 1", s.Deferred, s.OnsetDeferred)
	}
}

// TestNetworkLossOnsetLeavesCrashesAlone: what the onset estimate must not
// take for a burst. Each case: link a silent from heartbeat 601, and
// suspected when first judged, as without the estimate.
func TestNetworkLossOnsetLeavesCrashesAlone(t *testing.T) {
	cases := []struct {
		name string
		lost func(link int, seq uint64) bool
	}{
		{"others clean", func(link int, _ uint64) bool { return link == 0 }},
		// One other heartbeat late or lost is one link, not the network.
		{"one other heartbeat missing", func(link int, seq uint64) bool { return link == 0 || link == 1 && seq == 601 }},
		{"one other link lossy", func(link int, seq uint64) bool { return link == 0 || link == 2 && seq%2 == 0 }},
		// A minority of a partition, seen from the majority: b went silent
		// with a, c and d arrive. b is one link missing heartbeats.
		{"a minority partition", func(link int, _ uint64) bool { return link <= 1 }},
	}
	for _, tc := range cases {
		l := newNetworkLossLab(t, true)
		a := l.peers[0]
		l.send(601, 601, tc.lost)
		if now := l.firstJudged(601); !l.silent(a, now) {
			loss, revealed := l.onsetLoss(a, now)
			t.Errorf("%s: a crashed peer not suspected on time (onset loss %.3f, revealed %v)", tc.name, loss, revealed)
		}
	}
}

// TestNetworkLossOnsetCostsACutOffNodeOnePeriod: this node and d cut off
// from a, b and c. Their links stopped together and nothing is revealed
// lost, so a is suspected one period later than without the onset, not
// fdetect.LossMaxExtra periods later.
func TestNetworkLossOnsetCostsACutOffNodeOnePeriod(t *testing.T) {
	l := newNetworkLossLab(t, true)
	a := l.peers[0]
	cut := func(link int, _ uint64) bool { return link <= 2 }
	l.send(601, 601, cut)
	if !l.silentWithOnset(a, l.firstJudged(601), false) {
		t.Fatalf("without the onset estimate the cut-off a is not suspected")
	}
	if l.silent(a, l.firstJudged(601)) {
		t.Errorf("the onset did not add its period for links that stopped together")
	}
	l.send(602, 602, cut)
	if !l.silent(a, l.firstJudged(602)) {
		loss, revealed := l.onsetLoss(a, l.firstJudged(602))
		t.Errorf("a not suspected a period later (onset loss %.3f, revealed %v)", loss, revealed)
	}
}

// TestNetworkLossOnsetForgetsABurst: half a second of clean heartbeats
// after a burst, the onset estimate is 0 again.
func TestNetworkLossOnsetForgetsABurst(t *testing.T) {
	l := newNetworkLossLab(t, true)
	l.send(601, 603, burst60)
	if during, _ := l.onsetLoss(nil, l.now.Add(60*time.Millisecond)); during < 0.2 {
		t.Fatalf("onset loss %.3f in a 60 %% burst", during)
	}
	l.send(604, 608, func(int, uint64) bool { return false })
	if after, _ := l.onsetLoss(nil, l.now.Add(60*time.Millisecond)); after != 0 {
		t.Errorf("onset loss %.3f after five clean periods", after)
	}
}

// TestRecentLossWindow: the window's bookkeeping against hand-counted
// cases, reordering and a restart of the window after a long gap included.
func TestRecentLossWindow(t *testing.T) {
	l := newNetworkLossLab(t, true)
	q := &Peer{ID: "q"}
	at := l.at
	l.c.mu.Lock()
	defer l.c.mu.Unlock()
	for _, seq := range []uint64{10, 11, 13} { // 12 lost
		l.c.noteQuickLoss(q, seq, at(seq))
	}
	check := func(now time.Time, wantMissing, wantRevealed, wantArrived int) {
		t.Helper()
		m, r, a := l.c.recentLoss(q, now)
		if m != wantMissing || r != wantRevealed || a != wantArrived {
			t.Errorf("at %v: missing %d revealed %d arrived %d, want %d, %d and %d", now.Sub(l.t0), m, r, a, wantMissing, wantRevealed, wantArrived)
		}
	}
	check(at(13), 1, 1, 3)                                 // 10, 11, 13 arrived; 12 lost
	check(at(13).Add(40*time.Millisecond), 1, 1, 3)        // 14 not due beyond the slack
	check(at(14).Add(60*time.Millisecond), 2, 1, 2)        // 14 overdue: window 11..14
	l.c.noteQuickLoss(q, 12, at(13).Add(time.Millisecond)) // reordered, not lost
	check(at(13), 0, 0, 4)
	l.c.noteQuickLoss(q, 200, at(200)) // an outage: the window starts again
	check(at(200), 0, 0, 1)
	check(at(202).Add(60*time.Millisecond), 2, 0, 1)
	l.c.noteQuickLoss(q, 199, at(200)) // from before the window: not counted
	check(at(200), 0, 0, 1)
	l.c.noteQuickLoss(q, 203, at(203)) // 201, 202 lost
	check(at(203), 2, 2, 2)
}

// TestNetworkLossOnsetReadsEchoes: the other links' own heartbeats all
// arrive, but their echoes show which of ours they had received. Ours are
// sent at each period's tick (recorded as the sender does); an echo of
// 599 arriving at 601's tick means our 600, sent a period earlier, was
// lost on the way. On two links that is loss, revealed at once, and a
// silent a is deferred in full; on one link it is not enough. This node's
// own late sending is not loss: a 600 that went out late (our sender
// stalled) had no time to arrive.
func TestNetworkLossOnsetReadsEchoes(t *testing.T) {
	type link struct {
		echo uint64        // the newest of ours the link echoes
		late time.Duration // how late our 600 went out to it
	}
	for _, tc := range []struct {
		name     string
		links    [3]link // b, c and d
		deferred bool
	}{
		{"two links lose ours", [3]link{{echo: 599}, {echo: 599}, {echo: 600}}, true},
		{"one link loses ours", [3]link{{echo: 599}, {echo: 600}, {echo: 600}}, false},
		{"none lost", [3]link{{echo: 600}, {echo: 600}, {echo: 600}}, false},
		{"our own sender was late", [3]link{{echo: 599, late: 90 * time.Millisecond}, {echo: 599, late: 90 * time.Millisecond}, {echo: 600}}, false},
		{"an outage's echo", [3]link{{echo: 3}, {echo: 3}, {echo: 600}}, false},
	} {
		l := newNetworkLossLab(t, true)
		a := l.peers[0]
		l.send(601, 601, func(link int, _ uint64) bool { return link == 0 })
		l.c.mu.Lock()
		for i, lk := range tc.links {
			q := l.peers[i+1]
			for seq := uint64(586); seq <= 601; seq++ {
				sent := l.at(seq)
				if seq == 600 {
					sent = sent.Add(lk.late)
				}
				q.noteSent(seq, sent.UnixNano())
			}
			l.c.noteEcho(q, wire.Heartbeat{EchoSeq: lk.echo, EchoSendNs: 1}, l.at(601))
		}
		l.c.mu.Unlock()
		now := l.firstJudged(601)
		if got := !l.silent(a, now); got != tc.deferred {
			loss, revealed := l.onsetLoss(a, now)
			t.Errorf("%s: deferred %v, want %v (onset loss %.3f, revealed %v)", tc.name, got, tc.deferred, loss, revealed)
		}
		if tc.deferred {
			// Half a second later the echoes are out of the window.
			if loss, _ := l.onsetLoss(a, l.at(606)); loss != 0 {
				t.Errorf("%s: onset loss %.3f from echoes half a second old", tc.name, loss)
			}
		}
	}
}
