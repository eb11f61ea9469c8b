package cluster

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/edgecache/edge/proxy"
	"github.com/edgecache/edge/routing"
)

// hookPurge serves n's peer listener anew with hook called inside the
// purge function (after the route's purgeIDs check, where the disk work
// is), and points every other node at it.
func hookPurge(t *testing.T, nodes map[string]*realNode, id string, hook func(proxy.PurgeRequest)) {
	t.Helper()
	n := nodes[id]
	replacePurge(t, nodes, id, func(p proxy.PurgeRequest) (int, error) {
		hook(p)
		return n.ph.Purge(p)
	})
}

// replacePurge serves node id's peer requests with purge as its purge
// function, on a new address the other nodes are told.
func replacePurge(t *testing.T, nodes map[string]*realNode, id string, purge func(proxy.PurgeRequest) (int, error)) {
	t.Helper()
	n := nodes[id]
	h := n.c.PeerHandler(n.ph.ServeInbound, purge)
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	for _, m := range nodes {
		if m == n {
			continue
		}
		m.c.mu.Lock()
		if p := m.c.peers[id]; p != nil {
			p.Addr = strings.TrimPrefix(srv.URL, "http://")
		}
		m.c.mu.Unlock()
	}
}

// A fourth review's (1). A is cut off from B (a partial partition: A
// suspects B; C, and memberlist, still reach it). A purge at A was owed to
// B by A alone: C, which took the purge and trusts B, neither sent it to
// B nor owed it (only peers C itself thought away were owed on). B missed
// the purge for as long as A stayed cut off from it, serving the purged
// page to its clients and, as its home, to C. The purge now names the
// peers its sender could not reach, and C owes it to them too.
func TestAPurgeReachesAPeerCutOffOnlyFromTheSender(t *testing.T) {
	nodes := startRealNodes(t, []string{"A", "B", "C"}, routing.ModeHybrid, 2, 100*time.Millisecond, &slowOrigin{})
	a, b, c := nodes["A"], nodes["B"], nodes["C"]
	page := pathHomedAt(t, c, "/cut/", "B", "C")
	fillAt(t, b, page)
	setTrusted(a, "B", false) // A cannot reach B; C can
	_, fan, err := a.c.Purge(context.Background(), proxy.PurgeRequest{URL: "http://site.example" + page}, a.ph.Purge)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("purge at A: %+v; A owes B %d, C owes B %d", fan, a.c.owed.owedTo("B"), c.c.owed.owedTo("B"))
	// Every node that can reach B runs its monitor rounds; A stays cut off.
	for range 3 {
		redeliverNow(t, a)
		redeliverNow(t, c)
		redeliverNow(t, b)
	}
	if storedAt(b, page) {
		t.Errorf("B, cut off from A only, still holds %s purged at A (C owes B %d)", page, c.c.owed.owedTo("B"))
	}
	w := httptest.NewRecorder()
	c.ph.ServeInbound(w, httptest.NewRequest("GET", "http://site.example"+page, nil), proxy.Inbound{})
	if cs := w.Header().Get("Cache-Status"); strings.Contains(cs, "B; hit") {
		t.Errorf("C's client after the purge got B's copy: Cache-Status %q", cs)
	}
}

// A fourth review's (2). The route recorded a purge's id (purgeIDs.first)
// before it ran the purge (now once it has run). A purge that failed at
// the peer without an answer (the purge function panics: net/http recovers
// and aborts the connection) was owed by the sender, and its redelivery,
// the same id, was answered "0" at once: taken, settled, never run.
func TestAPurgeThatFailedAtThePeerIsNotSkippedWhenRedelivered(t *testing.T) {
	nodes := startRealNodes(t, []string{"A", "B"}, routing.ModeHybrid, 2, 100*time.Millisecond, &slowOrigin{})
	a, b := nodes["A"], nodes["B"]
	fillAt(t, b, "/fail/1")
	var ran atomic.Int64
	hookPurge(t, nodes, "B", func(proxy.PurgeRequest) {
		if ran.Add(1) == 1 {
			panic("disk tier: index corrupt") // the first attempt fails
		}
	})
	_, fan, _ := a.c.Purge(context.Background(), proxy.PurgeRequest{URL: "http://site.example/fail/1"}, a.ph.Purge)
	t.Logf("purge: %+v; A owes B %d", fan, a.c.owed.owedTo("B"))
	if fan.Owed != 1 {
		t.Fatalf("a purge that failed at B without an answer: %+v, want owed 1", fan)
	}
	redeliverNow(t, a)
	t.Logf("after redelivery: B's purge function ran %d times; A owes B %d", ran.Load(), a.c.owed.owedTo("B"))
	if storedAt(b, "/fail/1") {
		t.Errorf("B still holds /fail/1: its purge failed, A owed it and redelivered it, and B answered the repeat of its id at once without purging (ran %d, A owes %d)",
			ran.Load(), a.c.owed.owedTo("B"))
	}
}

