package cluster

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/edgecache/edge/proxy"
	"github.com/edgecache/edge/routing"
)

// setTrusted sets id's trust at n and rebuilds n's ring, as the monitor
// does.
func setTrusted(n *realNode, id string, trusted bool) {
	n.c.mu.Lock()
	n.c.setTrust(n.c.peers[id], trusted)
	n.c.mu.Unlock()
	n.c.setView()
}

// pathHomedAt finds a path whose ranking at n starts with ids.
func pathHomedAt(t *testing.T, n *realNode, prefix string, ids ...string) string {
	t.Helper()
	for i := range 100000 {
		p := prefix + strconv.Itoa(i)
		r := rankingOf(n, p)
		if len(r) >= len(ids) && slices.Equal(r[:len(ids)], ids) {
			return p
		}
	}
	t.Fatalf("no path with ranking %v", ids)
	return ""
}

// A review's (1). The owed table's cap (owedTracked) drops the list owed least
// lately, whatever it holds: a known peer that is away (suspected, still
// in the peer table) and owed a real purge loses its list to departed ids
// forgotten after its last owed purge, whose lists are empty. It comes
// back and serves the purged page. (Departed ids are also never expired
// while purges keep coming: each purge is owed to them and refreshes
// their list, so a fleet that replaced 256 nodes keeps the table full.)
func TestAPeerAwayKeepsItsOwedPurgesWhenManyIdsAreTracked(t *testing.T) {
	nodes := startRealNodes(t, []string{"A", "B"}, routing.ModeHybrid, 2, 100*time.Millisecond, &slowOrigin{})
	a, b := nodes["A"], nodes["B"]
	fillAt(t, b, "/p/taken-down")
	setTrusted(a, "B", false)
	if _, fan, _ := a.c.Purge(context.Background(), proxy.PurgeRequest{URL: "http://site.example/p/taken-down"}, a.ph.Purge); fan.Owed != 1 {
		t.Fatalf("purge with B suspected: %+v", fan)
	}
	time.Sleep(2 * time.Millisecond)
	// While B is away, departed nodes of an autoscaled fleet are forgotten
	// (forget.go tracks each of them).
	a.c.mu.Lock()
	for i := range owedTracked {
		id := fmt.Sprintf("gone-%d", i)
		a.c.addPeer(id, "127.0.0.1:1")
		a.c.peers[id].leftAt = time.Now().Add(-time.Hour)
	}
	a.c.mu.Unlock()
	a.c.forgetDeparted(time.Now())
	t.Logf("B owed %d; %d purges owed in all; %d ids tracked", a.c.owed.owedTo("B"), a.c.owed.count(), len(a.c.owed.ids()))
	if got := a.c.owed.owedTo("B"); got != 1 {
		t.Errorf("B, a known peer away, is owed %d purges after %d departed ids were tracked, want 1: its list was dropped for empty ones", got, owedTracked)
	}
	setTrusted(a, "B", true)
	redeliverNow(t, a)
	if storedAt(b, "/p/taken-down") {
		t.Error("B came back and still holds the page purged while it was away")
	}
}

