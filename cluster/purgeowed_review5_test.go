package cluster

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/edgecache/edge/indicators"
	"github.com/edgecache/edge/proxy"
	"github.com/edgecache/edge/routing"
)

// rejoin has n learn id again at addr, as memberUp does for a peer it did
// not have in its table (returnedAt: now), and rebuilds its ring.
func rejoin(n *realNode, id, addr string) {
	n.c.mu.Lock()
	n.c.addPeer(id, addr)
	n.c.peers[id].member = true
	n.c.setTrust(n.c.peers[id], true)
	n.c.mu.Unlock()
	n.c.setView()
}

// forgetAt removes id from n's table (n started after id left: memberlist
// no longer lists a dead node to a new member).
func forgetAt(n *realNode, id string) {
	n.c.mu.Lock()
	delete(n.c.peers, id)
	n.c.mu.Unlock()
	n.c.setView()
}

// A fifth review's (1). returned.go keeps a returning peer's old pages out of
// a node only when that peer is the hop that answered (res.Addr). On a
// tree path the ingress climbs through an intermediate cache M to the
// page's home B: M, which knows B has just returned, serves B's old page
// without keeping it, and the ingress A checks only M (which never went
// away) and keeps it. B's copy was purged while it was away (C owes it
// the purge); after C's delivery B no longer holds it, but A does.
// Mended: a node checks every cache the answer's Cache-Status names.
func TestAReturnedPeersOldPageRelayedByAnIntermediateIsNotKept(t *testing.T) {
	nodes := startRealNodesHot(t, []string{"A", "B", "C", "M", "X"}, routing.ModeHybrid, 2, 100*time.Millisecond, agedOrigin{}, 1)
	a, b, c := nodes["A"], nodes["B"], nodes["C"]
	// Ranking at A [B, M, X, A, C]: A's tree path is [M, B], [X, B] or [B].
	page := pathHomedAt(t, a, "/relay/", "B", "M", "X", "A")
	fillAt(t, b, page)
	bAddr := a.c.peers["B"].Addr
	// B is away: C knows it; A, M and X started since and never learnt B.
	setTrusted(c, "B", false)
	for _, id := range []string{"A", "M", "X"} {
		forgetAt(nodes[id], "B")
	}
	_, fan, _ := c.c.Purge(context.Background(), proxy.PurgeRequest{URL: "http://site.example" + page}, c.ph.Purge)
	t.Logf("purge at C: %+v; C owes B %d, A owes B %d", fan, c.c.owed.owedTo("B"), a.c.owed.owedTo("B"))
	for _, n := range nodes {
		ageHolds(n) // B was away for more than keepEnded
	}
	// B rejoins: A, M and X learn it (returnedAt now), C trusts it again;
	// C's next monitor round has not run yet.
	for _, id := range []string{"A", "M", "X"} {
		rejoin(nodes[id], "B", bAddr)
	}
	setTrusted(c, "B", true)
	statuses := []string{}
	for range 8 {
		w := httptest.NewRecorder()
		a.ph.ServeInbound(w, httptest.NewRequest("GET", "http://site.example"+page, nil), proxy.Inbound{})
		a.ph.Wait()
		statuses = append(statuses, w.Header().Get("Cache-Status"))
	}
	redeliverNow(t, c)
	if storedAt(b, page) {
		t.Fatal("C's owed purge did not reach B")
	}
	time.Sleep(50 * time.Millisecond)
	if storedAt(a, page) {
		t.Errorf("A holds %s, purged while B was away and since purged at B: B's old copy reached A through an intermediate within returnSettle of B's return, and A checked only the intermediate (statuses %q)", page, statuses)
	}
}

