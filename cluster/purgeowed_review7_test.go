package cluster

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/edgecache/edge/proxy"
	"github.com/edgecache/edge/routing"
)

// A sixth review's (1). B runs A's purge for longer than the round (a
// prefix over a large disk); A owes it, to be settled by the late answer.
// A's next monitor round delivers it again: B, still running the first
// run, answers the repeat "0" at once (purgeIDs.start: running), and A
// settles its entry. B's first run then fails without an answer (the
// process dies mid-purge, the handler panics): the late answer settles
// nothing, B never recorded the id, and no node owes B the purge any
// more. B keeps, and serves, the purged page for good.
func TestARepeatAnsweredWhileTheFirstRunIsGoingDoesNotSettleAPurgeThatThenFails(t *testing.T) {
	const pt = 20 * time.Millisecond // fanOutBound 100 ms, late bound 400 ms
	nodes := startRealNodes(t, []string{"A", "B", "C"}, routing.ModeHybrid, 2, pt, &slowOrigin{})
	a, b, c := nodes["A"], nodes["B"], nodes["C"]
	page := "/slowfail/page"
	fillAt(t, b, page)
	var calls atomic.Int64
	hookPurge(t, nodes, "B", func(proxy.PurgeRequest) {
		if calls.Add(1) == 1 {
			time.Sleep(300 * time.Millisecond) // longer than the round
			panic(http.ErrAbortHandler)        // the run fails, no answer
		}
	})
	_, fan, err := a.c.Purge(context.Background(), proxy.PurgeRequest{URL: "http://site.example" + page}, a.ph.Purge)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("purge at A: %+v; A owes B %d", fan, a.c.owed.owedTo("B"))
	redeliverNow(t, a) // A's monitor round, B still running the first run
	t.Logf("after A's redelivery during B's run: A owes B %d", a.c.owed.owedTo("B"))
	time.Sleep(400 * time.Millisecond) // B's run fails
	for range 3 {
		time.Sleep(owedRetry + 50*time.Millisecond)
		redeliverNow(t, a)
		redeliverNow(t, c)
	}
	t.Logf("B ran the purge function %d times; A owes B %d, C owes B %d", calls.Load(), a.c.owed.owedTo("B"), c.c.owed.owedTo("B"))
	if storedAt(b, page) {
		t.Errorf("B still holds %s after its only run of the purge failed: A's redelivery was answered \"0\" while that run was going and A settled it; nobody owes B the purge (A %d, C %d)",
			page, a.c.owed.owedTo("B"), c.c.owed.owedTo("B"))
	}
}

// A sixth review's (2). B does not answer A's purge by the round's end,
// so A owes it alone (not named to C: its late answer is to settle it).
// The late answer never comes (B crashed after the round; A's request
// times out at the late bound), and A is then cut off from B for good (a
// partial partition: C still reaches B). Nobody but A owes B the purge:
// B comes back and serves the purged page to its clients and, as its
// home, to C, for as long as the cut lasts. A peer that failed outright
// in the round is named to C; one whose late answer fails is not.
func TestAPeerWhoseLateAnswerNeverComesIsNamedToTheOthers(t *testing.T) {
	const pt = 20 * time.Millisecond // fanOutBound 100 ms, late bound 400 ms
	nodes := startRealNodes(t, []string{"A", "B", "C"}, routing.ModeHybrid, 2, pt, &slowOrigin{})
	a, b, c := nodes["A"], nodes["B"], nodes["C"]
	page := pathHomedAt(t, c, "/crash/", "B", "C")
	fillAt(t, b, page)
	var first atomic.Int64
	hang := func(r *http.Request) {
		if r.URL.Path == "/_edge/purge" && first.Add(1) == 1 {
			<-r.Context().Done()        // B hangs, then crashes: no answer ever
			panic(http.ErrAbortHandler) // and never runs it
		}
	}
	b.hold.Store(&hang)
	_, fan, err := a.c.Purge(context.Background(), proxy.PurgeRequest{URL: "http://site.example" + page}, a.ph.Purge)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(lateFactor*fanOutBound(pt) + 200*time.Millisecond) // the late bound passes
	setTrusted(a, "B", false)                                     // A is cut off from B for good
	t.Logf("purge at A: %+v; A owes B %d, C owes B %d", fan, a.c.owed.owedTo("B"), c.c.owed.owedTo("B"))
	for range 3 {
		redeliverNow(t, a)
		redeliverNow(t, c)
		redeliverNow(t, b)
	}
	if storedAt(b, page) {
		t.Errorf("B, whose late answer never came and which A is cut off from, still holds %s purged at A: C owes B %d (A alone owes it, %d)",
			page, c.c.owed.owedTo("B"), a.c.owed.owedTo("B"))
	}
}

