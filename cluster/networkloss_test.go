package cluster

import (
	"testing"
	"time"

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
	period time.Duration
}

func newNetworkLossLab(t *testing.T, on bool) *networkLossLab {
	const period = 100 * time.Millisecond
	c := newTestCluster(t, "hybrid", map[string]string{"n1": "127.0.0.1:1", "n2": "127.0.0.1:2"})
	c.cfg.NetworkLossMargin = on
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
		for i, p := range l.peers {
			if lost(i, seq) {
				continue
			}
			at := l.at(seq)
			l.c.mu.Lock()
			p.det.Observe(seq, at.UnixNano())
			l.c.noteQuickLoss(p, seq)
			p.lastRecv = at
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
				on, got, l.c.networkLoss(), a.det.(*fdetect.LossAware).Loss())
		}
		if on && l.c.NetworkLoss().MaxExtra == 0 {
			t.Errorf("status: no extra periods during the burst (network loss %.2f)", l.c.networkLoss())
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
	if got := l.c.networkLoss(); got > 0.01 {
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
	if got := l.c.networkLoss(); got > 0.01 {
		t.Errorf("network loss %.3f with one lossy link of four", got)
	}
	if !l.silent(a, l.at(703)) {
		t.Errorf("crashed peer on a clean link not suspected in time while another link loses")
	}
	if l.c.networkLossExtra(l.peers[1]) != 0 {
		t.Errorf("the lossy link got network periods: its own estimates are its margin")
	}
}

// TestNetworkLossForgetsABurst: about two seconds of clean heartbeats after
// a burst, the network adds nothing: a crash then is caught on time.
func TestNetworkLossForgetsABurst(t *testing.T) {
	l := newNetworkLossLab(t, true)
	l.send(601, 610, burst60)
	if l.c.networkLoss() < 0.2 {
		t.Fatalf("network loss %.3f after a second of 60 %% loss on every link", l.c.networkLoss())
	}
	l.send(611, 640, func(int, uint64) bool { return false })
	for _, p := range l.peers {
		if n := l.c.networkLossExtra(p); n != 0 {
			t.Errorf("%s: %d network periods three seconds after the burst (network loss %.4f)", p.ID, n, l.c.networkLoss())
		}
	}
}

// TestQuickLossIgnoresOutagesAndReordering: a gap longer than the margin
// can cover (a partition healing) and a reordered heartbeat are not loss.
func TestQuickLossIgnoresOutagesAndReordering(t *testing.T) {
	l := newNetworkLossLab(t, true)
	l.send(650, 660, func(int, uint64) bool { return false }) // 49 missing: an outage
	if l.c.networkLoss() != 0 {
		t.Errorf("network loss %.3f after an outage", l.c.networkLoss())
	}
	a := l.peers[0]
	l.c.mu.Lock()
	l.c.noteQuickLoss(a, 663) // 661 and 662 counted lost
	lost := a.quickLoss
	l.c.noteQuickLoss(a, 661) // reordered, not lost
	l.c.noteQuickLoss(a, 662)
	l.c.mu.Unlock()
	if a.quickLoss >= lost/2 {
		t.Errorf("quick loss %.3f after both 'lost' heartbeats came late (was %.3f)", a.quickLoss, lost)
	}
}