// A fifth review's (2). The sender's away list names only the peers it did
// not send the purge to (suspected, gone). A peer it sent the purge to and
// that did not answer (the link to it broke, and this node has not
// suspected it yet: detection takes a few periods) is owed the purge by
// the sender alone. The other nodes took the purge, reach B, and owe it
// nothing; the sender, cut off from B for as long as the cut lasts, never
// delivers it. B keeps the purged page, and serves it as its home to C.
// (The fourth review's TestAPurgeReachesAPeerCutOffOnlyFromTheSender, with
// the cut found by the purge itself rather than by the detector first.)
// Mended: the peers a round could not reach are named to those that took it.
func TestAPurgeAPeerDidNotAnswerReachesItThroughTheOthers(t *testing.T) {
	nodes := startRealNodes(t, []string{"A", "B", "C"}, routing.ModeHybrid, 2, 100*time.Millisecond, &slowOrigin{})
	a, b, c := nodes["A"], nodes["B"], nodes["C"]
	page := pathHomedAt(t, c, "/cut2/", "B", "C")
	fillAt(t, b, page)
	// The link A→B breaks; A still trusts B (its detector has not fired).
	dead := httptest.NewServer(nil)
	deadAddr := dead.Listener.Addr().String()
	dead.Close()
	a.c.mu.Lock()
	a.c.peers["B"].Addr = deadAddr
	a.c.mu.Unlock()
	_, fan, err := a.c.Purge(context.Background(), proxy.PurgeRequest{URL: "http://site.example" + page}, a.ph.Purge)
	if err != nil {
		t.Fatal(err)
	}
	setTrusted(a, "B", false) // A's detector suspects B now; the cut stays
	t.Logf("purge at A: %+v; A owes B %d, C owes B %d", fan, a.c.owed.owedTo("B"), c.c.owed.owedTo("B"))
	for range 3 {
		redeliverNow(t, a)
		redeliverNow(t, c)
		redeliverNow(t, b)
	}
	if storedAt(b, page) {
		t.Errorf("B, whose link from A broke as A purged, still holds %s: only A owes it (%d), and C, which reaches B, owes it %d",
			page, a.c.owed.owedTo("B"), c.c.owed.owedTo("B"))
	}
}

