package cluster

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/edgecache/edge/proxy"
	"github.com/edgecache/edge/routing"
)

// A third review's (1). FanOutPurge takes its list of peers to send to
// when the round starts, but asks which peers are away (oweMissing) when
// the round ends, up to fanOutBound later (2.5 s by default: the round
// waits for its slowest peer). A peer suspected when the round started
// and trusted again before it ended (one heartbeat: a brief suspicion)
// is neither sent the purge nor owed it. It keeps the purged page for
// good.
func TestAPeerTrustedAgainDuringTheRoundIsOwedThePurge(t *testing.T) {
	const pt = 20 * time.Millisecond // fanOutBound 100 ms
	nodes := startRealNodes(t, []string{"A", "B", "C"}, routing.ModeHybrid, 2, pt, &slowOrigin{})
	a, b, c := nodes["A"], nodes["B"], nodes["C"]
	fillAt(t, b, "/r/taken-down")
	// C takes purges slowly (within the bound): the round lasts 60 ms.
	slow := func(r *http.Request) {
		if r.URL.Path == "/_edge/purge" {
			time.Sleep(60 * time.Millisecond)
		}
	}
	c.hold.Store(&slow)
	setTrusted(a, "B", false) // A suspects B, briefly
	done := make(chan FanOut, 1)
	go func() {
		_, fan, _ := a.c.Purge(context.Background(), proxy.PurgeRequest{URL: "http://site.example/r/taken-down"}, a.ph.Purge)
		done <- fan
	}()
	time.Sleep(20 * time.Millisecond)
	setTrusted(a, "B", true) // B's next heartbeat, while the round waits for C
	fan := <-done
	t.Logf("purge: %+v; A owes B %d", fan, a.c.owed.owedTo("B"))
	redeliverNow(t, a)
	redeliverNow(t, c)
	if storedAt(b, "/r/taken-down") {
		t.Errorf("B, suspected when the round started and trusted when it ended, was neither sent the purge nor owed it (%+v): it keeps the purged page", fan)
	}
}

// A third review's (2). owe, on a list that is one purge of everything,
// gives the purge of everything the new purge's number and returns it. A
// round that owes a trusted peer a purge it did not answer in time keeps
// that number, and the peer's late answer, taking the purge, settles it:
// it removes the purge of everything. The peer, which missed more than
// owedPerPeer purges while it was away, is owed nothing, rejoins the
// owing node's view, and keeps every page those purges named.
func TestALateAnswerDoesNotSettleAnOwedPurgeOfEverything(t *testing.T) {
	const pt = 20 * time.Millisecond // fanOutBound 100 ms, late answers up to 400 ms
	nodes := startRealNodes(t, []string{"A", "B"}, routing.ModeHybrid, 2, pt, &slowOrigin{})
	a, b := nodes["A"], nodes["B"]
	fillAt(t, b, "/gone/0")
	setTrusted(a, "B", false)
	for i := range owedPerPeer + 1 {
		if _, _, err := a.c.Purge(context.Background(), proxy.PurgeRequest{URL: fmt.Sprintf("http://site.example/gone/%d", i)}, a.ph.Purge); err != nil {
			t.Fatal(err)
		}
	}
	if got := a.c.owed.owedTo("B"); got != 1 {
		t.Fatalf("B owed %d, want 1 (everything)", got)
	}
	// B is back and trusted; before the next monitor round delivers
	// everything, a purge goes round, which B takes a little late.
	setTrusted(a, "B", true)
	var lateTaken atomic.Bool
	slow := func(r *http.Request) {
		if r.URL.Path == "/_edge/purge" && strings.Contains(r.URL.RawQuery, "fresh") {
			time.Sleep(fanOutBound(pt) + 50*time.Millisecond)
			lateTaken.Store(true)
		}
	}
	b.hold.Store(&slow)
	_, fan, _ := a.c.Purge(context.Background(), proxy.PurgeRequest{URL: "http://site.example/fresh"}, a.ph.Purge)
	if fan.Owed != 1 {
		t.Fatalf("fresh purge answered late: %+v, want owed 1", fan)
	}
	waitUntil(t, "B's late answer", lateTaken.Load)
	time.Sleep(100 * time.Millisecond) // A reads it and settles
	t.Logf("after the late answer A owes B %d", a.c.owed.owedTo("B"))
	b.hold.Store(nil)
	redeliverNow(t, a)
	if storedAt(b, "/gone/0") {
		t.Errorf("B keeps /gone/0, purged while it was away: the late answer to another purge settled the purge of everything it was owed (A owes it %d)", a.c.owed.owedTo("B"))
	}
}