// A fourth review's (4). Every node that knew B was away owes it the
// purges it missed, and each collapsed its own list past owedPerPeer into
// a purge of everything under an id of its own: B, back, was wiped once by
// each of them (N-1 purges of everything with N nodes, each removing what
// B refilled since the last). The id is now derived from the purges it
// stands for, the same at every node.
func TestAPeerOwedEverythingByEveryNodeIsWipedOnce(t *testing.T) {
	nodes := startRealNodes(t, []string{"A", "B", "C", "D"}, routing.ModeHybrid, 2, 100*time.Millisecond, &slowOrigin{})
	a, b := nodes["A"], nodes["B"]
	var wipes atomic.Int64
	hookPurge(t, nodes, "B", func(p proxy.PurgeRequest) {
		if p == purgeEverything {
			wipes.Add(1)
		}
	})
	for _, id := range []string{"A", "C", "D"} {
		setTrusted(nodes[id], "B", false)
	}
	for i := range owedPerPeer + 1 {
		if _, _, err := a.c.Purge(context.Background(), proxy.PurgeRequest{URL: fmt.Sprintf("http://site.example/w/%d", i)}, a.ph.Purge); err != nil {
			t.Fatal(err)
		}
	}
	for _, id := range []string{"A", "C", "D"} {
		t.Logf("%s owes B %d", id, nodes[id].c.owed.owedTo("B"))
	}
	fills := 0
	for _, id := range []string{"A", "C", "D"} {
		setTrusted(nodes[id], "B", true)
		redeliverNow(t, nodes[id])
		// B serves between one node's delivery and the next's.
		p := pathHomedAt(t, b, fmt.Sprintf("/refill/%d/", fills), "B")
		fillAt(t, b, p)
		fills++
	}
	lost := 0
	for i := range fills - 1 {
		if !storedAt(b, pathHomedAt(t, b, fmt.Sprintf("/refill/%d/", i), "B")) {
			lost++
		}
	}
	t.Logf("B ran %d purges of everything; of the %d pages it refilled between them, no purge naming them, it lost %d", wipes.Load(), fills-1, lost)
	if wipes.Load() > 1 {
		t.Errorf("B, away during %d purges, was wiped %d times (once per node that owed it), losing %d pages it refilled between", owedPerPeer+1, wipes.Load(), lost)
	}
}

// A fourth review's (5). The node a purge reaches owed it on to the peers
// it thought away when its own purge had ended, not when the purge came:
// a peer it suspected when the purge came and trusted again by the time
// its purge ended (a prefix purge over a large disk tier takes seconds)
// was neither owed it by this node nor sent it by the sender, which did
// not know the peer (it started while the peer was away), and kept the
// purged page. The snapshot is now taken as the purge comes.
func TestAPeerTrustedAgainDuringTheReceiversPurgeIsOwedIt(t *testing.T) {
	nodes := startRealNodes(t, []string{"A", "C", "D"}, routing.ModeHybrid, 2, 100*time.Millisecond, &slowOrigin{})
	a, c, d := nodes["A"], nodes["C"], nodes["D"]
	fillAt(t, d, "/slow/1")
	// D is away: C knows it; A restarted since and never learnt D.
	setTrusted(c, "D", false)
	a.c.mu.Lock()
	delete(a.c.peers, "D")
	a.c.mu.Unlock()
	a.c.setView()
	var once atomic.Bool
	hookPurge(t, nodes, "C", func(proxy.PurgeRequest) {
		if once.CompareAndSwap(false, true) {
			time.Sleep(50 * time.Millisecond) // C's disk work
			setTrusted(c, "D", true)          // D's heartbeat comes meanwhile
		}
	})
	_, fan, _ := a.c.Purge(context.Background(), proxy.PurgeRequest{Prefix: "/slow/"}, a.ph.Purge)
	t.Logf("purge at A: %+v; C owes D %d", fan, c.c.owed.owedTo("D"))
	redeliverNow(t, c)
	redeliverNow(t, a)
	if storedAt(d, "/slow/1") {
		t.Errorf("D, away when the purge reached C and back before C's purge ended, keeps /slow/1: C owed it nothing (%d) and A, which never knew D, did not send it", c.c.owed.owedTo("D"))
	}
}

