package cluster

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/edgecache/edge/proxy"
	"github.com/edgecache/edge/routing"
)

// storedAt reports whether n's store holds path's page.
func storedAt(n *realNode, path string) bool {
	e, _ := n.ph.Store().Lookup(n.ph.URLKey(mustURL("http://site.example"+path)), nil)
	return e != nil
}

// fillAt asks n for path until n stores it (its q-rule keeps a page
// another node is the home of at the second request).
func fillAt(t *testing.T, n *realNode, path string) {
	t.Helper()
	for range 5 {
		w := httptest.NewRecorder()
		n.ph.ServeInbound(w, httptest.NewRequest("GET", "http://site.example"+path, nil), proxy.Inbound{})
		if w.Code != 200 {
			t.Fatalf("%s: %d", path, w.Code)
		}
		n.ph.Wait()
		for deadline := time.Now().Add(time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
			if storedAt(n, path) {
				return
			}
		}
		t.Logf("%s at %s: Cache-Status %q", path, n.id, w.Header().Get("Cache-Status"))
	}
	t.Fatalf("%s: not stored at %s", path, n.id)
}

// redeliverNow runs one round of redelivery at n and waits until it ends.
func redeliverNow(t *testing.T, n *realNode) {
	t.Helper()
	n.c.redeliverPurges(context.Background(), time.Now())
	waitUntil(t, "the redelivery to end", func() bool {
		n.c.owed.mu.Lock()
		defer n.c.owed.mu.Unlock()
		for _, l := range n.c.owed.byPeer {
			if l.delivering {
				return false
			}
		}
		return true
	})
}

// TestAPurgeIsOwedToAPeerThatMissedIt: a peer that does not answer a purge
// (its process stalled, its connection cut) and a peer this node suspects
// (not asked at all) are each owed the purge; once this node trusts them
// again it delivers what they are owed, in order, and their stores lose
// the purged pages. Before, a node that was down during a purge came back
// with the purged pages and served them.
func TestAPurgeIsOwedToAPeerThatMissedIt(t *testing.T) {
	nodes := startRealNodes(t, []string{"A", "B"}, routing.ModeHybrid, 2, 100*time.Millisecond, &slowOrigin{})
	a, b := nodes["A"], nodes["B"]
	fillAt(t, b, "/p/1")
	fillAt(t, b, "/p/2")
	fillAt(t, b, "/p/3")

	// B's process does not answer: the connection is cut.
	var asked atomic.Int64
	cut := func(r *http.Request) {
		if strings.HasPrefix(r.URL.Path, "/_edge/purge") {
			asked.Add(1)
			panic(http.ErrAbortHandler)
		}
	}
	b.hold.Store(&cut)
	_, fan, err := a.c.Purge(context.Background(), proxy.PurgeRequest{URL: "http://site.example/p/1"}, a.ph.Purge)
	if err != nil || fan.Purged != 0 || fan.Owed != 1 {
		t.Fatalf("purge with B cut off: %+v %v, want 0 purged and 1 owed", fan, err)
	}
	// A suspects B: the next purge is not sent, but owed.
	a.c.mu.Lock()
	a.c.setTrust(a.c.peers["B"], false)
	a.c.mu.Unlock()
	before := asked.Load()
	if _, fan, _ = a.c.Purge(context.Background(), proxy.PurgeRequest{Tag: "none", Soft: true}, a.ph.Purge); fan.Owed != 1 {
		t.Fatalf("purge with B suspected: %+v", fan)
	}
	if _, fan, _ = a.c.Purge(context.Background(), proxy.PurgeRequest{Prefix: "/p/2"}, a.ph.Purge); fan.Owed != 1 || asked.Load() != before {
		t.Fatalf("purge with B suspected: %+v, B asked %d more times", fan, asked.Load()-before)
	}
	if got := a.c.owed.owedTo("B"); got != 3 {
		t.Fatalf("B is owed %d purges, want 3", got)
	}
	redeliverNow(t, a) // still suspected: nothing is sent
	if asked.Load() != before || !storedAt(b, "/p/1") {
		t.Fatal("owed purges were sent to a suspected peer")
	}

	// B is back and trusted.
	b.hold.Store(nil)
	a.c.mu.Lock()
	a.c.setTrust(a.c.peers["B"], true)
	a.c.mu.Unlock()
	redeliverNow(t, a)
	if storedAt(b, "/p/1") || storedAt(b, "/p/2") {
		t.Error("B still holds pages purged while it was away")
	}
	if !storedAt(b, "/p/3") {
		t.Error("B lost a page no purge named")
	}
	if got := a.c.owed.owedTo("B"); got != 0 {
		t.Errorf("B is still owed %d purges", got)
	}
	if got := testutil.ToFloat64(a.c.metrics.OwedPurgeEvents.WithLabelValues("delivered")); got != 3 {
		t.Errorf("delivered %v, want 3", got)
	}
}

