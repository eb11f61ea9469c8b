package cluster

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/edgecache/edge/proxy"
	"github.com/edgecache/edge/routing"
)

// An eighth review's (1). The seventh review's fix keeps, in a collapsed
// purge of everything, the union of the peers its purges' rounds could not
// reach (owedPurge.away), but redeliverPurges names them only through
// owed.stillOwing(x.pid, x.away), which looks for the *everything id* in
// the named peer's list. The everything id is everythingID(first, last)
// of each list, so it matches only when A's list for B and its list for C
// began and collapsed at the same purges (as in the seventh review's
// TestACollapsedPurgeStillNamesThePeersItsSenderCouldNotReach, where both
// peers went away at the same purge). Here A is cut off from B one purge
// before it is cut off from C (an unrelated purge /first, which C takes
// and delivers to B itself). The page's purge and 256 more go through A
// while it reaches neither. A's B list begins at /first, its C list at
// the page's purge: two everything ids. The A–C link heals: A delivers
// C's purge of everything naming nobody (stillOwing finds no list holding
// C's id), so C owes B nothing and B, cut off only from A, keeps the
// purged page for as long as the cut lasts.
func TestACollapsedPurgeNamesItsAwayPeersWhenTheListsBeganAtDifferentPurges(t *testing.T) {
	nodes := startRealNodes(t, []string{"A", "B", "C"}, routing.ModeHybrid, 2, 50*time.Millisecond, &slowOrigin{})
	a, b, c := nodes["A"], nodes["B"], nodes["C"]
	page := "/cut9/page"
	fillAt(t, b, page)
	setTrusted(a, "B", false)
	_, fan, err := a.c.Purge(context.Background(), proxy.PurgeRequest{URL: "http://site.example/cut9/first"}, a.ph.Purge)
	if err != nil || fan.Owed != 1 || fan.Purged != 1 {
		t.Fatalf("first purge at A: %+v %v, want owed 1 purged 1", fan, err)
	}
	redeliverNow(t, c) // C took /first with B named: it delivers it to B
	setTrusted(a, "C", false)
	_, fan, err = a.c.Purge(context.Background(), proxy.PurgeRequest{URL: "http://site.example" + page}, a.ph.Purge)
	if err != nil || fan.Owed != 2 {
		t.Fatalf("purge at A: %+v %v, want owed 2", fan, err)
	}
	for i := range owedPerPeer {
		_, _, _ = a.c.Purge(context.Background(), proxy.PurgeRequest{URL: fmt.Sprintf("http://site.example/cut9/other/%d", i)}, a.ph.Purge)
	}
	a.c.owed.mu.Lock()
	lb, lc := a.c.owed.byPeer["B"].purges, a.c.owed.byPeer["C"].purges
	t.Logf("A's list for B: %d (everything %v, id %s, away %v); for C: %d (everything %v, id %s, away %v)",
		len(lb), lb[0].p == purgeEverything, lb[0].pid, lb[0].away, len(lc), lc[0].p == purgeEverything, lc[0].pid, lc[0].away)
	cx := lc[0]
	a.c.owed.mu.Unlock()
	t.Logf("A's delivery to C will name stillOwing(%s, %v) = %v", cx.pid, cx.away, a.c.owed.stillOwing(cx, cx.away))
	setTrusted(a, "C", true) // the A–C link heals; A–B stays cut
	redeliverNow(t, a)
	t.Logf("after A's delivery to C: A owes C %d; C owes B %d; C still holds the page: %v", a.c.owed.owedTo("C"), c.c.owed.owedTo("B"), storedAt(c, page))
	for range 3 {
		redeliverNow(t, c)
	}
	if storedAt(b, page) {
		t.Errorf("B still holds %s, purged through A while A was cut off from B and C: A's purge of everything for C carried away=[B], but stillOwing looked for C's everything id in B's list (another id: B's list began one purge earlier), so C was told of nobody and owes B %d",
			page, c.c.owed.owedTo("B"))
	}
}

