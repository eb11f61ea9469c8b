package cluster

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/edgecache/edge/proxy"
	"github.com/edgecache/edge/routing"
)

// A fifth review's (1). The review's TestAPeerThatTakesPurgesSlowlyIsNotWiped with a third
// node. B takes every purge but answers after fanOutBound. A's own list
// is settled by B's late answers; but after each round A sends C a notice
// naming B as missed, and C owes B every purge. C's list is settled by
// nothing but its own redelivery; past owedPerPeer it collapses into a
// purge of everything under a new id, which B has never taken: B loses
// every page it holds, pages no purge named among them.
func TestASlowPeerIsNotWipedByTheNodeItWasNamedTo(t *testing.T) {
	const pt = 20 * time.Millisecond // fanOutBound 100 ms
	nodes := startRealNodes(t, []string{"A", "B", "C"}, routing.ModeHybrid, 2, pt, &slowOrigin{})
	a, b, c := nodes["A"], nodes["B"], nodes["C"]
	fillAt(t, b, "/never-purged")
	var took, everything atomic.Int64
	var seen sync.Map
	slow := func(r *http.Request) {
		if r.URL.Path == "/_edge/purge" {
			if r.URL.Query().Get("prefix") == "/" {
				everything.Add(1)
				return
			}
			if _, again := seen.LoadOrStore(r.URL.Query().Get("pid"), true); again {
				return // a repeat: answered at once
			}
			time.Sleep(fanOutBound(pt) + 50*time.Millisecond) // answered late, then taken
			took.Add(1)
		}
	}
	b.hold.Store(&slow)
	for start := 0; start <= owedPerPeer; start += 16 {
		var wg sync.WaitGroup
		for i := start; i < min(start+16, owedPerPeer+1); i++ {
			wg.Go(func() {
				_, _, _ = a.c.Purge(context.Background(), proxy.PurgeRequest{Prefix: fmt.Sprintf("/other/%d/", i)}, a.ph.Purge)
			})
		}
		wg.Wait()
	}
	// On a loaded machine A may suspect B (a 20 ms period) and owe it
	// some purges rather than send them: deliver what is owed, as A's
	// monitor rounds would (a repeat B took is answered at once).
	var lastRound time.Time
	eventually(t, 60*time.Second, "B to take every purge", func() bool {
		if took.Load() == owedPerPeer+1 {
			return true
		}
		if time.Since(lastRound) > 200*time.Millisecond {
			lastRound = time.Now()
			a.c.redeliverPurges(context.Background(), lastRound)
		}
		return false
	})
	t.Logf("B took %d purges; A owes it %d, C owes it %d", took.Load(), a.c.owed.owedTo("B"), c.c.owed.owedTo("B"))
	redeliverNow(t, a)
	redeliverNow(t, c)
	if everything.Load() > 0 || !storedAt(b, "/never-purged") {
		t.Errorf("B took every purge (%d), yet was sent %d purges of everything (by C, which A's notices told B had missed them) and lost a page no purge named (still stored: %v)",
			took.Load(), everything.Load(), storedAt(b, "/never-purged"))
	}
}