// A review's (2). A peer owed everything (a collapsed list) is being delivered
// it; a fresh purge that the peer does not take meanwhile is not recorded
// (owe returns early on a list that is one purge of everything), and when
// the purge of everything is settled the list is empty: the fresh purge is
// owed to nobody. The peer stored the page after its wipe and before the
// fresh purge (it went on serving while it wiped), and keeps it.
func TestAPurgeOwedWhileEverythingIsDeliveredIsKept(t *testing.T) {
	nodes := startRealNodes(t, []string{"A", "B"}, routing.ModeHybrid, 2, 100*time.Millisecond, &slowOrigin{})
	a, b := nodes["A"], nodes["B"]
	page := pathHomedAt(t, b, "/q/", "B") // B fetches it from the origin itself

	// A reaches B through a relay that lets the test act between B's
	// answer to the purge of everything and A reading it, and that fails
	// any other purge meanwhile.
	target, _ := url.Parse(b.srv.URL)
	inEverything := make(chan struct{})
	goOn := make(chan struct{})
	var window, blocked atomic.Bool
	rp := &httputil.ReverseProxy{
		// Every field is signed: no X-Forwarded-* added (Rewrite adds
		// none unless asked), no Accept-Encoding, the Host A signed.
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(target)
			pr.Out.Host = pr.In.Host
		},
		Transport: &http.Transport{DisableCompression: true},
	}
	rp.ModifyResponse = func(resp *http.Response) error {
		if resp.Request.URL.Query().Get("prefix") == "/" && resp.StatusCode == 200 && blocked.CompareAndSwap(false, true) {
			window.Store(true)
			close(inEverything)
			<-goOn
			window.Store(false)
		}
		return nil
	}
	relay := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if window.Load() && r.URL.Path == "/_edge/purge" { // B busy wiping its disk: no answer in time
			panic(http.ErrAbortHandler)
		}
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(relay.Close)
	a.c.mu.Lock()
	a.c.peers["B"].Addr = strings.TrimPrefix(relay.URL, "http://")
	a.c.mu.Unlock()

	setTrusted(a, "B", false)
	for i := range owedPerPeer + 1 {
		if _, _, err := a.c.Purge(context.Background(), proxy.PurgeRequest{URL: fmt.Sprintf("http://site.example/other/%d", i)}, a.ph.Purge); err != nil {
			t.Fatal(err)
		}
	}
	if got := a.c.owed.owedTo("B"); got != 1 {
		t.Fatalf("B owed %d, want 1 (everything)", got)
	}
	setTrusted(a, "B", true)
	a.c.redeliverPurges(context.Background(), time.Now())
	select {
	case <-inEverything:
	case <-time.After(10 * time.Second):
		t.Fatal("the purge of everything was not delivered")
	}
	// B has wiped itself; it stores the page again, then the site purges
	// it, and B does not take that purge.
	fillAt(t, b, page)
	_, fan, _ := a.c.Purge(context.Background(), proxy.PurgeRequest{URL: "http://site.example" + page}, a.ph.Purge)
	t.Logf("fresh purge while everything is delivered: %+v", fan)
	close(goOn)
	waitUntil(t, "the relay to pass purges again", func() bool { return !window.Load() })
	for range 10 { // a delivery that fails on a loaded machine is tried again
		redeliverNow(t, a)
		if a.c.owed.owedTo("B") == 0 {
			break
		}
		a.c.owed.mu.Lock()
		if l := a.c.owed.byPeer["B"]; l != nil {
			l.retryAt = time.Time{}
		}
		a.c.owed.mu.Unlock()
	}
	t.Logf("B still owed %d; events delivered %v failed %v", a.c.owed.owedTo("B"),
		testutil.ToFloat64(a.c.metrics.OwedPurgeEvents.WithLabelValues("delivered")), testutil.ToFloat64(a.c.metrics.OwedPurgeEvents.WithLabelValues("failed")))
	if storedAt(b, page) {
		t.Errorf("B holds %s: the purge it did not take (peers_owed %d) was owed while everything was being delivered, and dropped when everything was settled", page, fan.Owed)
	}
}

// A review's (3). A peer back after a long absence (more than keepEnded, ten
// minutes: a repair, a slow reboot) is trusted again some time before its
// owed purges reach it (up to owedRetry, longer while a delivery fails).
// In that window the owing node itself asked it for a page it purged, as
// its home, and kept the purged copy: the holds that would refuse a page
// made before the purge are forgotten by then. The redelivery then purged
// the home, but not the copy the owing node took from it. A peer owed
// purges now stays out of the owing node's routing view until it has them.
func TestTheOwingNodeDoesNotCopyAPurgedPageFromTheReturningPeer(t *testing.T) {
	nodes := startRealNodes(t, []string{"A", "B"}, routing.ModeHybrid, 2, 100*time.Millisecond, &slowOrigin{})
	a, b := nodes["A"], nodes["B"]
	page := pathHomedAt(t, a, "/h/", "B", "A")
	fillAt(t, b, page)
	setTrusted(a, "B", false)
	if _, fan, _ := a.c.Purge(context.Background(), proxy.PurgeRequest{URL: "http://site.example" + page}, a.ph.Purge); fan.Owed != 1 {
		t.Fatalf("purge with B away: %+v", fan)
	}
	// B is away for more than keepEnded: the purge's hold at A is
	// forgotten.
	a.c.copies.mu.Lock()
	for _, l := range a.c.copies.byKey {
		for _, e := range l {
			e.began = e.began.Add(-keepEnded - time.Minute)
			e.until = e.until.Add(-keepEnded - time.Minute)
		}
	}
	for _, e := range a.c.copies.scoped {
		e.began = e.began.Add(-keepEnded - time.Minute)
		e.until = e.until.Add(-keepEnded - time.Minute)
	}
	a.c.copies.prunedAt = time.Time{}
	a.c.copies.mu.Unlock()

	setTrusted(a, "B", true) // trusted again; the purges it is owed are not delivered yet
	// A's clients ask for the page; its home, B, holds its old copy.
	w := httptest.NewRecorder()
	a.ph.ServeInbound(w, httptest.NewRequest("GET", "http://site.example"+page, nil), proxy.Inbound{})
	if cs := w.Header().Get("Cache-Status"); strings.Contains(cs, "B;") {
		t.Errorf("A, which owes B a purge of %s, asked B for it before delivering it: Cache-Status %q", page, cs)
	}
	redeliverNow(t, a)
	if storedAt(b, page) {
		t.Fatal("the owed purge did not reach B")
	}
}

