package cluster

import (
	"context"
	"net"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/edgecache/edge/cluster/wire"
	"github.com/edgecache/edge/proxy"
	"github.com/edgecache/edge/routing"
)

// A node that starts again asks its peers for what they owe it, and they
// deliver at once, though they do not trust it yet (its heartbeats have
// not come): before, delivery waited for that trust and a monitor round,
// and the node served the purged page from its disk tier to its own
// clients meanwhile.
func TestAStartingNodeCollectsWhatItIsOwedBeforeItServes(t *testing.T) {
	nodes := startRealNodes(t, []string{"A", "B", "C"}, routing.ModeHybrid, 2, 100*time.Millisecond, &slowOrigin{})
	a, b := nodes["A"], nodes["B"]
	fillAt(t, b, "/pull/1")
	setTrusted(a, "B", false) // B is down
	if _, fan, err := a.c.Purge(context.Background(), proxy.PurgeRequest{URL: "http://site.example/pull/1"}, a.ph.Purge); err != nil || fan.Owed != 1 {
		t.Fatalf("purge with B down: %+v, %v", fan, err)
	}
	// B is back: A still suspects it; B asks before it serves.
	sum := b.c.CollectOwed(context.Background())
	// C took the purge, named B as away: it owes it too (B runs it once:
	// the second is a repeat, answered at once).
	if sum.Asked != 2 || sum.Purges != 2 || sum.Outcomes[pullDelivered] != 2 {
		t.Errorf("B's asking: %+v, want A and C each delivering the purge", sum)
	}
	if storedAt(b, "/pull/1") {
		t.Error("B still holds the page purged while it was down, after asking its peers")
	}
	if n, m := a.c.owed.owedTo("B"), nodes["C"].c.owed.owedTo("B"); n+m != 0 {
		t.Errorf("A owes B %d purges and C %d after delivering them", n, m)
	}
	if got := b.c.Pulled(); got == nil {
		t.Errorf("the status page's summary: %+v", got)
	}
}

// A peer that cannot be reached costs a start no more than the bound, and
// is counted as such; one whose delivery fails is counted failed, and
// what it owes stays owed.
func TestAStartsAskingIsBoundedAndCountsWhatFailed(t *testing.T) {
	nodes := startRealNodes(t, []string{"A", "B", "C"}, routing.ModeHybrid, 2, 20*time.Millisecond, &slowOrigin{})
	a, b, c := nodes["A"], nodes["B"], nodes["C"]
	c.srv.Close() // C is down
	setTrusted(a, "B", false)
	if _, fan, err := a.c.Purge(context.Background(), proxy.PurgeRequest{URL: "http://site.example/pull/2"}, a.ph.Purge); err != nil || fan.Owed < 1 {
		t.Fatalf("purge with B down: %+v, %v", fan, err)
	}
	hookPurge(t, nodes, "B", func(proxy.PurgeRequest) { panic(http.ErrAbortHandler) }) // B's purge fails
	start := time.Now()
	sum := b.c.CollectOwed(context.Background())
	if took := time.Since(start); took > pullBound(b.c.cfg.PeerTimeout)+time.Second {
		t.Errorf("asking took %v, bound %v", took, pullBound(b.c.cfg.PeerTimeout))
	}
	if sum.Outcomes[pullUnreachable] != 1 || sum.Outcomes[pullFailed] != 1 {
		t.Errorf("B's asking: %+v, want C unreachable and A failed", sum)
	}
	if n := a.c.owed.owedTo("B"); n != 1 {
		t.Errorf("A owes B %d purges after a failed delivery, want 1", n)
	}
}