// A fifth review's (2). A purge B runs for longer than the round (a prefix over a large
// disk) makes A name B, as missed, to every other node; each owes it and
// delivers it at its next monitor round, within a period. B records the
// purge's id only once it has run, so each delivery that comes while the
// first run is still going runs it again: with five nodes, B runs one
// purge four times at once (before the notice, only A delivered it, one
// at a time). Meanwhile B, healthy, is out of every other node's view.
func TestASlowPurgeIsNotRunAgainByEveryNodeItWasNamedTo(t *testing.T) {
	const pt = 20 * time.Millisecond // fanOutBound 100 ms
	ids := []string{"A", "B", "C", "D", "E"}
	nodes := startRealNodes(t, ids, routing.ModeHybrid, 2, pt, &slowOrigin{})
	a := nodes["A"]
	var runs, most, now atomic.Int64
	hookPurge(t, nodes, "B", func(proxy.PurgeRequest) {
		runs.Add(1)
		n := now.Add(1)
		for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
		}
		time.Sleep(600 * time.Millisecond) // a prefix purge over a large disk
		now.Add(-1)
	})
	start := time.Now()
	_, fan, err := a.c.Purge(context.Background(), proxy.PurgeRequest{Prefix: "/big/"}, a.ph.Purge)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("purge at A: %+v in %v", fan, time.Since(start))
	var outOf []string
	for _, id := range []string{"C", "D", "E"} {
		nodes[id].c.setView() // as viewLoop does on requestView
		if !slices.Contains(rankingOf(nodes[id], "/x"), "B") {
			outOf = append(outOf, id)
		}
	}
	// C, D and E's monitor rounds, within a period of the purge.
	var wg sync.WaitGroup
	for _, id := range []string{"C", "D", "E"} {
		wg.Go(func() { nodes[id].c.redeliverPurges(context.Background(), time.Now()) })
	}
	wg.Wait()
	time.Sleep(1500 * time.Millisecond)
	t.Logf("B ran the purge %d times, %d at once; B was out of the views of %v", runs.Load(), most.Load(), outOf)
	if runs.Load() > 1 {
		t.Errorf("B ran one purge %d times (%d at once): A's notice named it missed to %d nodes, each of which delivered it while B's first run was going",
			runs.Load(), most.Load(), len(ids)-2)
	}
}

// injectingOrigin answers with Cache-Status fields of its own.
type injectingOrigin struct{ status string }

func (o injectingOrigin) Fetch(context.Context, proxy.FetchRequest) (proxy.Result, error) {
	h := http.Header{"Cache-Control": {"max-age=3600"}, "Content-Type": {"text/plain"}, "Age": {"900"}, "Cache-Status": {o.status}}
	return proxy.Result{Resp: &http.Response{StatusCode: 200, Header: h, Body: io.NopCloser(strings.NewReader("page")), ContentLength: 4}, Keep: true}, nil
}

// A fifth review's (3), what held. An origin's own Cache-Status, naming a
// peer that has just returned and detail=purged, does not stop a node
// keeping the page it got through its home.
func TestAnOriginsCacheStatusDoesNotStopKeeping(t *testing.T) {
	nodes := startRealNodes(t, []string{"A", "B", "C"}, routing.ModeHybrid, 2, 100*time.Millisecond,
		injectingOrigin{status: `C; hit, X; fwd=miss; detail=purged, "B"; hit`})
	a := nodes["A"]
	page := pathHomedAt(t, a, "/inj/", "B", "A")
	a.c.mu.Lock()
	a.c.peers["C"].returnedAt = time.Now()
	a.c.mu.Unlock()
	var st []string
	for range 3 {
		w := httptest.NewRecorder()
		a.ph.ServeInbound(w, httptest.NewRequest("GET", "http://site.example"+page, nil), proxy.Inbound{})
		a.ph.Wait()
		st = append(st, w.Header().Get("Cache-Status"))
	}
	time.Sleep(50 * time.Millisecond)
	if !storedAt(a, page) {
		t.Errorf("A does not keep %s: %q", page, st)
	}
	t.Logf("statuses %q", st)
}