// TestAPeerOwedTooManyPurgesIsOwedEverything: past owedPerPeer the list
// becomes one purge of everything, which empties the peer's store when it
// is delivered.
func TestAPeerOwedTooManyPurgesIsOwedEverything(t *testing.T) {
	nodes := startRealNodes(t, []string{"A", "B"}, routing.ModeHybrid, 2, 100*time.Millisecond, &slowOrigin{})
	a, b := nodes["A"], nodes["B"]
	fillAt(t, b, "/kept-until-everything")
	a.c.mu.Lock()
	a.c.setTrust(a.c.peers["B"], false)
	a.c.mu.Unlock()
	for i := range owedPerPeer + 1 {
		if _, _, err := a.c.Purge(context.Background(), proxy.PurgeRequest{URL: fmt.Sprintf("http://site.example/other/%d", i)}, a.ph.Purge); err != nil {
			t.Fatal(err)
		}
	}
	if got := a.c.owed.owedTo("B"); got != 1 {
		t.Fatalf("B is owed %d purges, want 1 (everything)", got)
	}
	if got := a.c.owed.count(); got != 1 {
		t.Fatalf("%d purges owed in all, want 1", got)
	}
	a.c.mu.Lock()
	a.c.setTrust(a.c.peers["B"], true)
	a.c.mu.Unlock()
	redeliverNow(t, a)
	if storedAt(b, "/kept-until-everything") {
		t.Error("B, owed everything, kept a page")
	}
}

// TestAForgottenPeerIsStillOwedPurges: a peer forgotten after it left
// (forget.go) is still owed the purges made after, and gets them when it
// joins again under its id.
func TestAForgottenPeerIsStillOwedPurges(t *testing.T) {
	nodes := startRealNodes(t, []string{"A", "B"}, routing.ModeHybrid, 2, 100*time.Millisecond, &slowOrigin{})
	a, b := nodes["A"], nodes["B"]
	fillAt(t, b, "/p/gone")
	a.c.mu.Lock()
	p := a.c.peers["B"]
	p.member, p.leftAt = false, time.Now().Add(-time.Hour)
	a.c.setTrust(p, false)
	a.c.mu.Unlock()
	a.c.forgetDeparted(time.Now())
	if _, fan, _ := a.c.Purge(context.Background(), proxy.PurgeRequest{URL: "http://site.example/p/gone"}, a.ph.Purge); fan.Owed != 1 {
		t.Fatalf("purge after B was forgotten: %+v, want it owed to B", fan)
	}
	// B joins again (as memberUp learns it).
	a.c.mu.Lock()
	a.c.addPeer("B", strings.TrimPrefix(b.srv.URL, "http://"))
	a.c.peers["B"].member = true
	a.c.setTrust(a.c.peers["B"], true)
	a.c.mu.Unlock()
	redeliverNow(t, a)
	if storedAt(b, "/p/gone") {
		t.Error("B came back holding a page purged while it was forgotten")
	}
}

func mustURL(s string) *url.URL {
	u, err := url.Parse(s)
	if err != nil {
		panic(err)
	}
	return u
}

// waitUntil polls cond for up to 10 s.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	eventually(t, 10*time.Second, what, cond)
}