// An eighth review's (2). A purge of everything answered at once because a
// wipe that ran here since covers it (wipeCovered), or because every purge
// it stands for was taken here (tookAll), returns before the handler owes
// it to the peers it names: the seventh review made a collapsed purge
// carry the peers its rounds could not reach, and these answers drop
// them. A is cut off from B, C and D while the page's purge and 256 more
// go through it (nobody takes them). C is wiped since by D (D owed C
// everything for purges of its own: a cut D–C, mended first). When the
// A–C link heals, A's purge of everything, naming B and D, is answered "0"
// by C as covered: C owes B nothing, and B, still cut off from A only,
// keeps the purged page. Without D's wipe C runs A's, owes B it and
// delivers it.
func TestACoveredPurgeOfEverythingStillOwesThePeersItNames(t *testing.T) {
	nodes := startRealNodes(t, []string{"A", "B", "C", "D"}, routing.ModeHybrid, 2, 50*time.Millisecond, &slowOrigin{})
	a, b, c, d := nodes["A"], nodes["B"], nodes["C"], nodes["D"]
	page := "/covered9/page"
	fillAt(t, b, page)
	for _, id := range []string{"B", "C", "D"} {
		setTrusted(a, id, false)
	}
	_, fan, err := a.c.Purge(context.Background(), proxy.PurgeRequest{URL: "http://site.example" + page}, a.ph.Purge)
	if err != nil || fan.Owed != 3 {
		t.Fatalf("purge at A: %+v %v, want owed 3", fan, err)
	}
	for i := range owedPerPeer {
		_, _, _ = a.c.Purge(context.Background(), proxy.PurgeRequest{URL: fmt.Sprintf("http://site.example/covered9/other/%d", i)}, a.ph.Purge)
	}
	// D's own purges while D–C was cut (other pages), owed to C and
	// collapsed later than A's by more than the clock-skew bound.
	time.Sleep(maxSkew + 300*time.Millisecond)
	setTrusted(d, "C", false)
	for i := range owedPerPeer + 1 {
		d.c.owed.owe("C", proxy.PurgeRequest{URL: fmt.Sprintf("http://site.example/covered9/d/%d", i)}, newPurgeID(), nil, d.c.metrics)
	}
	setTrusted(d, "C", true)
	redeliverNow(t, d) // C wipes
	if d.c.owed.owedTo("C") != 0 {
		t.Fatalf("D owes C %d after its delivery", d.c.owed.owedTo("C"))
	}
	a.c.owed.mu.Lock()
	lc := a.c.owed.byPeer["C"].purges[0]
	a.c.owed.mu.Unlock()
	c.c.purgeIDs.mu.Lock()
	wiped := c.c.purgeIDs.wiped
	c.c.purgeIDs.mu.Unlock()
	t.Logf("A's purge of everything for C: covers %v before C's wipe, names %v", wiped.Sub(lc.covers).Round(time.Millisecond), a.c.owed.stillOwing(lc, lc.away))
	setTrusted(a, "C", true) // the A–C link heals; A–B stays cut
	redeliverNow(t, a)
	t.Logf("after A's delivery to C: A owes C %d; C owes B %d", a.c.owed.owedTo("C"), c.c.owed.owedTo("B"))
	for range 3 {
		redeliverNow(t, c)
	}
	if storedAt(b, page) {
		t.Errorf("B still holds %s: A's purge of everything named B to C, C answered it as covered by its own later wipe without owing it to B (C owes B %d), and only A, cut off from B, owes it",
			page, c.c.owed.owedTo("B"))
	}
}