// With cluster.dns the peers are learnt at the first join, after the start
// began: the asking waits for it (within the bound) and asks them. Before,
// a DNS-discovered cluster (the Kubernetes StatefulSet) asked nobody (a
// review's finding).
func TestADNSDiscoveredNodeAsksThePeersItLearntAtItsFirstJoin(t *testing.T) {
	nodes := startRealNodes(t, []string{"A", "B"}, routing.ModeHybrid, 2, 100*time.Millisecond, &slowOrigin{})
	a, b := nodes["A"], nodes["B"]
	fillAt(t, b, "/pull/dns")
	setTrusted(a, "B", false)
	if _, fan, err := a.c.Purge(context.Background(), proxy.PurgeRequest{URL: "http://site.example/pull/dns"}, a.ph.Purge); err != nil || fan.Owed != 1 {
		t.Fatalf("purge with B down: %+v, %v", fan, err)
	}
	b.c.cfg.DNS = "edge-peers.example" // its peers come by name
	b.c.mu.Lock()
	addrA := b.c.peers["A"].Addr
	delete(b.c.peers, "A") // not learnt yet
	b.c.mu.Unlock()
	done := make(chan PullSummary)
	go func() { done <- b.c.CollectOwed(context.Background()) }()
	time.Sleep(100 * time.Millisecond)
	select {
	case sum := <-done:
		t.Fatalf("the asking ended before the first join: %+v", sum)
	default:
	}
	b.c.mu.Lock()
	b.c.addPeer("A", addrA) // the join learns A
	b.c.mu.Unlock()
	b.c.firstJoinOnce.Do(func() { close(b.c.firstJoin) })
	sum := <-done
	if sum.Asked != 1 || sum.Outcomes[pullDelivered] != 1 {
		t.Errorf("B's asking after its first join: %+v, want A asked and delivering", sum)
	}
	if storedAt(b, "/pull/dns") {
		t.Error("B still holds the page purged while it was down")
	}
}