// The same, when the peer that takes the purge takes it late too (a loaded
// CI run: C answered after the round, so no peer had taken it in the round
// and B's late failure was named to nobody). C's late answer makes it one
// that took it, named B's failure whichever comes first, once; and a
// failure within the round reaches a peer that takes it late as well.
func TestALateFailureIsNamedToAPeerThatTookItLate(t *testing.T) {
	// Wider than its neighbours' 20 ms: on two loaded cores (a CI run) C's
	// late answer, staged 50 ms after a 100 ms round, missed a 400 ms late
	// bound.
	const pt = 50 * time.Millisecond // fanOutBound 250 ms, late bound 1 s
	const hangs = -1
	for _, tc := range []struct {
		name   string
		bFails time.Duration // after B gets the purge (hangs: at the late bound)
		cTakes time.Duration // after C gets it
	}{
		{"C takes it late, then B's late answer fails", hangs, 400 * time.Millisecond},
		{"B's late answer fails, then C takes it late", 300 * time.Millisecond, 550 * time.Millisecond},
		{"B fails in the round, C takes it late", 0, 400 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			nodes := startRealNodes(t, []string{"A", "B", "C"}, routing.ModeHybrid, 2, pt, &slowOrigin{})
			a, b, c := nodes["A"], nodes["B"], nodes["C"]
			page := pathHomedAt(t, c, "/crashlate/", "B", "C")
			fillAt(t, b, page)
			var toB, toC, noticesToC atomic.Int64
			fail := func(r *http.Request) {
				if r.URL.Path == "/_edge/purge" && toB.Add(1) == 1 {
					if tc.bFails == hangs {
						<-r.Context().Done()
					} else {
						time.Sleep(tc.bFails)
					}
					panic(http.ErrAbortHandler) // no answer, and B never runs it
				}
			}
			b.hold.Store(&fail)
			late := func(r *http.Request) {
				if r.URL.Path != "/_edge/purge" {
					return
				}
				if r.URL.Query().Get("notice") == "1" {
					noticesToC.Add(1)
				} else if toC.Add(1) == 1 {
					time.Sleep(tc.cTakes) // past the round, within the late bound
				}
			}
			c.hold.Store(&late)
			_, fan, err := a.c.Purge(context.Background(), proxy.PurgeRequest{URL: "http://site.example" + page}, a.ph.Purge)
			if err != nil {
				t.Fatal(err)
			}
			if toB.Load() != 1 || toC.Load() != 1 || fan.Purged != 0 || fan.Owed != 2 {
				t.Skipf("not as staged (B and C each sent the purge once, neither took it in the round): %+v, B got %d, C got %d",
					fan, toB.Load(), toC.Load())
			}
			time.Sleep(lateFactor*fanOutBound(pt) + 200*time.Millisecond) // the late bound passes
			if n := a.c.owed.owedTo("C"); n != 0 {
				t.Skipf("not as staged: C's late answer did not come within the late bound (A owes C %d)", n)
			}
			if n := noticesToC.Load(); n != 1 {
				t.Errorf("C was named B's failure %d times, want once", n)
			}
			setTrusted(a, "B", false) // A is cut off from B for good
			for range 3 {
				redeliverNow(t, a)
				redeliverNow(t, c)
				redeliverNow(t, b)
			}
			if storedAt(b, page) {
				t.Errorf("B still holds %s: C, which took the purge late, owes B %d (A %d)", page, c.c.owed.owedTo("B"), a.c.owed.owedTo("B"))
			}
		})
	}
}

// A sixth review's (3). stillOwing counts a list collapsed into a purge of
// everything as owing every purge: A redelivers to B a purge whose round
// could not reach D, and names D, which took that purge long ago (from
// A's own delivery) and is owed everything by A only for purges since.
// B owes D a purge D took, and keeps healthy D out of its routing view
// (the harm of the fifth review's TestAStaleAwayListDoesNotOweAPeerThatTookThePurge).
const collapseN = owedPerPeer + 1

