package cluster

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/edgecache/edge/cluster/wire"
	"github.com/edgecache/edge/indicators"
	"github.com/edgecache/edge/proxy"
	"github.com/edgecache/edge/routing"
)

func TestLivenessOrder(t *testing.T) {
	alive := func(inc, ver uint64) liveness { return liveness{known: true, inc: inc, ver: ver} }
	suspect := func(inc, ver uint64) liveness { return liveness{known: true, inc: inc, ver: ver, suspect: true} }
	cases := []struct {
		a, b liveness
		want bool
	}{
		{alive(1, 0), liveness{}, true},
		{liveness{}, alive(1, 0), false},
		{suspect(1, 0), alive(1, 0), true}, // a suspicion wins at the same point
		{alive(1, 0), suspect(1, 0), false},
		{alive(1, 1), suspect(1, 0), true}, // a refutation moves past it
		{suspect(1, 0), alive(1, 1), false},
		{alive(2, 0), suspect(1, 9), true}, // a restart wins over everything before
		{suspect(1, 9), alive(2, 0), false},
		{alive(1, 0), alive(1, 0), false},
	}
	for _, tc := range cases {
		if got := tc.a.after(tc.b); got != tc.want {
			t.Errorf("%+v after %+v = %v, want %v", tc.a, tc.b, got, tc.want)
		}
	}
}

// TestNeighbourGraph: every node computes the same symmetric graph with at
// most k neighbours each, and it is connected with a small diameter.
func TestNeighbourGraph(t *testing.T) {
	var members []string
	for i := range 200 {
		members = append(members, fmt.Sprintf("node-%03d", i))
	}
	const k = 8
	graph := map[string]map[string]bool{}
	for _, m := range members {
		graph[m] = neighbours(m, members, k)
		if n := len(graph[m]); n == 0 || n > k {
			t.Fatalf("%s has %d neighbours, want 1..%d", m, n, k)
		}
		if graph[m][m] {
			t.Fatalf("%s is its own neighbour", m)
		}
	}
	for a, ns := range graph {
		for b := range ns {
			if !graph[b][a] {
				t.Fatalf("%s → %s but not back", a, b)
			}
		}
	}
	// Breadth-first from the first member: everyone within a few hops.
	dist := map[string]int{members[0]: 0}
	queue := []string{members[0]}
	for len(queue) > 0 {
		a := queue[0]
		queue = queue[1:]
		for b := range graph[a] {
			if _, ok := dist[b]; !ok {
				dist[b] = dist[a] + 1
				queue = append(queue, b)
			}
		}
	}
	worst := 0
	for _, d := range dist {
		worst = max(worst, d)
	}
	t.Logf("%d members, k = %d: diameter %d", len(members), k, worst)
	if len(dist) != len(members) || worst > 5 {
		t.Fatalf("reached %d of %d members, diameter %d (want all, ≤ 5)", len(dist), len(members), worst)
	}
	if got := neighbours("alone", []string{"alone"}, k); len(got) != 0 {
		t.Fatalf("a single member has neighbours %v", got)
	}
}

// gossipNode is one in-process cluster member, its heartbeats on the
// tests' in-memory network (testNetwork).
type gossipNode struct {
	c      *Cluster
	conn   wire.PacketConn
	reg    *prometheus.Registry
	cancel context.CancelFunc
	done   chan struct{}
}