// A fifth review's (4). A node that already owes a peer a purge (it suspects the peer
// itself) is named the peer again by the sender's notice (the peer's
// request failed at the sender, which still trusted it) and owes the same
// purge (same id) twice: its list fills twice as fast, and a peer away for
// half of owedPerPeer purges is owed, by that node, a purge of everything
// and loses pages no purge named.
func TestANoticeDoesNotOweAPurgeTwice(t *testing.T) {
	nodes := startRealNodes(t, []string{"A", "B", "C"}, routing.ModeHybrid, 2, 100*time.Millisecond, &slowOrigin{})
	a, b, c := nodes["A"], nodes["B"], nodes["C"]
	fillAt(t, b, "/never-purged")
	bAddr := a.c.peers["B"].Addr
	// B's listener is down: C's detector has fired, A's not yet.
	dead := httptest.NewServer(nil)
	deadAddr := dead.Listener.Addr().String()
	dead.Close()
	a.c.mu.Lock()
	a.c.peers["B"].Addr = deadAddr
	a.c.mu.Unlock()
	setTrusted(c, "B", false)
	const purges = owedPerPeer/2 + 1
	for i := range purges {
		if _, _, err := a.c.Purge(context.Background(), proxy.PurgeRequest{URL: fmt.Sprintf("http://site.example/half/%d", i)}, a.ph.Purge); err != nil {
			t.Fatal(err)
		}
	}
	c.c.owed.mu.Lock()
	l := c.c.owed.byPeer["B"]
	var owedPids []string
	for _, x := range l.purges {
		owedPids = append(owedPids, x.pid)
	}
	c.c.owed.mu.Unlock()
	t.Logf("B missed %d purges; A owes it %d, C owes it %d", purges, a.c.owed.owedTo("B"), len(owedPids))
	// B comes back.
	a.c.mu.Lock()
	a.c.peers["B"].Addr = bAddr
	a.c.mu.Unlock()
	var everything atomic.Int64
	count := func(r *http.Request) {
		if r.URL.Path == "/_edge/purge" && r.URL.Query().Get("prefix") == "/" {
			everything.Add(1)
		}
	}
	b.hold.Store(&count)
	setTrusted(c, "B", true)
	redeliverNow(t, a)
	redeliverNow(t, c)
	if everything.Load() > 0 || !storedAt(b, "/never-purged") || len(owedPids) != purges {
		t.Errorf("B missed %d purges (fewer than owedPerPeer, %d) and C owes it %d entries: C owed each purge twice (its own suspicion and A's notice), collapsed, sent %d purges of everything, and B lost a page no purge named (still stored: %v)",
			purges, owedPerPeer, len(owedPids), everything.Load(), storedAt(b, "/never-purged"))
	}
}

// A fifth review's (5), what held. With one peer hanging (trusted, its
// listener accepts and never answers), the admin purge waits the round
// (fanOutBound) and the notices to the peers that took it, which answer a
// repeat at once: not much more than the round.
func TestAPurgeWithAHangingPeerTakesAboutTheRound(t *testing.T) {
	const pt = 50 * time.Millisecond // fanOutBound 250 ms
	nodes := startRealNodes(t, []string{"A", "B", "C", "D", "E"}, routing.ModeHybrid, 2, pt, &slowOrigin{})
	a, b := nodes["A"], nodes["B"]
	var notices atomic.Int64
	hang := func(r *http.Request) {
		if r.URL.Path == "/_edge/purge" {
			<-r.Context().Done()
		}
	}
	b.hold.Store(&hang)
	for _, id := range []string{"C", "D", "E"} {
		count := func(r *http.Request) {
			if r.URL.Path == "/_edge/purge" && r.URL.Query().Get("owed") == "1" {
				notices.Add(1)
			}
		}
		nodes[id].hold.Store(&count)
	}
	start := time.Now()
	_, fan, _ := a.c.Purge(context.Background(), proxy.PurgeRequest{URL: "http://site.example/x"}, a.ph.Purge)
	took := time.Since(start)
	t.Logf("purge: %+v in %v (round %v); %d notices; C owes B %d", fan, took, fanOutBound(pt), notices.Load(), nodes["C"].c.owed.owedTo("B"))
	if took > fanOutBound(pt)+150*time.Millisecond {
		t.Errorf("purge took %v, round %v", took, fanOutBound(pt))
	}
}

