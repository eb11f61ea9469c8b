package cluster

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/edgecache/edge/cluster/wire"
	"github.com/edgecache/edge/indicators"
	"github.com/edgecache/edge/proxy"
	"github.com/edgecache/edge/routing"
)

// testNetworks carry the heartbeats and the membership traffic of the
// membership and detector tests in memory (as memberlist's own tests use
// its MockNetwork): no ports to race other processes for, no packets lost
// to a busy kernel, links cut exactly. One network per test: a test on a
// fake clock (synctest) must not reach another's connections.
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

// gossipNode is one in-process cluster member on the test's network.
type gossipNode struct {
	c      *Cluster
	conn   wire.PacketConn
	addr   string
	net    *wire.MemNetwork
	reg    *prometheus.Registry
	log    *syncBuffer
	cancel context.CancelFunc
	done   chan struct{}
}

// syncBuffer is a log sink the test reads while the node writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// testProbeInterval is memberlist's probe period in these tests: its
// deaths then take a few virtual seconds.
const testProbeInterval = 200 * time.Millisecond

// startGossipNode starts one member whose seeds (and configured members)
// are addrs; opts change its configuration (subset monitoring of k
// neighbours by default).
func startGossipNode(t *testing.T, id string, addrs map[string]string, conn wire.PacketConn, k int, opts ...func(*Config)) *gossipNode {
	t.Helper()
	network := networkOf(t)
	self := conn.LocalAddr().String()
	reg := prometheus.NewRegistry()
	cfg := Config{
		NodeID: id, Listen: self, Peers: addrs, Secret: []byte("gossip-test-secret"), Period: 50 * time.Millisecond,
		Detector: "ml", Selection: SelectionFNA, Mode: routing.ModeHybrid, Arity: 4, Q: 2, HotThreshold: 3,
		PeerTimeout: 200 * time.Millisecond, Indicator: indicators.DefaultFilterConfig(1000),
		Monitoring: MonitorSubset, MonitorPeers: k, ProbeInterval: testProbeInterval, SuspicionMult: DefaultSuspicionMult,
		GossipDial: func(_ context.Context, to string) (net.Conn, error) { return network.DialStream(self, to) },
	}
	// In virtual time the runtime's real run-queue latency is not this
	// node's delay: on a busy machine it moved a crash's detection by 80 ms
	// of virtual time (TestConfirmProbeStillDetectsACrash, once in CI).
	cfg.runQueueBlind = inVirtualTime(t)
	for _, o := range opts {
		o(&cfg)
	}
	logs := &syncBuffer{}
	c, err := New(cfg, nopFetcher{}, proxy.NewStore(1<<20, 4), NewMetrics(reg), slog.New(slog.NewTextHandler(logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	network.HandleStreams(self, func(s net.Conn) {
		if other, ok := c.transport.sortStream(s); ok {
			_ = other.Close() // no peer HTTP on the in-memory network
		}
	})
	ctx, cancel := context.WithCancel(context.Background())
	n := &gossipNode{c: c, conn: conn, addr: self, net: network, reg: reg, log: logs, cancel: cancel, done: make(chan struct{})}
	go func() { defer close(n.done); _ = c.Run(ctx, conn) }()
	return n
}

// startGossipNodes starts n nodes (prefix00, prefix01, …), each seeded
// with all of them, monitoring k neighbours each; the caller stops them.
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

// stop shuts the node down as SIGTERM does: memberlist says goodbye.
func (n *gossipNode) stop() {
	n.cancel()
	<-n.done
	n.net.HandleStreams(n.addr, nil)
	_ = n.conn.Close()
	drainMembership()
}

// drainMembership waits out memberlist's goroutines after Shutdown, which
// returns while a probe in flight still waits for its timeout: a synctest
// bubble must end with no goroutine of its own left.
func drainMembership() { time.Sleep(3 * testProbeInterval) }

// stopAll stops every node of a test's map (as it is when called: a
// test that restarts a node puts the new one in the same map).
func stopAll(nodes map[string]*gossipNode) {
	for _, nd := range nodes {
		nd.stop()
	}
}

// crash stops the node without a goodbye: its socket closes first.
func (n *gossipNode) crash() {
	n.net.HandleStreams(n.addr, nil)
	_ = n.conn.Close()
	n.cancel()
	<-n.done
	drainMembership()
}

func (n *gossipNode) trusts(id string) bool { return peerTrusted(n.c, id) }

func (n *gossipNode) member(id string) bool { return peerMember(n.c, id) }

// peerTrusted: c routes to id now.
func peerTrusted(c *Cluster, id string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	p := c.peers[id]
	return p != nil && p.trusted
}

// peerMember: c has id as a member (on its ring's member list).
func peerMember(c *Cluster, id string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	p := c.peers[id]
	return p != nil && p.member
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

// describe lists every node's peers and their state, for a failure.
func describe(nodes map[string]*gossipNode) string {
	var b strings.Builder
	for id, nd := range nodes {
		fmt.Fprintf(&b, "%s:", id)
		for _, p := range nd.c.Peers() {
			fmt.Fprintf(&b, " %s(m=%v t=%v mon=%v)", p.ID, p.Member, p.Trusted, p.Monitored)
		}
		b.WriteString("\n")
	}
	return b.String()
}

// everyoneElse reports whether cond holds at every running node but id.
func everyoneElse(nodes map[string]*gossipNode, id string, cond func(*gossipNode) bool) func() bool {
	return func() bool {
		for other, nd := range nodes {
			if other != id && !cond(nd) {
				return false
			}
		}
		return true
	}
}

// TestJoinThroughOneSeedAndAgreeOnDeath: eight nodes that know only the
// first as a seed all become members of each other (memberlist's push/pull
// through the seed), with bounded heartbeats; a crashed node leaves every
// routing view that watched it within a second and the membership
// everywhere within memberlist's suspicion timeout; restarted, it is a
// member again everywhere. Virtual time: the durations are the protocol's.
func TestJoinThroughOneSeedAndAgreeOnDeath(t *testing.T) {
	virtualTime(t, func(t *testing.T) {
		const n, k = 8, 2
		start := time.Now()
		seedConn := listenUDP(t, "127.0.0.1:0")
		seed := map[string]string{"m00": seedConn.LocalAddr().String()}
		nodes := map[string]*gossipNode{"m00": startGossipNode(t, "m00", seed, seedConn, k)}
		var ids []string
		ids = append(ids, "m00")
		for i := 1; i < n; i++ {
			id := fmt.Sprintf("m%02d", i)
			ids = append(ids, id)
			nodes[id] = startGossipNode(t, id, seed, listenUDP(t, "127.0.0.1:0"), k)
		}
		defer stopAll(nodes)
		cond := func() bool {
			for _, id := range ids {
				if !everyoneElse(nodes, id, func(nd *gossipNode) bool { return nd.member(id) })() {
					return false
				}
			}
			return allTrust(nodes, ids)()
		}
		joined := eventually(t, 30*time.Second, "every node a member and trusted everywhere", func() bool {
			if time.Since(start) > 29*time.Second {
				t.Log(describe(nodes))
			}
			return cond()
		})
		// While every node settles on the same rings a node answers peers
		// whose rings still name it: the bound holds once they settled.
		eventually(t, 10*time.Second, fmt.Sprintf("every node to heartbeat at most k = %d peers", k), func() bool {
			for _, nd := range nodes {
				if len(nd.c.targets()) > k {
					return false
				}
			}
			return true
		})
		for id, nd := range nodes {
			if st := nd.c.Monitoring(); st.Members != n || !st.Membership.Running || st.Membership.Alive != n {
				t.Errorf("%s: monitoring state %+v", id, st)
			}
		}

		victim := "m05"
		var watchers []string
		for id, nd := range nodes {
			nd.c.mu.Lock()
			if p := nd.c.peers[victim]; p != nil && p.monitored && id != victim {
				watchers = append(watchers, id)
			}
			nd.c.mu.Unlock()
		}
		addr := nodes[victim].addr
		nodes[victim].crash()
		delete(nodes, victim)
		local := eventually(t, 10*time.Second, "every monitor of the victim distrusts it", func() bool {
			for _, w := range watchers {
				if nodes[w].trusts(victim) {
					return false
				}
			}
			return true
		})
		dead := eventually(t, 30*time.Second, "the victim a member nowhere", everyoneElse(nodes, victim, func(nd *gossipNode) bool { return !nd.member(victim) }))
		nodes[victim] = startGossipNode(t, victim, seed, listenUDP(t, addr), k)
		back := eventually(t, 30*time.Second, "the restarted victim a member and trusted everywhere", func() bool {
			return everyoneElse(nodes, victim, func(nd *gossipNode) bool { return nd.member(victim) && nd.trusts(victim) })()
		})
		t.Logf("virtual time: joined %v; crash: out of %d monitors' views %v, dead everywhere %v; restart back %v", joined, len(watchers), local, dead, back)
		if len(watchers) == 0 {
			t.Fatal("nobody monitored the victim")
		}
		if local > time.Second {
			t.Errorf("monitors took %v to drop the crashed node from their routing views, want ≤ 1 s", local)
		}
		if dead > 10*time.Second {
			t.Errorf("membership took %v to agree the node was dead, want ≤ 10 s", dead)
		}
	})
}

// TestLocalSuspicionStaysLocal: when one node stops hearing another (a
// one-way cut), it takes the peer out of its own routing view only: the
// peer stays a member everywhere (memberlist's indirect probes vouch for
// it) and the other nodes keep routing to it; healed, it is trusted again.
func TestLocalSuspicionStaysLocal(t *testing.T) {
	virtualTime(t, func(t *testing.T) {
		network := networkOf(t)
		ids, addrs, nodes := startGossipNodes(t, "l", 4, 2, func(c *Config) { c.Monitoring = MonitorAll })
		defer stopAll(nodes)
		eventually(t, 30*time.Second, "every node trusts every other", allTrust(nodes, ids))
		network.Cut(addrs["l01"], addrs["l00"])
		eventually(t, 5*time.Second, "l00 suspects l01", func() bool { return !nodes["l00"].trusts("l01") })
		time.Sleep(20 * time.Second) // far past memberlist's suspicion timeout
		for id, nd := range nodes {
			if id != "l01" && !nd.member("l01") {
				t.Errorf("%s dropped l01 from the membership over one node's suspicion", id)
			}
			if id != "l00" && id != "l01" && !nd.trusts("l01") {
				t.Errorf("%s distrusts l01: l00's suspicion spread", id)
			}
		}
		if nodes["l00"].trusts("l01") {
			t.Error("l00 trusts l01 although it hears nothing from it")
		}
		network.Heal(addrs["l01"], addrs["l00"])
		eventually(t, 5*time.Second, "l00 trusts l01 again", func() bool { return nodes["l00"].trusts("l01") })
		if got := testutil.ToFloat64(nodes["l02"].c.metrics.MembershipEvents.WithLabelValues("leave")); got != 0 {
			t.Errorf("l02 counted %v membership leaves", got)
		}
	})
}

// TestPartitionHeals: a node cut off both ways is declared dead on both
// sides; when the links heal, the seeds loop joins the two sides again and
// every node trusts every other.
func TestPartitionHeals(t *testing.T) {
	virtualTime(t, func(t *testing.T) {
		network := networkOf(t)
		ids, addrs, nodes := startGossipNodes(t, "v", 5, 2)
		defer stopAll(nodes)
		start := time.Now()
		joined := eventually(t, 30*time.Second, "every node trusts every other", func() bool {
			if time.Since(start) > 29*time.Second {
				t.Log(describe(nodes))
			}
			return allTrust(nodes, ids)()
		})
		island := "v03"
		for _, id := range ids {
			if id != island {
				network.Cut(addrs[id], addrs[island])
				network.Cut(addrs[island], addrs[id])
			}
		}
		split := eventually(t, 30*time.Second, "both sides drop each other from the membership", func() bool {
			for _, id := range ids {
				if id != island && (nodes[id].member(island) || nodes[island].member(id)) {
					return false
				}
			}
			return true
		})
		for _, id := range ids {
			if id != island {
				network.Heal(addrs[id], addrs[island])
				network.Heal(addrs[island], addrs[id])
			}
		}
		healed := eventually(t, 30*time.Second, "every node a member and trusted everywhere after the heal", func() bool {
			for _, id := range ids {
				if !everyoneElse(nodes, id, func(nd *gossipNode) bool { return nd.member(id) })() {
					return false
				}
			}
			return allTrust(nodes, ids)()
		})
		t.Logf("virtual time: joined %v, split %v, healed %v", joined, split, healed)
		if healed > 2*joinInterval+5*time.Second {
			t.Errorf("healed after %v", healed)
		}
	})
}

// TestWrongSecretNeverJoins: a node with another cluster.secret is never
// a member, and the refusal is logged once with the remedy and counted.
func TestWrongSecretNeverJoins(t *testing.T) {
	virtualTime(t, func(t *testing.T) {
		ids, addrs, nodes := startGossipNodes(t, "w", 2, 2, func(c *Config) { c.Monitoring = MonitorAll })
		defer stopAll(nodes)
		eventually(t, 30*time.Second, "the two trust each other", allTrust(nodes, ids))
		conn := listenUDP(t, "127.0.0.1:0")
		seeds := map[string]string{"w00": addrs["w00"]}
		intruder := startGossipNode(t, "w09", seeds, conn, 2, func(c *Config) { c.Secret = []byte("another-secret-entirely") })
		defer intruder.stop()
		time.Sleep(20 * time.Second)
		for id, nd := range nodes {
			if nd.member("w09") {
				t.Errorf("%s made the node with another secret a member", id)
			}
		}
		if intruder.c.mlReady.Load().ml.NumMembers() != 1 {
			t.Error("the node with another secret sees members")
		}
		refused := testutil.ToFloat64(nodes["w00"].c.metrics.GossipRejected.WithLabelValues("key"))
		if refused == 0 {
			t.Error("no refused membership traffic counted")
		}
		logs := nodes["w00"].log.String()
		if n := strings.Count(logs, "cannot be decrypted"); n != 1 || !strings.Contains(logs, "same cluster.secret") {
			t.Errorf("want one line with the remedy, got %d:\n%s", n, logs)
		}
	})
}

// TestKeyRotation: a new membership key installed, made primary and the
// old one removed on every node, one operation at a time across the
// cluster, keeps it joined; a node that has only the old key is refused.
func TestKeyRotation(t *testing.T) {
	virtualTime(t, func(t *testing.T) {
		ids, addrs, nodes := startGossipNodes(t, "k", 3, 2, func(c *Config) { c.Monitoring = MonitorAll })
		defer stopAll(nodes)
		eventually(t, 30*time.Second, "every node trusts every other", allTrust(nodes, ids))
		next := []byte("the-next-cluster-secret")
		for _, op := range []string{"install", "use", "remove"} {
			for _, id := range ids {
				secret := next
				if op == "remove" {
					secret = []byte("gossip-test-secret")
				}
				if err := nodes[id].c.ChangeKey(op, secret); err != nil {
					t.Fatalf("%s %s: %v", id, op, err)
				}
			}
			time.Sleep(5 * time.Second)
		}
		for _, id := range ids {
			if keys := nodes[id].c.Keys(); len(keys) != 1 || !keys[0].Primary || keys[0].Fingerprint != keyFingerprint(gossipKey(next)) {
				t.Errorf("%s keys %+v", id, keys)
			}
		}
		time.Sleep(10 * time.Second)
		for _, id := range ids {
			if !everyoneElse(nodes, id, func(nd *gossipNode) bool { return nd.member(id) })() {
				t.Errorf("%s lost its membership over the rotation", id)
			}
		}
		old := startGossipNode(t, "k09", map[string]string{"k00": addrs["k00"]}, listenUDP(t, "127.0.0.1:0"), 2)
		defer old.stop()
		time.Sleep(10 * time.Second)
		if nodes["k00"].member("k09") {
			t.Error("a node with the removed key joined")
		}
		if err := nodes["k00"].c.ChangeKey("use", []byte("never-installed-secret")); err == nil {
			t.Error("a key that is not installed was made primary")
		}
		if err := nodes["k00"].c.ChangeKey("install", []byte("short")); err == nil {
			t.Error("a short secret was installed")
		}
	})
}

// TestRegionsTravelInMetadata: with subset monitoring a node heartbeats
// a few peers, yet knows every member's region (from memberlist's
// metadata), so per-region homes work at any size.
func TestRegionsTravelInMetadata(t *testing.T) {
	virtualTime(t, func(t *testing.T) {
		regionOf := func(id string) string { return map[bool]string{true: "eu", false: "us"}[id[len(id)-1]%2 == 0] }
		conns := map[string]wire.PacketConn{}
		addrs := map[string]string{}
		var ids []string
		for i := range 8 {
			id := fmt.Sprintf("r%02d", i)
			conns[id] = listenUDP(t, "127.0.0.1:0")
			addrs[id], ids = conns[id].LocalAddr().String(), append(ids, id)
		}
		nodes := map[string]*gossipNode{}
		for _, id := range ids {
			nodes[id] = startGossipNode(t, id, addrs, conns[id], 2, func(c *Config) {
				c.Region, c.RegionalHomes, c.Placement = regionOf(id), true, routing.PlacementDistinct
			})
		}
		defer stopAll(nodes)
		eventually(t, 30*time.Second, "every node knows every other's region", func() bool {
			for _, nd := range nodes {
				nd.c.mu.Lock()
				for id, p := range nd.c.peers {
					if p.region != regionOf(id) {
						nd.c.mu.Unlock()
						return false
					}
				}
				nd.c.mu.Unlock()
			}
			return true
		})
		for id, nd := range nodes {
			if st := nd.c.Monitoring(); st.Mode != "subset" || st.Monitored >= len(ids)-1 {
				t.Errorf("%s: %+v (want subset, fewer peers heartbeated than members)", id, st)
			}
		}
	})
}

// TestMetaRoundTrip and the malformed cases: a member's metadata is
// refused with the reason, never half read.
func TestMetaRoundTrip(t *testing.T) {
	m := nodeMeta{Region: "eu-west.1", Incarnation: 42, Epoch: 7}
	got, err := decodeMeta(m.encode())
	if err != nil || got != m {
		t.Fatalf("round trip: %+v, %v", got, err)
	}
	good := m.encode()
	cases := map[string][]byte{
		"empty":               nil,
		"short":               good[:metaFixed-1],
		"not edge":            append([]byte("XX"), good[2:]...),
		"version":             append([]byte{'E', 'M', 9}, good[3:]...),
		"region long":         append(good[:3:3], append([]byte{200}, good[4:]...)...),
		"trailing byte":       append(bytes.Clone(good), 0),
		"bad region":          nodeMeta{Region: "EU West"}.encode(),
		"region led by a dot": nodeMeta{Region: ".eu"}.encode(),
	}
	for name, b := range cases {
		if _, err := decodeMeta(b); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// TestValidRegion: the one rule for region labels (configuration and
// membership metadata).
func TestValidRegion(t *testing.T) {
	for s, want := range map[string]bool{
		"eu": true, "eu-west.1": true, "9z_a": true, strings.Repeat("a", 32): true,
		"": false, strings.Repeat("a", 33): false, ".eu": false, "-eu": false, "_eu": false, "EU": false, "eu west": false, "é": false,
	} {
		if got := ValidRegion(s); got != want {
			t.Errorf("ValidRegion(%q) = %v, want %v", s, got, want)
		}
	}
}

func FuzzDecodeMeta(f *testing.F) {
	f.Add(nodeMeta{Region: "eu", Incarnation: 1, Epoch: 2}.encode())
	f.Add([]byte("EM"))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := decodeMeta(b)
		if err != nil {
			return
		}
		if again, err := decodeMeta(m.encode()); err != nil || again != m {
			t.Fatalf("accepted %x as %+v, which does not round-trip: %+v %v", b, m, again, err)
		}
	})
}

// TestMuxListenerSplitsMembershipFromHTTP: on a real TCP socket, peer HTTP
// still works through the multiplexed listener and a tagged stream goes
// to memberlist, its bytes intact.
func TestMuxListenerSplitsMembershipFromHTTP(t *testing.T) {
	c := newTestCluster(t, "hybrid", nil)
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln := c.MuxListener(raw)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "peer http") })}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()
	resp, err := http.Get("http://" + raw.Addr().String() + "/")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(body) != "peer http" {
		t.Fatalf("peer HTTP through the multiplexer: %q", body)
	}
	conn, err := c.transport.DialTimeout(raw.Addr().String(), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.Write([]byte("push-pull")); err != nil {
		t.Fatal(err)
	}
	select {
	case s := <-c.transport.StreamCh():
		buf := make([]byte, 9)
		if _, err := io.ReadFull(s, buf); err != nil || string(buf) != "push-pull" {
			t.Fatalf("stream bytes %q, %v", buf, err)
		}
		s.Close()
	case <-time.After(5 * time.Second):
		t.Fatal("the membership stream never reached memberlist")
	}
	if got := c.transport.offer([]byte("EHB..."), nil, time.Now()); got {
		t.Error("a heartbeat was claimed as membership traffic")
	}
}

// TestMuxListenerHTTPConnsWriteToTCP: an HTTP connection the multiplexer
// hands out (its first byte read back in front of its reads) names the
// *net.TCPConn its writes go to, so a writer of several buffers above it
// (node's batchConn) sends them in one writev.
func TestMuxListenerHTTPConnsWriteToTCP(t *testing.T) {
	c := newTestCluster(t, "hybrid", nil)
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln := c.MuxListener(raw)
	defer ln.Close()
	client, err := net.Dial("tcp", raw.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	if _, err := io.WriteString(client, "GET / HTTP/1.1\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	conn, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	w, ok := conn.(interface{ WriteConn() net.Conn })
	if !ok {
		t.Fatalf("the multiplexer's HTTP connection (%T) does not name the connection its writes go to", conn)
	}
	if _, ok := w.WriteConn().(*net.TCPConn); !ok {
		t.Fatalf("writes go to a %T, not the *net.TCPConn", w.WriteConn())
	}
	first := make([]byte, 3)
	if _, err := io.ReadFull(conn, first); err != nil || string(first) != "GET" {
		t.Fatalf("the request's first bytes %q, %v", first, err)
	}
}