// An eighth review's (3). peerClient sends a request again on a new
// connection when a pooled one turns out closed by the peer while idle
// (errPeerClosedIdle: EOF, ECONNRESET or EPIPE before any byte of the
// answer), and a purge of everything now carries a body (the ids it
// stands for, 25 bytes each). Past what fits in the connection's 4 KiB
// write buffer with the head, net/http writes the body through
// ReadFrom and reports the broken pipe wrapped in its requestBodyReadError,
// which hides the EPIPE from errors.Is: the request is not sent again,
// the delivery fails and waits owedRetry, and each stale pooled
// connection to the peer costs one more (a peer that restarted on its
// address is exactly the one owed a purge of everything; the pool keeps
// up to peerIdleConns = 64 of them, one per purge sent at once). The same
// purge with two ids is sent again and taken.
func TestAPurgeOfEverythingWithManyIDsIsSentAgainAfterAClosedIdleConnection(t *testing.T) {
	nodes := startRealNodes(t, []string{"A", "B"}, routing.ModeHybrid, 2, 50*time.Millisecond, &slowOrigin{})
	a, b := nodes["A"], nodes["B"]
	bAddr := strings.TrimPrefix(b.srv.URL, "http://")
	for _, n := range []int{2, owedPerPeer + 1} {
		// A pooled purge connection from A to B, which B then closes
		// (a restart on the same address closes them all).
		if answer := a.c.sendPurge(context.Background(), "B", bAddr, proxy.PurgeRequest{URL: "http://site.example/stale9/warm"}, newPurgeID(), false, nil, time.Time{}, nil); answer != answerTaken {
			t.Fatal("warm-up purge not taken")
		}
		b.srv.CloseClientConnections()
		time.Sleep(50 * time.Millisecond)
		stands := make([]string, n)
		for i := range stands {
			stands[i] = newPurgeID()
		}
		answer := a.c.sendPurge(context.Background(), "B", bAddr, purgeEverything, newPurgeID(), true, nil, time.Now(), stands)
		t.Logf("a purge of everything naming %d ids (%d body bytes) on a closed idle connection: answer %d", n, len(strings.Join(stands, "\n")), answer)
		if answer != answerTaken {
			t.Errorf("a purge of everything naming %d ids was not sent again on a new connection after the pooled one was found closed: answer %d, owed %v (a delivery failed, owedRetry lost per stale connection)", n, answer, answer == answerOwed)
		}
	}
}

// What held: a purge of everything whose body names the ids it stands for
// is sent whole, and a peer that took them all answers without wiping.
func TestAPurgeOfEverythingsIDsAreReadWhole(t *testing.T) {
	nodes := startRealNodes(t, []string{"A", "B", "C"}, routing.ModeHybrid, 2, 50*time.Millisecond, &slowOrigin{})
	a, b, c := nodes["A"], nodes["B"], nodes["C"]
	kept := "/whole9/kept"
	fillAt(t, b, kept)
	setTrusted(a, "B", false)
	setTrusted(b, "A", false)
	for i := range standsMax - 1 {
		if _, fan, err := c.c.Purge(context.Background(), proxy.PurgeRequest{URL: fmt.Sprintf("http://site.example/whole9/other/%d", i)}, c.ph.Purge); err != nil || fan.Purged != 2 {
			t.Fatalf("purge %d at C: %+v %v", i, fan, err)
		}
	}
	a.c.owed.mu.Lock()
	n := len(a.c.owed.byPeer["B"].purges[0].stands)
	a.c.owed.mu.Unlock()
	setTrusted(a, "B", true)
	redeliverNow(t, a)
	t.Logf("A's purge of everything named %d ids; A owes B %d; %s stored at B: %v", n, a.c.owed.owedTo("B"), kept, storedAt(b, kept))
	if a.c.owed.owedTo("B") != 0 || !storedAt(b, kept) {
		t.Errorf("A owes B %d, %s stored: %v (B wiped)", a.c.owed.owedTo("B"), kept, storedAt(b, kept))
	}
}

