// Regression tests from a hostile review of subset monitoring (gossip.go):
// each failed before its fix; the comments describe the bug as found.
package cluster

import (
	"fmt"
	"log/slog"
	"net"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/edgecache/edge/cluster/wire"
	"github.com/edgecache/edge/indicators"
	"github.com/edgecache/edge/proxy"
	"github.com/edgecache/edge/routing"
)

const reviewPeriod = 100 * time.Millisecond

func newReviewCluster(t *testing.T, id string, peers map[string]string, dns string, mode Monitoring, k int) *Cluster {
	t.Helper()
	c, err := New(Config{
		NodeID: id, Listen: "127.0.9.9:7000", Peers: peers, DNS: dns, DNSPort: "7000",
		Secret: []byte("review-secret"), Period: reviewPeriod,
		Detector: "ml", Selection: SelectionFNA, Mode: routing.ModeHybrid, Arity: 4, Q: 2, HotThreshold: 3,
		PeerTimeout: 200 * time.Millisecond, Indicator: indicators.DefaultFilterConfig(1000),
		Monitoring: mode, MonitorPeers: k,
	}, nopFetcher{}, proxy.NewStore(1<<20, 4), NewMetrics(prometheus.NewRegistry()), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// hbPeer plays one remote node's heartbeats into c.received.
type hbPeer struct {
	id   string
	addr *net.UDPAddr
	inc  uint64
	seq  uint64
	ver  uint64
}

func (f *hbPeer) hb(at time.Time, rumors ...wire.Rumor) wire.Received {
	f.seq++
	return wire.Received{
		Heartbeat: wire.Heartbeat{Node: f.id, Incarnation: f.inc, Seq: f.seq, SendNs: at.UnixNano(), Ver: f.ver, Rumors: rumors},
		RecvNs:    at.UnixNano(), From: f.addr,
	}
}

func (c *Cluster) trustsPeer(id string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	p := c.peers[id]
	return p != nil && p.trusted
}

// addHBPeers adds n peers known by address only (as DNS membership finds
// them), each with a scripted heartbeat sender that identifies it.
func addHBPeers(c *Cluster, n int) []*hbPeer {
	var fakes []*hbPeer
	c.mu.Lock()
	defer c.mu.Unlock()
	for i := range n {
		addr := fmt.Sprintf("127.0.8.%d:7000", i+1)
		c.addPeer(addr, addr)
		ua, _ := net.ResolveUDPAddr("udp", addr)
		fakes = append(fakes, &hbPeer{id: fmt.Sprintf("peer-%02d", i), addr: ua, inc: 1000 + uint64(i)})
	}
	return fakes
}

// TestAutoSwitchKeepsSuspectedPeerOut: with cluster.monitoring auto
// and DNS membership, the mode switches from all to subset when the 25th
// member is identified. A peer that the all-to-all detector had suspected
// just before (a short network blip) keeps the liveness point it had,
// alive(inc, 0), not a suspicion. In subset mode trust follows only a newer
// point; nobody gossips a suspicion of it (the others trust it), so it never
// refutes, its heartbeats carry the same point, and this node never trusts
// it again although it heartbeats normally.
func TestAutoSwitchKeepsSuspectedPeerOut(t *testing.T) {
	c := newReviewCluster(t, "self", nil, "edge-review.invalid", MonitorAuto, 8)
	fakes := addHBPeers(c, AutoSubsetAbove) // 24 peers: 25 members once all are identified
	t0 := time.Now()
	at := func(i int) time.Time { return t0.Add(time.Duration(i) * reviewPeriod) }
	// 23 peers identified: 24 members, all-to-all. The victim goes quiet
	// for a moment at heartbeat 30.
	victim := fakes[0]
	for i := range 40 {
		for _, f := range fakes[:23] {
			if f == victim && i >= 30 {
				continue
			}
			c.received(f.hb(at(i)))
		}
	}
	if c.subset {
		t.Fatal("subset with 24 members")
	}
	c.check(at(40), 0) // the victim missed 10 periods: suspected
	if c.trustsPeer(victim.id) {
		t.Fatal("victim still trusted after 1 s of silence in all-to-all mode")
	}
	// The 24th peer is identified: 25 members, subset monitoring.
	c.received(fakes[23].hb(at(40)))
	if !c.subset {
		t.Fatal("not subset with 25 members")
	}
	// The switch made the all-to-all distrust a suspicion and queued it
	// for gossip, so that the victim hears of it and refutes (fixed: it
	// had kept its old alive point, which nothing could supersede).
	c.mu.Lock()
	spread := false
	for _, r := range c.pickRumors() {
		spread = spread || (r.Node == victim.id && r.Suspect)
	}
	c.mu.Unlock()
	if !spread {
		t.Fatal("the switch did not gossip the victim's suspicion")
	}
	victim.ver++ // what the real node does on hearing it
	// The victim is back: everyone heartbeats normally for 20 s, and the
	// other nodes gossip what they know of it (alive at its point).
	for i := 41; i < 241; i++ {
		for _, f := range fakes {
			c.received(f.hb(at(i), victim.rumorAlive()))
		}
		c.check(at(i), 0)
	}
	if !c.trustsPeer(victim.id) {
		c.mu.Lock()
		p := c.peers[victim.id]
		t.Errorf("live peer %s never trusted again after the all→subset switch (live %+v, neighbour %v, heard %v)", victim.id, p.live, p.neighbour, p.heard)
		c.mu.Unlock()
	}
}

func (f *hbPeer) rumorAlive() wire.Rumor {
	return wire.Rumor{Node: f.id, Incarnation: f.inc, Ver: f.ver}
}

// TestOddKBound: the docs promise "at most k neighbours". With an
// odd k the graph had ⌈k/2⌉ rings of two links each: up to k+1 (fixed:
// ⌊k/2⌋ rings, and cluster.monitor_peers must be even).
func TestOddKBound(t *testing.T) {
	var members []string
	for i := range 50 {
		members = append(members, fmt.Sprintf("node-%02d", i))
	}
	for _, k := range []int{3, 5, 7} {
		worst := 0
		for _, m := range members {
			worst = max(worst, len(neighbours(m, members, k)))
		}
		if worst > k {
			t.Errorf("k = %d: a node has %d neighbours", k, worst)
		}
	}
}

// TestAllModeRumorMetric: with all-to-all monitoring no rumor is
// sent or received, yet edge_gossip_rumors_total{kind="alive",
// direction="applied"} counts every peer's first heartbeat and restart
// (learn runs on every direct heartbeat), so the dashboard's gossip panel
// shows gossip activity in a cluster that does not gossip.
func TestAllModeRumorMetric(t *testing.T) {
	peers := map[string]string{"p1": "127.0.7.1:7000", "p2": "127.0.7.2:7000"}
	c := newReviewCluster(t, "self", peers, "", MonitorAll, 0)
	now := time.Now()
	for i, id := range []string{"p1", "p2"} {
		ua, _ := net.ResolveUDPAddr("udp", peers[id])
		f := &hbPeer{id: id, addr: ua, inc: uint64(10 + i)}
		c.received(f.hb(now))
	}
	if got := testutilCounter(c, "alive", "applied"); got != 0 {
		t.Errorf("all-to-all: %v alive rumors counted as applied", got)
	}
}

func testutilCounter(c *Cluster, kind, dir string) float64 {
	return testutil.ToFloat64(c.metrics.Rumors.WithLabelValues(kind, dir))
}

// TestRefutationVersionOverflow: a suspicion at version 2^64-1 (a
// buggy or compromised member: the wire accepts any version) made the
// refutation wrap selfVer to 0, so the node's own point was older than the
// suspicion for everyone who applied it, until it restarted. Fixed: a
// rumor at the last version is refused, by the node itself and by others.
func TestRefutationVersionOverflow(t *testing.T) {
	c := newReviewCluster(t, "self", map[string]string{"p1": "127.0.7.1:7000"}, "", MonitorSubset, 2)
	c.mu.Lock()
	defer c.mu.Unlock()
	sus := liveness{known: true, inc: c.incarnation, ver: ^uint64(0), suspect: true}
	c.learn(sus.rumor("self"))
	if own, _ := c.pointOf("self"); own.ver != 0 {
		t.Fatalf("a rumor at the last version moved our point to %+v", own)
	}
	p := c.peers["p1"]
	p.live = liveness{known: true, inc: 7}
	if c.learn(liveness{known: true, inc: 7, ver: ^uint64(0), suspect: true}.rumor("p1")); p.live.suspect {
		t.Fatalf("a rumor at the last version was applied to a peer: %+v", p.live)
	}
}