// A third review's (3). The purge of everything a collapsed list is owed
// is a bookkeeping bound at the owing node ("you missed some purges"),
// but the peer it is delivered to takes it as an operator's purge and
// owes it, in turn, to every peer it thinks away (oweMissing in the
// /_edge/purge route). A node just back from a restart trusts none of its
// peers until their heartbeats come: the first redelivery it takes is
// owed to all of them, and then delivered, wiping the caches of peers
// that took every purge when it went round.
func TestAnOwedPurgeOfEverythingIsNotPassedOnToAPeerThatMissedNothing(t *testing.T) {
	nodes := startRealNodes(t, []string{"A", "B", "C"}, routing.ModeHybrid, 2, 100*time.Millisecond, &slowOrigin{})
	a, b, c := nodes["A"], nodes["B"], nodes["C"]
	fillAt(t, c, "/never-purged")
	setTrusted(a, "B", false)
	setTrusted(c, "B", false)
	for i := range owedPerPeer + 1 {
		if _, fan, err := a.c.Purge(context.Background(), proxy.PurgeRequest{URL: fmt.Sprintf("http://site.example/other/%d", i)}, a.ph.Purge); err != nil || fan.Purged != 1 {
			t.Fatalf("purge %d: %+v %v", i, fan, err)
		}
	}
	if !storedAt(c, "/never-purged") {
		t.Fatal("C lost a page no purge named")
	}
	// B restarts: it has not heard C yet. A trusts it again and delivers.
	setTrusted(b, "C", false)
	setTrusted(a, "B", true)
	redeliverNow(t, a)
	t.Logf("B owes C %d purges after it took A's purge of everything", b.c.owed.owedTo("C"))
	setTrusted(b, "C", true)
	redeliverNow(t, b)
	if !storedAt(c, "/never-purged") {
		t.Error("C took every purge when it went round, and was wiped: B passed on the purge of everything A owed it")
	}
}

// A third review's (4). A purge a peer takes but answers after the late
// bound (lateFactor × fanOutBound: 10 s at the default peer_timeout; a
// purge of everything removing every file of a large disk tier) was never
// settled: each delivery timed out, counted as failed, and was sent again
// a second later; the peer ran the purge again and again (a purge of
// everything wiped what it refilled since) and stayed out of the owing
// node's routing view for good. A peer now answers a repeat of a purge it
// took (by its id) at once.
func TestAPurgeSlowerThanTheLateBoundIsNotOwedForever(t *testing.T) {
	const pt = 20 * time.Millisecond // fanOutBound 100 ms, late bound 400 ms
	nodes := startRealNodes(t, []string{"A", "B"}, routing.ModeHybrid, 2, pt, &slowOrigin{})
	a, b := nodes["A"], nodes["B"]
	var ran atomic.Int64
	var seen sync.Map
	slow := func(r *http.Request) {
		// The purge itself is slow, the first time B takes it; B answers a
		// repeat of a purge it took (its id) at once.
		if r.URL.Path == "/_edge/purge" {
			if _, again := seen.LoadOrStore(r.URL.Query().Get("pid"), true); again {
				return
			}
			time.Sleep(lateFactor*fanOutBound(pt) + 100*time.Millisecond) // then taken
			ran.Add(1)
		}
	}
	b.hold.Store(&slow)
	_, fan, _ := a.c.Purge(context.Background(), proxy.PurgeRequest{Prefix: "/"}, a.ph.Purge)
	t.Logf("purge: %+v", fan)
	for range 3 {
		a.c.owed.mu.Lock()
		if l := a.c.owed.byPeer["B"]; l != nil {
			l.retryAt = time.Time{}
		}
		a.c.owed.mu.Unlock()
		redeliverNow(t, a)
	}
	time.Sleep(200 * time.Millisecond)
	t.Logf("B ran the purge %d times; A owes B %d", ran.Load(), a.c.owed.owedTo("B"))
	if a.c.owed.owedTo("B") > 0 || ran.Load() > 1 {
		t.Errorf("B took the purge %d times and is still owed it (%d): it stays out of A's view for good and is purged again every round", ran.Load(), a.c.owed.owedTo("B"))
	}
}