// An eighth review's (4). A wipe counts for purgeIDs.wipeCheck only when it
// came as a peer request: the operator's own purge of everything at a node
// (Cluster.Purge, run locally before it fans out) is not recorded, so a
// purge of everything owed since before it wipes the node again. A was
// cut off from B while more than owedPerPeer purges went through it; the
// operator, seeing B serve stale pages, purges "/" at B more than the
// clock-skew bound later. B refills a page; when the cut heals, A's purge
// of everything (every purge it stands for older than B's wipe) wipes B a
// second time.
func TestAnOperatorsWipeCoversAnOlderOwedWipe(t *testing.T) {
	nodes := startRealNodes(t, []string{"A", "B"}, routing.ModeHybrid, 2, 50*time.Millisecond, &slowOrigin{})
	a, b := nodes["A"], nodes["B"]
	setTrusted(a, "B", false)
	setTrusted(b, "A", false)
	for i := range owedPerPeer + 1 {
		_, _, _ = a.c.Purge(context.Background(), proxy.PurgeRequest{URL: fmt.Sprintf("http://site.example/opwipe9/other/%d", i)}, a.ph.Purge)
	}
	time.Sleep(maxSkew + 300*time.Millisecond)
	if _, _, err := b.c.Purge(context.Background(), purgeEverything, b.ph.Purge); err != nil {
		t.Fatal(err)
	}
	fresh := "/opwipe9/fresh"
	fillAt(t, b, fresh) // made after every purge A owes B
	setTrusted(a, "B", true)
	redeliverNow(t, a)
	t.Logf("A owes B %d; %s (filled after B's own wipe, which came after every purge A owed) stored at B: %v", a.c.owed.owedTo("B"), fresh, storedAt(b, fresh))
	if !storedAt(b, fresh) {
		t.Errorf("B was wiped again by A's purge of everything, though the operator's own wipe at B began %v after every purge it stood for", maxSkew+300*time.Millisecond)
	}
}

// What held (run with -race): a purge folded into a purge of everything
// while that one is being delivered (its stands and away slices shared
// with the copy the delivery holds) neither races with the delivery nor
// is settled by it.
func TestAFoldDuringADeliveryOfEverythingDoesNotRace(t *testing.T) {
	nodes := startRealNodes(t, []string{"A", "B"}, routing.ModeHybrid, 2, 50*time.Millisecond, &slowOrigin{})
	a, b := nodes["A"], nodes["B"]
	for i := range owedPerPeer + 1 {
		a.c.owed.owe("B", proxy.PurgeRequest{URL: fmt.Sprintf("http://site.example/fold9/%d", i)}, newPurgeID(), []string{"X"}, a.c.metrics)
	}
	gate := make(chan struct{})
	entered := make(chan struct{}, 1)
	var mu sync.Mutex
	var received []string // the pids B was delivered, in order
	hold := func(r *http.Request) {
		if r.URL.Path == "/_edge/purge" {
			mu.Lock()
			received = append(received, r.URL.Query().Get("pid"))
			mu.Unlock()
			select {
			case entered <- struct{}{}:
			default:
			}
			<-gate
		}
	}
	b.hold.Store(&hold)
	a.c.redeliverPurges(context.Background(), time.Now())
	<-entered
	for i := range 50 {
		a.c.owed.owe("B", proxy.PurgeRequest{URL: fmt.Sprintf("http://site.example/fold9/late/%d", i)}, newPurgeID(), []string{fmt.Sprintf("Y%d", i)}, a.c.metrics)
	}
	a.c.owed.mu.Lock()
	folded := a.c.owed.byPeer["B"].purges[0].pid
	a.c.owed.mu.Unlock()
	close(gate)
	// The first delivery's end; A's own monitor rounds may deliver the
	// folded purge after it (on a loaded machine they do), which is fine:
	// what must not happen is the first delivery settling it.
	waitUntil(t, "the first delivery to end", func() bool {
		a.c.owed.mu.Lock()
		defer a.c.owed.mu.Unlock()
		l := a.c.owed.byPeer["B"]
		return l == nil || !l.delivering
	})
	b.hold.Store(nil)
	mu.Lock()
	got := append([]string(nil), received...)
	mu.Unlock()
	t.Logf("A owes B %d after the first delivery; B was delivered %d purges", a.c.owed.owedTo("B"), len(got))
	if len(got) == 0 || got[0] == folded {
		t.Fatalf("the first delivery carried %v, the folded purge is %s", got, folded)
	}
	if a.c.owed.owedTo("B") != 1 && !slices.Contains(got, folded) {
		t.Errorf("purges folded during the delivery were settled by it: A owes B %d, and B was never delivered %s", a.c.owed.owedTo("B"), folded)
	}
}