// startGossipNode starts one member; opts change its configuration
// (subset monitoring of k neighbours by default).
func startGossipNode(t *testing.T, id string, addrs map[string]string, conn wire.PacketConn, k int, opts ...func(*Config)) *gossipNode {
	t.Helper()
	reg := prometheus.NewRegistry()
	cfg := Config{
		NodeID: id, Listen: addrs[id], Peers: addrs, Secret: []byte("gossip-test-secret"), Period: 50 * time.Millisecond,
		Detector: "ml", Selection: SelectionFNA, Mode: routing.ModeHybrid, Arity: 4, Q: 2, HotThreshold: 3,
		PeerTimeout: 200 * time.Millisecond, Indicator: indicators.DefaultFilterConfig(1000),
		Monitoring: MonitorSubset, MonitorPeers: k,
	}
	for _, o := range opts {
		o(&cfg)
	}
	c, err := New(cfg, nopFetcher{}, proxy.NewStore(1<<20, 4), NewMetrics(reg), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	n := &gossipNode{c: c, conn: conn, reg: reg, cancel: cancel, done: make(chan struct{})}
	go func() { defer close(n.done); _ = c.Run(ctx, conn) }()
	return n
}

func (n *gossipNode) stop() {
	n.cancel()
	<-n.done
	_ = n.conn.Close()
}

func (n *gossipNode) trusts(id string) bool {
	n.c.mu.Lock()
	defer n.c.mu.Unlock()
	p := n.c.peers[id]
	return p != nil && p.trusted
}

func eventually(t *testing.T, within time.Duration, what string, cond func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	for time.Since(start) < within {
		if cond() {
			return time.Since(start)
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("not within %v: %s", within, what)
	return 0
}

// testNetworks carry the heartbeats of the membership and detector tests
// in memory (as memberlist's tests use its MockNetwork): no ports to race
// other processes for, no packets lost to a busy kernel, links cut
// exactly. One network per test: a test on a fake clock (synctest) must
// not reach another's connections.
var testNetworks sync.Map // test name → *wire.MemNetwork

func networkOf(t testing.TB) *wire.MemNetwork {
	n, _ := testNetworks.LoadOrStore(t.Name(), wire.NewMemNetwork())
	return n.(*wire.MemNetwork)
}

// listenUDP binds addr on the test's network ("127.0.0.1:0": a new
// address; a stopped node's address: the node restarting).
func listenUDP(t *testing.T, addr string) wire.PacketConn {
	t.Helper()
	conn, err := networkOf(t).Listen(addr)
	if err != nil {
		t.Fatal(err)
	}
	return conn
}

// TestSubsetMonitoring runs 12 nodes that each heartbeat only k = 4
// neighbours: everyone still learns everyone; a stopped node is suspected
// by all 11 others, including the 7 or more that never exchanged a
// heartbeat with it (they learn it by gossip); on its restart everyone
// trusts it again; and a false suspicion by one monitor is refuted by the
// suspected node itself and trusted again everywhere.
func TestSubsetMonitoring(t *testing.T) {
	synctest.Test(t, subsetMonitoring) // virtual time: see TestPartitionInVirtualTime
}

// startGossipNodes starts n nodes (prefix00, prefix01, …) monitoring k
// neighbours each on the test's network; the caller stops them.
func startGossipNodes(t *testing.T, prefix string, n, k int, opts ...func(*Config)) (ids []string, addrs map[string]string, nodes map[string]*gossipNode) {
	t.Helper()
	addrs = map[string]string{}
	conns := map[string]wire.PacketConn{}
	for i := range n {
		id := fmt.Sprintf("%s%02d", prefix, i)
		conn := listenUDP(t, "127.0.0.1:0")
		ids, addrs[id], conns[id] = append(ids, id), conn.LocalAddr().String(), conn
	}
	nodes = map[string]*gossipNode{}
	for _, id := range ids {
		nodes[id] = startGossipNode(t, id, addrs, conns[id], k, opts...)
	}
	return ids, addrs, nodes
}

func subsetMonitoring(t *testing.T) {
	const n, k = 12, 4
	ids, addrs, nodes := startGossipNodes(t, "g", n, k)
	defer func() {
		for _, nd := range nodes {
			nd.stop()
		}
	}()
	allTrust := func(target string, want bool) func() bool {
		return func() bool {
			for id, nd := range nodes {
				if id != target && nd.trusts(target) != want {
					return false
				}
			}
			return true
		}
	}
	eventually(t, 15*time.Second, "every node trusts every other", func() bool {
		for _, id := range ids {
			if !allTrust(id, true)() {
				return false
			}
		}
		return true
	})
	// A peer that heartbeated us within 3 periods is heartbeated back, so
	// while every node settles on the same rings (slow on a loaded
	// machine) a node may briefly have more targets than k: the bound is
	// checked once they have settled.
	eventually(t, 15*time.Second, fmt.Sprintf("every node to heartbeat at most k = %d peers", k), func() bool {
		for _, nd := range nodes {
			if len(nd.c.targets()) > k {
				return false
			}
		}
		return true
	})
	for id, nd := range nodes {
		if testutil.ToFloat64(nd.c.metrics.MonitoringSubset) != 1 {
			t.Errorf("%s: edge_cluster_monitoring_subset is not 1", id)
		}
	}

	// A crash: stop g05 and watch the others drop it.
	victim := "g05"
	nodes[victim].c.mu.Lock()
	near := map[string]bool{}
	for id, p := range nodes[victim].c.peers {
		near[id] = p.neighbour
	}
	nodes[victim].c.mu.Unlock()
	nodes[victim].stop()
	delete(nodes, victim)
	took := eventually(t, 15*time.Second, victim+" suspected by every other node", allTrust(victim, false))
	t.Logf("crash of %s suspected by all %d others in %v", victim, n-1, took.Round(time.Millisecond))
	byGossip := 0
	for id, nd := range nodes {
		nd.c.mu.Lock()
		heard := nd.c.peers[victim].neighbour
		nd.c.mu.Unlock()
		if !heard && !near[id] {
			byGossip++
		}
	}
	if byGossip == 0 {
		t.Fatal("every node was a neighbour of the victim: gossip was not exercised")
	}

	// Restart: a new incarnation on the same address.
	nodes[victim] = startGossipNode(t, victim, addrs, listenUDP(t, addrs[victim]), k)
	took = eventually(t, 15*time.Second, victim+" trusted again by every node", allTrust(victim, true))
	t.Logf("restart of %s trusted by all in %v", victim, took.Round(time.Millisecond))

	// A false suspicion: one monitor of g07 suspects it although it runs.
	target := "g07"
	var monitor *gossipNode
	for id, nd := range nodes {
		nd.c.mu.Lock()
		if p := nd.c.peers[target]; id != target && p.neighbour && monitor == nil {
			monitor = nd
			p.heard = false
			p.live.suspect = true
			nd.c.spread(target)
			nd.c.setTrust(p, false)
		}
		nd.c.mu.Unlock()
	}
	if monitor == nil {
		t.Fatal("no monitor of " + target)
	}
	eventually(t, 15*time.Second, target+" refuted the suspicion", func() bool {
		return testutil.ToFloat64(nodes[target].c.metrics.Refutations) >= 1
	})
	took = eventually(t, 15*time.Second, target+" trusted again everywhere after refuting", allTrust(target, true))
	t.Logf("false suspicion of %s refuted and trusted by all in %v", target, took.Round(time.Millisecond))
}

// TestPartitionInVirtualTime cuts one node off the in-memory network, both
// ways, while it keeps running: every other node suspects it, it suspects
// every other node, and when the links heal everyone trusts everyone again
// (its refutation outranks the suspicion). It runs on a fake clock
// (testing/synctest: time moves only when every goroutine of the test
// waits), so the detection and heal times it measures are the protocol's
// own, the same on a loaded machine as on an idle one, and the seconds it
// simulates take no wall-clock time.
func TestPartitionInVirtualTime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		network := networkOf(t)
		ids, addrs, nodes := startGossipNodes(t, "v", 6, 4)
		defer func() {
			for _, nd := range nodes {
				nd.stop()
			}
		}()
		trusted := func(want bool, pairs func(a, b string) bool) func() bool {
			return func() bool {
				for a, nd := range nodes {
					for _, b := range ids {
						if a != b && pairs(a, b) && nd.trusts(b) != want {
							return false
						}
					}
				}
				return true
			}
		}
		every := func(a, b string) bool { return true }
		joined := eventually(t, 15*time.Second, "every node trusts every other", trusted(true, every))

		island := "v03"
		across := func(a, b string) bool { return (a == island) != (b == island) }
		for _, id := range ids {
			if id != island {
				network.Cut(addrs[id], addrs[island])
				network.Cut(addrs[island], addrs[id])
			}
		}
		detected := eventually(t, 15*time.Second, "both sides of the partition suspect each other", trusted(false, across))
		for _, id := range ids {
			if id != island {
				network.Heal(addrs[id], addrs[island])
				network.Heal(addrs[island], addrs[id])
			}
		}
		healed := eventually(t, 15*time.Second, "every node trusts every other after the heal", trusted(true, every))
		t.Logf("virtual time: joined in %v, partition suspected both ways in %v, healed in %v", joined, detected, healed)
		// At a 50 ms period the learned detector suspects in a few
		// periods; the subset's gossip carries it to the rest.
		if detected > 10*time.Second || healed > 5*time.Second {
			t.Errorf("detected after %v, healed after %v of virtual time", detected, healed)
		}
	})
}