// A third review's (5). The purges a returning peer is redelivered are
// owed on by it (oweMissing in the /_edge/purge route) to every peer it
// does not trust yet, except the one that delivered it; after a restart
// it trusts none until their heartbeats come. With N nodes each owing it
// k purges, it owes (N-1)(N-2)k purges that every one of them took when
// they went round, keeps every peer out of its routing view until it has
// sent them all (its misses all go to the origin), and then sends them.
func TestARedeliveredPurgeIsNotOwedOnByThePeerItReaches(t *testing.T) {
	const k = 3
	nodes := startRealNodes(t, []string{"A", "B", "C", "D"}, routing.ModeHybrid, 2, 100*time.Millisecond, &slowOrigin{})
	a, b := nodes["A"], nodes["B"]
	for _, n := range []*realNode{a, nodes["C"], nodes["D"]} {
		setTrusted(n, "B", false)
	}
	for i := range k {
		if _, fan, err := a.c.Purge(context.Background(), proxy.PurgeRequest{URL: fmt.Sprintf("http://site.example/k/%d", i)}, a.ph.Purge); err != nil || fan.Purged != 2 {
			t.Fatalf("purge %d: %+v %v", i, fan, err)
		}
	}
	var fromB atomic.Int64
	count := func(r *http.Request) {
		if r.URL.Path == "/_edge/purge" && r.Header.Get(hdrNode) == "B" {
			fromB.Add(1)
		}
	}
	for _, id := range []string{"A", "C", "D"} {
		nodes[id].hold.Store(&count)
		t.Logf("%s owes B %d", id, nodes[id].c.owed.owedTo("B"))
	}
	// B restarted: it has heard none of its peers yet.
	for _, id := range []string{"A", "C", "D"} {
		setTrusted(b, id, false)
	}
	for _, id := range []string{"A", "C", "D"} {
		setTrusted(nodes[id], "B", true)
		redeliverNow(t, nodes[id])
	}
	owes := b.c.owed.count()
	for _, id := range []string{"A", "C", "D"} {
		setTrusted(b, id, true)
	}
	t.Logf("B owes %d purges; its view: %v", owes, rankingOf(b, "/x"))
	redeliverNow(t, b)
	t.Logf("B sent its peers %d purges they all took when they went round", fromB.Load())
	if owes != 0 || fromB.Load() != 0 {
		t.Errorf("B, redelivered %d purges by each of 3 peers, owed on %d of them and sent %d", k, owes, fromB.Load())
	}
}

// A third review's (2b), the same through the collapse itself: a peer owed
// owedPerPeer purges is owed one more by a round it answers late; that
// owe collapses the list into a purge of everything under the very number
// it returns to the round, and the late answer settles the purge of
// everything.
func TestALateAnswerDoesNotSettleTheCollapseItCaused(t *testing.T) {
	const pt = 20 * time.Millisecond
	nodes := startRealNodes(t, []string{"A", "B"}, routing.ModeHybrid, 2, pt, &slowOrigin{})
	a, b := nodes["A"], nodes["B"]
	fillAt(t, b, "/gone/0")
	setTrusted(a, "B", false)
	for i := range owedPerPeer {
		if _, _, err := a.c.Purge(context.Background(), proxy.PurgeRequest{URL: fmt.Sprintf("http://site.example/gone/%d", i)}, a.ph.Purge); err != nil {
			t.Fatal(err)
		}
	}
	setTrusted(a, "B", true)
	var lateTaken atomic.Bool
	slow := func(r *http.Request) {
		if r.URL.Path == "/_edge/purge" && strings.Contains(r.URL.RawQuery, "fresh") {
			time.Sleep(fanOutBound(pt) + 50*time.Millisecond)
			lateTaken.Store(true)
		}
	}
	b.hold.Store(&slow)
	_, fan, _ := a.c.Purge(context.Background(), proxy.PurgeRequest{URL: "http://site.example/fresh"}, a.ph.Purge)
	t.Logf("fresh purge: %+v; A owes B %d", fan, a.c.owed.owedTo("B"))
	waitUntil(t, "B's late answer", lateTaken.Load)
	time.Sleep(100 * time.Millisecond)
	b.hold.Store(nil)
	redeliverNow(t, a)
	if storedAt(b, "/gone/0") {
		t.Errorf("B keeps /gone/0: the late answer settled the purge of everything its own owe collapsed into (A owes B %d)", a.c.owed.owedTo("B"))
	}
}