func TestACollapsedListDoesNotNameAPeerForAPurgeItTook(t *testing.T) {
	ids := []string{"A", "B", "D"}
	nodes := startRealNodes(t, ids, routing.ModeHybrid, 2, 50*time.Millisecond, &slowOrigin{})
	a, b, d := nodes["A"], nodes["B"], nodes["D"]
	// A is cut off from B and D during purge P.
	setTrusted(a, "B", false)
	setTrusted(a, "D", false)
	_, fan, _ := a.c.Purge(context.Background(), proxy.PurgeRequest{URL: "http://site.example/took"}, a.ph.Purge)
	t.Logf("purge P at A: %+v; A owes B %d, D %d", fan, a.c.owed.owedTo("B"), a.c.owed.owedTo("D"))
	// D comes back to A and takes P from A (D's own list for B, owed by
	// P's away list, is for D to deliver; B does not hear of it yet).
	setTrusted(a, "D", true)
	redeliverNow(t, a)
	if a.c.owed.owedTo("D") != 0 {
		t.Fatalf("D not delivered P: A owes it %d", a.c.owed.owedTo("D"))
	}
	d.c.owed.mu.Lock()
	delete(d.c.owed.byPeer, "B") // D's copy of P to B aside: A delivers it first
	d.c.owed.mu.Unlock()
	// D is away from A again for more than owedPerPeer purges (B is not:
	// they are owed to D only, as the rounds A could not reach D in owe).
	setTrusted(a, "D", false)
	for i := range collapseN {
		a.c.owed.owe("D", proxy.PurgeRequest{URL: fmt.Sprintf("http://site.example/later/%d", i)}, newPurgeID(), nil, a.c.metrics)
	}
	// B comes back to A: A delivers P to B.
	setTrusted(a, "B", true)
	redeliverNow(t, a)
	b.c.setView()
	t.Logf("B owes D %d; B's ranking %v", b.c.owed.owedTo("D"), rankingOf(b, "/x"))
	if b.c.owed.owedTo("D") != 0 || !slices.Contains(rankingOf(b, "/x"), "D") {
		t.Errorf("B owes D %d purges D took from A before A's list for it collapsed; D is out of B's view", b.c.owed.owedTo("D"))
	}
}

// A sixth review's (4). The purge of everything a collapsed list stands
// for is named by the order its purges were owed in (everythingID of the
// first and, once collapsed, of every later one in turn). Purges sent by
// two nodes at once (two operators, or one tool fanning out over nodes)
// reach each owing node in its own order: A owes B its own purge first,
// C its own. Each names its purge of everything differently, and B, back,
// is wiped once per owing node (the fourth review's
// TestAPeerOwedEverythingByEveryNodeIsWipedOnce, with purges sent at
// more than one node).
func TestAPeerOwedEverythingByNodesThatSawPurgesInAnotherOrderIsWipedOnce(t *testing.T) {
	nodes := startRealNodes(t, []string{"A", "B", "C"}, routing.ModeHybrid, 2, 100*time.Millisecond, &slowOrigin{})
	a, b, c := nodes["A"], nodes["B"], nodes["C"]
	var wipes atomic.Int64
	hookPurge(t, nodes, "B", func(p proxy.PurgeRequest) {
		if p == purgeEverything {
			wipes.Add(1)
		}
	})
	setTrusted(a, "B", false)
	setTrusted(c, "B", false)
	// Two purges at once, one at A and one at C: C's own is owed at C
	// before A's reaches it, A's own at A before C's reaches it.
	var delayed atomic.Int64
	slowFromA := func(r *http.Request) {
		if r.URL.Path == "/_edge/purge" && r.Header.Get(hdrNode) == "A" && delayed.Add(1) == 1 {
			time.Sleep(100 * time.Millisecond)
		}
	}
	c.hold.Store(&slowFromA)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _, _ = a.c.Purge(context.Background(), proxy.PurgeRequest{URL: "http://site.example/at-a"}, a.ph.Purge)
	}()
	time.Sleep(30 * time.Millisecond)
	_, _, _ = c.c.Purge(context.Background(), proxy.PurgeRequest{URL: "http://site.example/at-c"}, c.ph.Purge)
	<-done
	// Then more purges, at A only, one at a time: the same order everywhere.
	for i := range owedPerPeer {
		_, _, _ = a.c.Purge(context.Background(), proxy.PurgeRequest{URL: fmt.Sprintf("http://site.example/later/%d", i)}, a.ph.Purge)
	}
	pidOf := func(n *realNode) string {
		n.c.owed.mu.Lock()
		defer n.c.owed.mu.Unlock()
		if l := n.c.owed.byPeer["B"]; l != nil && len(l.purges) == 1 {
			return l.purges[0].pid
		}
		return "(not collapsed)"
	}
	aPid, cPid := pidOf(a), pidOf(c)
	t.Logf("A owes B %d (%s), C owes B %d (%s)", a.c.owed.owedTo("B"), aPid, c.c.owed.owedTo("B"), cPid)
	// B is away longer than the cluster's clock skew bound: a wipe it
	// begins when it is back is later than every purge it missed, by
	// any node's clock.
	time.Sleep(maxSkew + 100*time.Millisecond)
	setTrusted(a, "B", true)
	setTrusted(c, "B", true)
	redeliverNow(t, a)
	refill := pathHomedAt(t, b, "/refill/", "B")
	fillAt(t, b, refill) // B serves between the two deliveries
	redeliverNow(t, c)
	t.Logf("B ran %d purges of everything; refilled page still stored: %v", wipes.Load(), storedAt(b, refill))
	if wipes.Load() > 1 {
		t.Errorf("B, away during %d purges sent at A and C at once, was wiped %d times (losing %s, which it refilled between and no purge named): A and C owed the purges in different orders and named their purges of everything differently (%s, %s)",
			owedPerPeer+2, wipes.Load(), refill, aPid, cPid)
	}
}
