// Regression tests from a hostile review of subset monitoring (gossip.go):
// each failed before its fix; the comments describe the bug as found.
package cluster

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/edgecache/edge/cluster/wire"
	"github.com/edgecache/edge/indicators"
	"github.com/edgecache/edge/proxy"
	"github.com/edgecache/edge/routing"
)

// These tests run in real time, not on synctest's fake clock as the other
// membership tests do: the cluster's DNS loop asks the system resolver,
// which is shared by the whole process.
//
// startDNSNode starts a node in DNS mode. The DNS name does not resolve
// (.invalid), so the test plays resolveLoop itself: it adds every listed
// address exactly as resolveLoop does (addPeer(addr, addr), skipping its
// own host).
func startDNSNode(t *testing.T, id, self string, addrs []string, conn wire.PacketConn, mode Monitoring, k int) *gossipNode {
	return startDNSNodePeriod(t, id, self, addrs, conn, mode, k, 50*time.Millisecond)
}

func startDNSNodePeriod(t *testing.T, id, self string, addrs []string, conn wire.PacketConn, mode Monitoring, k int, period time.Duration, autoAbove ...int) *gossipNode {
	t.Helper()
	reg := prometheus.NewRegistry()
	_, port, _ := net.SplitHostPort(self)
	cfg := Config{
		NodeID: id, Listen: self, DNS: "edge-review.invalid", DNSPort: port, DNSInterval: time.Hour,
		Secret: []byte("gossip-test-secret"), Period: period,
		Detector: "ml", Selection: SelectionFNA, Mode: routing.ModeHybrid, Arity: 4, Q: 2, HotThreshold: 3,
		PeerTimeout: 200 * time.Millisecond, Indicator: indicators.DefaultFilterConfig(1000),
		Monitoring: mode, MonitorPeers: k,
	}
	if len(autoAbove) > 0 {
		cfg.AutoSubsetAbove = autoAbove[0]
	}
	c, err := New(cfg, nopFetcher{}, proxy.NewStore(1<<20, 4), NewMetrics(reg), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	c.mu.Lock()
	for _, a := range addrs {
		if a != self {
			c.addPeer(a, a)
		}
	}
	c.mu.Unlock()
	ctx, cancel := context.WithCancel(context.Background())
	n := &gossipNode{c: c, conn: conn, reg: reg, cancel: cancel, done: make(chan struct{})}
	go func() { defer close(n.done); _ = c.Run(ctx, conn) }()
	return n
}

// scaleDownPeriod is the heartbeat period of the scale-down scenario: at
// 50 ms, a loaded machine running -race keeps the monitors in their own
// stall guard (no suspicion while this process is starved), so a dead
// node outlives any reasonable wait.
const scaleDownPeriod = 200 * time.Millisecond

func startDNSNodeIdentifiedPeriod(t *testing.T, id string, byID map[string]string, conn wire.PacketConn, mode Monitoring, k int, period time.Duration) *gossipNode {
	t.Helper()
	nd := startDNSNodePeriod(t, id, byID[id], nil, conn, mode, k, period)
	c := nd.c
	c.mu.Lock()
	for pid, a := range byID {
		if pid != id {
			c.addPeer(pid, a)
		}
	}
	c.recomputeNeighbours()
	c.mu.Unlock()
	return nd
}

// startDNSNodeIdentified starts a DNS-mode node in the state a successful
// identification leaves: every peer keyed by its node id (what
// adoptByAddress does on its first heartbeat). It makes the phases before
// the one under test independent of the identification races.
func startDNSNodeIdentified(t *testing.T, id string, byID map[string]string, conn wire.PacketConn, mode Monitoring, k int) *gossipNode {
	return startDNSNodeIdentifiedPeriod(t, id, byID, conn, mode, k, 50*time.Millisecond)
}

// dnsMembers names n nodes prefix00… on distinct loopback addresses of
// subnet (subnet.10, subnet.11, …) sharing one free port, as the pods of
// a DNS name share theirs.
func dnsMembers(t *testing.T, n int, prefix, subnet string) (ids, addrs []string, byID map[string]string) {
	t.Helper()
	c := listenUDP(t, "127.0.0.1:0")
	_, port, _ := net.SplitHostPort(c.LocalAddr().String())
	_ = c.Close()
	byID = map[string]string{}
	for i := range n {
		id := fmt.Sprintf("%s%02d", prefix, i)
		addr := net.JoinHostPort(fmt.Sprintf("%s.%d", subnet, 10+i), port)
		ids, addrs = append(ids, id), append(addrs, addr)
		byID[id] = addr
	}
	return ids, addrs, byID
}

// trustedIDs lists the node ids n trusts.
func (n *gossipNode) trustedIDs() map[string]bool {
	n.c.mu.Lock()
	defer n.c.mu.Unlock()
	out := map[string]bool{}
	for _, p := range n.c.peers {
		if p.trusted {
			out[p.ID] = true
		}
	}
	return out
}

// TestDNSSubsetRestartIdentifiesEveryone: with DNS membership and
// subset monitoring, a node that restarts knows its peers only by address
// until their heartbeats name them. But the others already know it by its
// id, and an identified non-neighbour is never sent a heartbeat (targets),
// so the restarted node only ever identifies (and trusts) its neighbours:
// its ring is itself plus k peers, permanently.
func TestDNSSubsetRestartIdentifiesEveryone(t *testing.T) {
	const n, k = 10, 2
	ids, addrs, byID := dnsMembers(t, n, "d", "127.0.0")
	conns := map[string]wire.PacketConn{}
	for _, id := range ids {
		conns[id] = listenUDP(t, byID[id])
	}
	nodes := map[string]*gossipNode{}
	for _, id := range ids {
		nodes[id] = startDNSNodeIdentified(t, id, byID, conns[id], MonitorSubset, k)
	}
	defer func() {
		for _, nd := range nodes {
			nd.stop()
		}
	}()
	allTrustAll := func() bool {
		for _, nd := range nodes {
			if len(nd.trustedIDs()) != n-1 {
				return false
			}
		}
		return true
	}
	eventually(t, 45*time.Second, "every node trusts every other (DNS, subset)", allTrustAll) // 50 ms heartbeats: a loaded machine needs longer to settle

	victim := "d03"
	nodes[victim].stop()
	time.Sleep(200 * time.Millisecond)
	nodes[victim] = startDNSNode(t, victim, byID[victim], addrs, listenUDP(t, byID[victim]), MonitorSubset, k)
	start := time.Now()
	for time.Since(start) < 10*time.Second {
		if len(nodes[victim].trustedIDs()) == n-1 {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	st := nodes[victim].c.Monitoring()
	t.Fatalf("restarted %s trusts %d of %d peers after 10 s (members it identified: %d; trusted: %v)",
		victim, len(nodes[victim].trustedIDs()), n-1, st.Members, nodes[victim].trustedIDs())
}

// TestDNSAutoGrowthPast24: nodes with DNS and monitoring auto
// (all-to-all) up to the threshold (24 in production, 6 here), then one
// more starts. DNS lists it to all but one node at once, but
// one node (lagger) re-resolves later (cluster.dns_interval is 10 s by
// default; here 3 s). The 23 switch to subset and stop heartbeating the
// lagger unless it is their neighbour; the lagger, still all-to-all,
// suspects them; when its DNS catches up it switches to subset too, and
// (the switch keeping its detector's verdicts as trust, gossip changing
// trust only on newer points) it never trusts those live peers again.
func TestDNSAutoGrowthPast24(t *testing.T) {
	if testing.Short() {
		t.Skip("7 nodes")
	}
	// The switch from all-to-all to subset at a lowered threshold (6), so
	// that it happens at 7 nodes: 25 nodes in one process under the race
	// detector starved their own detectors on a loaded machine.
	const autoAbove = 6
	const n = autoAbove + 1
	ids, addrs, byID := dnsMembers(t, n, "a", "127.0.1")
	last, lagger := ids[n-1], ids[0]
	firstN := addrs[:n-1]
	nodes := map[string]*gossipNode{}
	defer func() {
		for _, nd := range nodes {
			nd.stop()
		}
	}()
	const period = 200 * time.Millisecond
	for _, id := range ids[:n-1] {
		list := addrs
		if id == lagger {
			list = firstN // its DNS does not list the newcomer yet
		}
		nodes[id] = startDNSNodePeriod(t, id, byID[id], list, listenUDP(t, byID[id]), MonitorAuto, 4, period, autoAbove)
	}
	eventually(t, 60*time.Second, "the first nodes trust each other (all-to-all)", func() bool {
		for _, nd := range nodes {
			if len(nd.trustedIDs()) != n-2 {
				return false
			}
		}
		return true
	})
	nodes[last] = startDNSNodePeriod(t, last, byID[last], addrs, listenUDP(t, byID[last]), MonitorAuto, 4, period, autoAbove)
	time.Sleep(10 * period)
	// The lagger's DNS refresh lists the newcomer.
	lc := nodes[lagger].c
	lc.mu.Lock()
	lc.addPeer(byID[last], byID[last])
	lc.mu.Unlock()
	start := time.Now()
	for time.Since(start) < 60*time.Second {
		if len(nodes[lagger].trustedIDs()) == n-1 {
			t.Logf("the lagger trusts all %d peers %v after its DNS caught up", n-1, time.Since(start).Round(time.Millisecond))
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	st := lc.Monitoring()
	t.Fatalf("%s (mode %s, %d members) trusts %d of %d live peers 60 s after its DNS caught up", lagger, st.Mode, st.Members, len(nodes[lagger].trustedIDs()), n-1)
}

// TestDNSScaleDownHidesFailure: DNS membership only grows
// (resolveLoop adds, nothing removes), and subset monitoring counts every
// identified peer as a member "trusted or not". After a scale-down the
// departed pods keep their places on the rings for ever; a survivor whose
// neighbours all departed is heartbeated by nobody, and when it then dies
// no survivor ever suspects it.
func TestDNSScaleDownHidesFailure(t *testing.T) {
	const n, k = 8, 2
	ids, _, byID := dnsMembers(t, n, "s", "127.0.2")
	// The scale-down removes the two ring neighbours of x.
	x := ids[0]
	var departed []string
	for id := range neighbours(x, ids, k) {
		departed = append(departed, id)
	}
	nodes := map[string]*gossipNode{}
	for _, id := range ids {
		nodes[id] = startDNSNodeIdentifiedPeriod(t, id, byID, listenUDP(t, byID[id]), MonitorSubset, k, scaleDownPeriod)
	}
	defer func() {
		for _, nd := range nodes {
			nd.stop()
		}
	}()
	eventually(t, 60*time.Second, "every node trusts every other", func() bool {
		for _, nd := range nodes {
			if len(nd.trustedIDs()) != n-1 {
				return false
			}
		}
		return true
	})
	for _, id := range departed {
		nodes[id].stop()
		delete(nodes, id)
	}
	eventually(t, 60*time.Second, "the departed pods suspected by every survivor", func() bool {
		for _, nd := range nodes {
			tr := nd.trustedIDs()
			for _, d := range departed {
				if tr[d] {
					return false
				}
			}
		}
		return true
	})
	t.Logf("scaled down: %v departed; %s stays", departed, x)
	nodes[x].stop()
	delete(nodes, x)
	start := time.Now()
	for time.Since(start) < 40*time.Second {
		still := 0
		for _, nd := range nodes {
			if nd.trustedIDs()[x] {
				still++
			}
		}
		if still == 0 {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	var still []string
	for id, nd := range nodes {
		if nd.trustedIDs()[x] {
			still = append(still, id)
		}
	}
	t.Fatalf("%s is dead for 40 s and still trusted by %v", x, still)
}

// TestDNSSubsetStaggeredStart: ten pods of a DNS cluster with
// cluster.monitoring subset start 60 ms apart (one heartbeat period is
// 50 ms), each knowing every address. A node hears an earlier node's
// heartbeat before its own first send, identifies it, and sends only to
// its neighbours among those it identified; the earlier node, which knows
// the later one only by address until a heartbeat names it, never gets
// one and never trusts it.
func TestDNSSubsetStaggeredStart(t *testing.T) {
	const n, k = 10, 2
	ids, addrs, byID := dnsMembers(t, n, "t", "127.0.4")
	nodes := map[string]*gossipNode{}
	defer func() {
		for _, nd := range nodes {
			nd.stop()
		}
	}()
	for _, id := range ids {
		nodes[id] = startDNSNode(t, id, byID[id], addrs, listenUDP(t, byID[id]), MonitorSubset, k)
		time.Sleep(60 * time.Millisecond)
	}
	start := time.Now()
	for time.Since(start) < 10*time.Second {
		ok := true
		for _, nd := range nodes {
			ok = ok && len(nd.trustedIDs()) == n-1
		}
		if ok {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	for _, id := range ids {
		t.Errorf("%s trusts %d of %d (identified members %d)", id, len(nodes[id].trustedIDs()), n-1, nodes[id].c.Monitoring().Members)
	}
}