// A fifth review's (3). The sender cuts its away list to sendersAwayMax (32)
// before any receiver filters it by its own table, and in map order: the
// departed peers still in the sender's table (left, not yet forgotten:
// forget_departed_after, ten minutes by default), which every other node
// already owes on its own or has never heard of, take the 32 places, and
// the one peer cut off from the sender alone is named to the others only
// by chance. Here A has 100 departed peers C never knew; A cannot reach B;
// C reaches B. Of five purges at A, C should owe B five.
// Mended: the list names members only, not peers that left.
func TestTheSendersAwayListNamesAPeerCutOffFromItAmongManyDeparted(t *testing.T) {
	nodes := startRealNodes(t, []string{"A", "B", "C"}, routing.ModeHybrid, 2, 100*time.Millisecond, &slowOrigin{})
	a, c := nodes["A"], nodes["C"]
	a.c.mu.Lock()
	for i := range 100 {
		id := fmt.Sprintf("departed-%03d", i)
		a.c.addPeer(id, "127.0.0.1:1")
		a.c.peers[id].leftAt = time.Now() // left, not yet forgotten
	}
	a.c.mu.Unlock()
	a.c.setView()
	setTrusted(a, "B", false) // A cannot reach B; C can
	const purges = 5
	for i := range purges {
		if _, _, err := a.c.Purge(context.Background(), proxy.PurgeRequest{URL: fmt.Sprintf("http://site.example/many/%d", i)}, a.ph.Purge); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("A owes B %d, C owes B %d", a.c.owed.owedTo("B"), c.c.owed.owedTo("B"))
	if got := c.c.owed.owedTo("B"); got != purges {
		t.Errorf("C, which reaches B, owes it %d of the %d purges A could not send it: A's away list, cut to %d among its %d departed peers, named B only by chance",
			got, purges, sendersAwayMax, 100)
	}
}

// A fifth review's (4). With subset monitoring a peer off this node's rings
// is trusted by membership and sends this node no heartbeats: its restart
// shows only as a new incarnation in its memberlist metadata (memberUp),
// which replaces its indicator replica but does not set returnedAt. A
// restart quicker than memberlist's suspicion (no memberDown, so no
// suspicion either) comes back with its disk tier, the purges it missed
// owed by their senders alone; every other node routes to it at once and
// keeps its old pages (returned.go's case, on the path it does not see).
// Mended: memberUp marks a restart seen in metadata as a return.
func TestAnUnmonitoredPeerThatRestartedIsMarkedReturned(t *testing.T) {
	c, err := New(Config{
		NodeID: "a0", Listen: "127.0.0.1:0", Secret: []byte(planSecret), Period: 100 * time.Millisecond,
		Detector: "ml", Selection: SelectionOff, Mode: routing.ModeHybrid, Placement: routing.PlacementDistinct, Arity: 2, Q: 2, HotThreshold: 1000,
		PeerTimeout: 300 * time.Millisecond, Indicator: indicators.DefaultFilterConfig(1000),
		Monitoring: MonitorSubset, MonitorPeers: 2,
	}, nopFetcher{}, proxy.NewStore(1<<20, 4), NewMetrics(prometheus.NewRegistry()), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	node := func(i int, inc uint64) *memberlist.Node {
		return &memberlist.Node{Name: fmt.Sprintf("n%02d", i), Addr: net.ParseIP("127.0.0.1"), Port: uint16(20000 + i), Meta: nodeMeta{Incarnation: inc}.encode()}
	}
	for i := range 12 {
		c.memberUp(node(i, 1), "join")
	}
	c.mu.Lock()
	c.updateMonitored(time.Now())
	far := ""
	for id, p := range c.peers {
		if !p.monitored && p.trusted {
			far = id
		}
		p.returnedAt = time.Time{} // members of long standing
	}
	c.mu.Unlock()
	if far == "" {
		t.Fatal("every peer monitored")
	}
	var i int
	fmt.Sscanf(far, "n%02d", &i)
	// far restarts (its disk tier kept its pages) and memberlist reports
	// its new metadata.
	c.memberUp(node(i, 2), "update")
	if !c.madeBeforeItReturned(far, 15*time.Minute, time.Now()) {
		c.mu.Lock()
		back := c.peers[far].returnedAt
		c.mu.Unlock()
		t.Errorf("%s, unmonitored, restarted (metadata incarnation 1 → 2): a 15-minute-old page from it is kept at once (returnedAt %v)", far, back)
	}
}

// A fifth review's (5). The fourth review's fix for a peer cut off from the
// sender alone rests on the purge's away list reaching a node that
// takes it in the round. A node that did not take it then (its request
// failed: a dropped connection, a 503) is owed it by the sender and gets
// it redelivered, marked owed=1 and with no away list: it owes it on to
// nobody. D, cut off from A only, is then owed the purge by A alone, which
// cannot reach it, and keeps the purged page.
// Mended: an owed purge keeps its round's list and names it when delivered.
func TestARedeliveredPurgeStillNamesThePeersItsSenderCouldNotReach(t *testing.T) {
	nodes := startRealNodes(t, []string{"A", "C", "D"}, routing.ModeHybrid, 2, 100*time.Millisecond, &slowOrigin{})
	a, c, d := nodes["A"], nodes["C"], nodes["D"]
	page := pathHomedAt(t, c, "/cut5/", "D", "C")
	fillAt(t, d, page)
	var calls atomic.Int64
	hookPurge(t, nodes, "C", func(proxy.PurgeRequest) {
		if calls.Add(1) == 1 {
			panic("C: the connection drops") // C does not take it in the round
		}
	})
	setTrusted(a, "D", false) // A cannot reach D; C can
	_, fan, err := a.c.Purge(context.Background(), proxy.PurgeRequest{URL: "http://site.example" + page}, a.ph.Purge)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("purge at A: %+v; A owes C %d, A owes D %d", fan, a.c.owed.owedTo("C"), a.c.owed.owedTo("D"))
	for range 3 {
		redeliverNow(t, a) // C gets it now; D stays cut off from A
		redeliverNow(t, c)
		redeliverNow(t, d)
	}
	t.Logf("C's purge ran %d times; C owes D %d", calls.Load(), c.c.owed.owedTo("D"))
	if storedAt(d, page) {
		t.Errorf("D, cut off from A only, still holds %s: C took A's purge by redelivery, which names no away peers, and owes D %d",
			page, c.c.owed.owedTo("D"))
	}
}