// A review's (4). Only the node a purge was sent to owes it. A node that
// never knew the absent peer (it started after the peer left: a rolling
// deploy while the peer was being repaired) owes it nothing, and the
// nodes that know the peer is away take the purge without owing it to
// the peer either. The peer comes back and serves the purged page.
func TestAPurgeIsOwedByEveryNodeThatKnowsThePeerIsAway(t *testing.T) {
	nodes := startRealNodes(t, []string{"A", "B", "C"}, routing.ModeHybrid, 2, 100*time.Millisecond, &slowOrigin{})
	a, b, c := nodes["A"], nodes["B"], nodes["C"]
	fillAt(t, b, "/p/repaired")
	// B is away. C knows it (suspected); A restarted since and never
	// learnt it (memberlist no longer lists a dead node to a new member).
	setTrusted(c, "B", false)
	a.c.mu.Lock()
	delete(a.c.peers, "B")
	a.c.mu.Unlock()
	a.c.setView()
	_, fan, _ := a.c.Purge(context.Background(), proxy.PurgeRequest{URL: "http://site.example/p/repaired"}, a.ph.Purge)
	t.Logf("purge at A: %+v; owed to B at A %d, at C %d", fan, a.c.owed.owedTo("B"), c.c.owed.owedTo("B"))
	// B is back.
	setTrusted(c, "B", true)
	redeliverNow(t, a)
	redeliverNow(t, c)
	if storedAt(b, "/p/repaired") {
		t.Error("B came back holding a page purged while it was away: C, which knew B was away, took the purge without owing it to B")
	}
}

// A review's (5). A peer that takes every purge but answers after fanOutBound
// (a prefix purge scanning a large store, removing many files) is owed
// each one although it took it; past owedPerPeer of them it is owed a
// purge of everything, and loses every page it holds, pages no purge
// named among them. Nothing was missed: the purge of everything was not
// needed.
func TestAPeerThatTakesPurgesSlowlyIsNotWiped(t *testing.T) {
	const pt = 20 * time.Millisecond // fanOutBound 100 ms
	nodes := startRealNodes(t, []string{"A", "B"}, routing.ModeHybrid, 2, pt, &slowOrigin{})
	a, b := nodes["A"], nodes["B"]
	fillAt(t, b, "/never-purged")
	var arrived, took, everything atomic.Int64
	slow := func(r *http.Request) {
		if r.URL.Path == "/_edge/purge" {
			if r.URL.Query().Get("prefix") == "/" {
				everything.Add(1)
			} else {
				arrived.Add(1)
				time.Sleep(fanOutBound(pt) + 50*time.Millisecond) // answered late, then taken
				took.Add(1)
			}
		}
	}
	b.hold.Store(&slow)
	// In batches of 16 at once (a site purging a few times a second), so
	// that every request reaches B.
	for start := 0; start <= owedPerPeer; start += 16 {
		var wg sync.WaitGroup
		for i := start; i < min(start+16, owedPerPeer+1); i++ {
			wg.Go(func() {
				_, _, _ = a.c.Purge(context.Background(), proxy.PurgeRequest{Prefix: fmt.Sprintf("/other/%d/", i)}, a.ph.Purge)
			})
		}
		wg.Wait()
	}
	// Every purge is settled: B took it, or A owes it (on a loaded
	// machine a request can miss even the late bound and never reach B;
	// A then owes it, rightly, and delivers it below). Whatever B took,
	// A must not count against it.
	waitUntil(t, "every purge to be taken by B or owed to it", func() bool {
		return arrived.Load() == took.Load() && took.Load()+int64(a.c.owed.owedTo("B")) >= owedPerPeer+1
	})
	t.Logf("B took %d purges; A owes it %d", took.Load(), a.c.owed.owedTo("B"))
	if took.Load() == 0 {
		t.Fatal("no purge reached B: the test measured nothing")
	}
	redeliverNow(t, a)
	if everything.Load() > 0 || !storedAt(b, "/never-purged") {
		t.Errorf("B took every purge (%d), yet was sent %d purges of everything and lost a page no purge named (still stored: %v)",
			took.Load(), everything.Load(), storedAt(b, "/never-purged"))
	}
}