// A fifth review's (6), what held. A notice does not loop: B misses A's
// round once (a 503), A names B to C and D, which owe it with no list of
// their own; after every node's monitor rounds nothing is owed and the
// purge took a bounded number of requests.
func TestANoticeDoesNotLoop(t *testing.T) {
	ids := []string{"A", "B", "C", "D"}
	nodes := startRealNodes(t, ids, routing.ModeHybrid, 2, 50*time.Millisecond, &slowOrigin{})
	var reqs, first atomic.Int64
	for _, id := range ids {
		count := func(r *http.Request) {
			if r.URL.Path == "/_edge/purge" {
				reqs.Add(1)
			}
		}
		if id == "B" {
			count = func(r *http.Request) {
				if r.URL.Path == "/_edge/purge" {
					reqs.Add(1)
					if first.Add(1) == 1 {
						panic(http.ErrAbortHandler) // the round's request fails
					}
				}
			}
		}
		nodes[id].hold.Store(&count)
	}
	_, fan, _ := nodes["A"].c.Purge(context.Background(), proxy.PurgeRequest{URL: "http://site.example/x"}, nodes["A"].ph.Purge)
	for range 4 {
		for _, id := range ids {
			redeliverNow(t, nodes[id])
		}
	}
	owed := 0
	for _, id := range ids {
		owed += nodes[id].c.owed.count()
	}
	t.Logf("purge %+v; %d purge requests in all; %d still owed", fan, reqs.Load(), owed)
	if owed != 0 || reqs.Load() > 8 {
		t.Errorf("%d requests, %d owed", reqs.Load(), owed)
	}
}

// A fifth review's (7). An owed purge keeps its round's away list for as long as it is
// owed, and the route owes the purge to the peers it names whether they
// took it since or not (on a repeat too). B was away during A's purge
// (every node owed it, and has since delivered it: B took it); E's
// request failed. E takes the purge from C (named to it by A's notice);
// A's own delivery then comes, a repeat naming B, and E owes B a purge B
// took long ago, keeping healthy B out of its routing view until its next
// monitor round (and sending B a request for nothing).
func TestAStaleAwayListDoesNotOweAPeerThatTookThePurge(t *testing.T) {
	ids := []string{"A", "B", "C", "E"}
	nodes := startRealNodes(t, ids, routing.ModeHybrid, 2, 50*time.Millisecond, &slowOrigin{})
	a, c, e := nodes["A"], nodes["C"], nodes["E"]
	for _, id := range []string{"A", "C", "E"} {
		setTrusted(nodes[id], "B", false) // B is restarting
	}
	var first atomic.Int64
	fail := func(r *http.Request) {
		if r.URL.Path == "/_edge/purge" && first.Add(1) == 1 {
			panic(http.ErrAbortHandler) // E's request in the round fails
		}
	}
	e.hold.Store(&fail)
	_, fan, _ := a.c.Purge(context.Background(), proxy.PurgeRequest{URL: "http://site.example/stale"}, a.ph.Purge)
	t.Logf("purge at A: %+v; A owes B %d, E %d; C owes B %d, E %d", fan, a.c.owed.owedTo("B"), a.c.owed.owedTo("E"), c.c.owed.owedTo("B"), c.c.owed.owedTo("E"))
	// B is back: A and C deliver it what it missed; E is trusted by B.
	for _, id := range []string{"A", "C", "E"} {
		setTrusted(nodes[id], "B", true)
	}
	a.c.owed.mu.Lock()
	aOwesE := a.c.owed.byPeer["E"]
	a.c.owed.mu.Unlock()
	// A delivers to B only (its list for E waits for a retry); C delivers
	// to B and to E (named to it by A's notice): E takes it from C.
	a.c.owed.mu.Lock()
	aOwesE.retryAt = time.Now().Add(time.Hour)
	a.c.owed.mu.Unlock()
	redeliverNow(t, a)
	redeliverNow(t, c)
	if a.c.owed.owedTo("B")+c.c.owed.owedTo("B") != 0 {
		t.Fatalf("B not delivered: A owes %d, C owes %d", a.c.owed.owedTo("B"), c.c.owed.owedTo("B"))
	}
	// A's own delivery to E now: a repeat, naming B.
	a.c.owed.mu.Lock()
	aOwesE.retryAt = time.Time{}
	a.c.owed.mu.Unlock()
	redeliverNow(t, a)
	e.c.setView() // as viewLoop does on requestView
	t.Logf("E owes B %d; E's ranking %v", e.c.owed.owedTo("B"), rankingOf(e, "/x"))
	if e.c.owed.owedTo("B") != 0 || !slices.Contains(rankingOf(e, "/x"), "B") {
		t.Errorf("E owes B %d purges B took before E was delivered A's copy: A's owed purge still named B as away, and E keeps B out of its view", e.c.owed.owedTo("B"))
	}
}