// A node that was stopped or cut off, not restarted, asks a peer it hears
// again after a silence (long enough to refute a suspicion) for what it
// owes, and the peer delivers at once: before, it waited to trust the node
// again and for its monitor's next round, while the node served the purged
// page to its own clients.
func TestANodeHearingAPeerAfterASilenceAsksForWhatItOwes(t *testing.T) {
	nodes := startRealNodes(t, []string{"A", "B"}, routing.ModeHybrid, 2, 100*time.Millisecond, &slowOrigin{})
	a, b := nodes["A"], nodes["B"]
	fillAt(t, b, "/silence/1")
	setTrusted(a, "B", false) // B is cut off
	if _, fan, err := a.c.Purge(context.Background(), proxy.PurgeRequest{URL: "http://site.example/silence/1"}, a.ph.Purge); err != nil || fan.Owed != 1 {
		t.Fatalf("purge with B cut off: %+v, %v", fan, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go b.c.askLoop(ctx)
	// B last heard A long ago; A's heartbeat comes again.
	b.c.mu.Lock()
	p := b.c.peers["A"]
	p.seen, p.incarnation, p.lastRecv = true, 7, time.Now().Add(-10*time.Second)
	b.c.mu.Unlock()
	now := time.Now()
	b.c.received(wire.Received{Heartbeat: wire.Heartbeat{Node: "A", Incarnation: 7, Seq: 100, SendNs: now.UnixNano()}, RecvNs: now.UnixNano()})
	// The ask has ended once B counts its outcome (A answers after it has
	// delivered and settled; B's purge runs before that, so the page's
	// going alone is no sign of the end: a loaded CI run checked A's
	// count in between).
	waitUntil(t, "B's ask to end", func() bool {
		n := 0.0
		for _, o := range []string{pullDelivered, pullNothing, pullUnreachable, pullFailed} {
			n += testutil.ToFloat64(b.c.metrics.OwedPulls.WithLabelValues(askAfterSilence, o))
		}
		return n > 0
	})
	if storedAt(b, "/silence/1") {
		t.Error("B still holds the page purged while it was cut off")
	}
	if n := a.c.owed.owedTo("B"); n != 0 {
		t.Errorf("A owes B %d purges after delivering them", n)
	}
	if got := testutil.ToFloat64(b.c.metrics.OwedPulls.WithLabelValues(askAfterSilence, pullDelivered)); got != 1 {
		t.Errorf(`edge_purge_owed_pulls_total{when="silence",outcome="delivered"} = %v, want 1`, got)
	}
}

// A peer membership brings back after an agreed death (a partition long
// enough for each side to declare the other dead) or learns by gossip
// after the start's asking is asked for what it owes: the heartbeat path
// asks only members, so after such a partition the node served what it
// was owed until the peer trusted it again and its monitor ran.
func TestAPeerBackFromAnAgreedDeathIsAskedForWhatItOwes(t *testing.T) {
	nodes := startRealNodes(t, []string{"A", "B"}, routing.ModeHybrid, 2, 100*time.Millisecond, &slowOrigin{})
	a, b := nodes["A"], nodes["B"]
	fillAt(t, b, "/joined/1")
	setTrusted(a, "B", false) // B is on the other side of the partition
	if _, fan, err := a.c.Purge(context.Background(), proxy.PurgeRequest{URL: "http://site.example/joined/1"}, a.ph.Purge); err != nil || fan.Owed != 1 {
		t.Fatalf("purge with B cut off: %+v, %v", fan, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go b.c.askLoop(ctx)
	host, port, err := net.SplitHostPort(b.c.peerAddr("A"))
	if err != nil {
		t.Fatal(err)
	}
	pn, _ := strconv.Atoi(port)
	node := &memberlist.Node{Name: "A", Addr: net.ParseIP(host), Port: uint16(pn), Meta: nodeMeta{Incarnation: 1}.encode()}
	asked := func() float64 {
		n := 0.0
		for _, o := range []string{pullDelivered, pullNothing, pullUnreachable, pullFailed} {
			n += testutil.ToFloat64(b.c.metrics.OwedPulls.WithLabelValues(askJoined, o))
		}
		return n
	}
	// While the start's own asking runs, a join is its business.
	b.c.memberDown(node)
	b.c.memberUp(node, "join")
	time.Sleep(50 * time.Millisecond)
	if n := asked(); n != 0 {
		t.Fatalf("a join before the start's asking ended was asked %v times apart from it", n)
	}
	b.c.pulled.Store(&PullSummary{})
	b.c.memberDown(node) // the partition outlasts the membership's patience
	b.c.memberUp(node, "join")
	waitUntil(t, "B's ask of the returning A to end", func() bool { return asked() > 0 })
	if storedAt(b, "/joined/1") {
		t.Error("B still holds the page purged while it was declared dead")
	}
	if n := a.c.owed.owedTo("B"); n != 0 {
		t.Errorf("A owes B %d purges after delivering them", n)
	}
	if got := testutil.ToFloat64(b.c.metrics.OwedPulls.WithLabelValues(askJoined, pullDelivered)); got != 1 {
		t.Errorf(`edge_purge_owed_pulls_total{when="joined",outcome="delivered"} = %v, want 1`, got)
	}
}

// An ask the queue has no room for is counted, not lost silently: the
// heartbeat and membership callbacks that queue asks must not wait.
func TestADroppedAskIsCounted(t *testing.T) {
	c := &Cluster{owedAsks: make(chan owedAsk, 1), metrics: NewMetrics(prometheus.NewRegistry())}
	c.wantOwedFrom("B", askJoined)
	c.wantOwedFrom("C", askJoined)
	c.wantOwedFrom("D", askAfterSilence)
	if got := testutil.ToFloat64(c.metrics.OwedPulls.WithLabelValues(askJoined, pullDropped)); got != 1 {
		t.Errorf("joined asks dropped: %v, want 1", got)
	}
	if got := testutil.ToFloat64(c.metrics.OwedPulls.WithLabelValues(askAfterSilence, pullDropped)); got != 1 {
		t.Errorf("silence asks dropped: %v, want 1", got)
	}
	if ask := <-c.owedAsks; ask.id != "B" {
		t.Errorf("the queued ask: %+v, want B's", ask)
	}
}