// ageHolds moves every hold at n back past keepEnded (the peer was away
// longer than ten minutes), as a first review's test does.
func ageHolds(n *realNode) {
	n.c.copies.mu.Lock()
	defer n.c.copies.mu.Unlock()
	for _, l := range n.c.copies.byKey {
		for _, e := range l {
			e.began = e.began.Add(-keepEnded - time.Minute)
			e.until = e.until.Add(-keepEnded - time.Minute)
		}
	}
	for _, e := range n.c.copies.scoped {
		e.began = e.began.Add(-keepEnded - time.Minute)
		e.until = e.until.Add(-keepEnded - time.Minute)
	}
	n.c.copies.prunedAt = time.Time{}
}

// A fourth review's (3). Only nodes that owe a returning peer purges keep
// it out of their routing view. A node that never knew it was away (E
// started after B left: memberlist no longer lists a dead node to a new
// member) took the purge, owes B nothing, and puts B in its view the
// moment B rejoins. Before the owing node's next monitor round delivered
// the purge, E's client asked for the page; its home, B, still held the
// purged copy, and E kept it (B was away more than keepEnded: E's hold
// was forgotten); the redelivery then purged B, not E's copy. Now a node
// keeps no page a peer made before its return, for returnSettle after it
// (returned.go).
func TestANodeThatOwesNothingDoesNotKeepAReturningPeersOldPage(t *testing.T) {
	// B's copy is old, as a page on a returning node's disk tier is: the
	// origin's answer says it is a quarter of an hour old already.
	nodes := startRealNodes(t, []string{"A", "B", "E"}, routing.ModeHybrid, 2, 100*time.Millisecond, agedOrigin{})
	a, b, e := nodes["A"], nodes["B"], nodes["E"]
	page := pathHomedAt(t, e, "/ret/", "B", "E")
	fillAt(t, b, page)
	bAddr := e.c.peers["B"].Addr
	// B is away: A knows it; E restarted since and never learnt B.
	setTrusted(a, "B", false)
	e.c.mu.Lock()
	delete(e.c.peers, "B")
	e.c.mu.Unlock()
	e.c.setView()
	_, fan, _ := a.c.Purge(context.Background(), proxy.PurgeRequest{URL: "http://site.example" + page}, a.ph.Purge)
	t.Logf("purge at A: %+v; A owes B %d, E owes B %d", fan, a.c.owed.owedTo("B"), e.c.owed.owedTo("B"))
	ageHolds(e) // B is away for more than keepEnded
	ageHolds(a)
	// B rejoins: E learns it (memberUp), A trusts it again; A's next
	// monitor round has not run yet.
	e.c.mu.Lock()
	e.c.addPeer("B", bAddr)
	e.c.peers["B"].member = true
	e.c.setTrust(e.c.peers["B"], true)
	e.c.mu.Unlock()
	e.c.setView()
	setTrusted(a, "B", true)
	// E's clients ask for the page (twice: its q-rule keeps another
	// node's page at the second request).
	w := httptest.NewRecorder()
	for range 2 {
		w = httptest.NewRecorder()
		e.ph.ServeInbound(w, httptest.NewRequest("GET", "http://site.example"+page, nil), proxy.Inbound{})
		e.ph.Wait()
		t.Logf("E's client: %d, Cache-Status %q", w.Code, w.Header().Get("Cache-Status"))
	}
	redeliverNow(t, a)
	if storedAt(b, page) {
		t.Fatal("A's owed purge did not reach B")
	}
	time.Sleep(50 * time.Millisecond)
	if storedAt(e, page) {
		t.Errorf("E holds %s, purged while B was away: E owed B nothing, put it in its view when it rejoined, and kept B's purged copy before A delivered (Cache-Status %q)",
			page, w.Header().Get("Cache-Status"))
	}
}

// agedOrigin answers every page as slowOrigin does, with Age: 900.
type agedOrigin struct{}

func (agedOrigin) Fetch(context.Context, proxy.FetchRequest) (proxy.Result, error) {
	h := http.Header{"Cache-Control": {"max-age=3600"}, "Content-Type": {"text/plain"}, "Age": {"900"}}
	return proxy.Result{Resp: &http.Response{StatusCode: 200, Header: h, Body: io.NopCloser(strings.NewReader("page")), ContentLength: 4}, Keep: true}, nil
}
