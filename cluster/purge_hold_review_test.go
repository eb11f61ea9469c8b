package cluster

import (
	"context"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/edgecache/edge/proxy"
	"github.com/edgecache/edge/routing"
)

// purgeHoldLab: A (ingress) and H (the page's home), hybrid, peer timeout
// pt; the page is fetched once at A (A's ingress count 1) and kept at H;
// then the origin changes to v2.
func purgeHoldLab(t *testing.T, pt time.Duration) (a, h *realNode, o *versionedOrigin, p string) {
	o = &versionedOrigin{}
	o.version.Store(1)
	nodes := startRealNodes(t, []string{"A", "H"}, routing.ModeHybrid, 2, pt, o)
	a, h = nodes["A"], nodes["H"]
	p = pageHomedAt(t, a, "H", "/doc/")
	if w := askWith(a, p); w.Body.String() != "v1 "+p {
		t.Fatalf("first: %q", w.Body.String())
	}
	if w := askWith(h, p); !strings.Contains(w.Header().Get("Cache-Status"), "H; hit") {
		t.Fatalf("H does not hold the page: %q", w.Header().Get("Cache-Status"))
	}
	o.version.Store(2)
	return a, h, o, p
}

// pastTheOldWindow sleeps past the fixed window the hold once had at the
// sending node (max(4 × peer_timeout, 1 s) from the purge's start), which
// a slow round outlasted.
func pastTheOldWindow(pt time.Duration, since time.Time) {
	time.Sleep(time.Until(since.Add(max(4*pt, time.Second) + 50*time.Millisecond)))
}

// TestPurgeHoldOutlastsASlowRound: the hold was a fixed 4 × peer_timeout
// from the moment the purging node starts it, but the round it must cover
// is not bounded by that: the node's own purge runs inside the hold before
// the fan-out starts (a prefix or tag purge walks the whole store, both
// tiers), and each peer's request may take a dial (up to peer_timeout)
// and then a header wait (up to 4 × peer_timeout, the header deadline is
// set after the dial). A peer that answers 200 within those bounds, after
// the purging node's hold has ended, lets that node refill for good from
// it in between; the purge call then returns with every peer purged, and
// the node serves the purged copy from its store.
func TestPurgeHoldOutlastsASlowRound(t *testing.T) {
	t.Run("slow-local-purge", func(t *testing.T) {
		const pt = 250 * time.Millisecond // hold: max(1 s, 1 s) = 1 s
		a, _, _, p := purgeHoldLab(t, pt)
		localDone := make(chan struct{})
		var first sync.Once
		local := func(pr proxy.PurgeRequest) (int, error) {
			n, err := a.ph.Purge(pr) // the URL is gone at once ...
			slow := false
			first.Do(func() { close(localDone); slow = true })
			if slow { // the first pass (Cluster.Purge makes a second once the round is over)
				// ... and the rest of a broad purge's walk over a large store
				// takes a while (stands in for store.Keys + removals).
				time.Sleep(max(4*pt, time.Second) + 300*time.Millisecond)
			}
			return n, err
		}
		start := time.Now()
		purged := purgeInBackground(t, a, proxy.PurgeRequest{URL: "http://site.example" + p}, local)
		<-localDone
		pastTheOldWindow(pt, start)
		w := askWith(a, p) // a client request during the purge call
		t.Logf("during the purge call, past the old window: %q, Cache-Status %q", w.Body.String(), w.Header().Get("Cache-Status"))
		noPurgedCopyAfter(t, a, p, purged, 1, start)
	})

	t.Run("slow-dial-and-peer", func(t *testing.T) {
		const pt = 500 * time.Millisecond // hold 2 s; dial timeout 0.5 s; header timeout 2 s after the dial
		a, h, _, p := purgeHoldLab(t, pt)
		// One new connection to H takes 450 ms to set up (a lost SYN on a
		// lossy link; within the dial timeout): the purge's.
		var slowOnce atomic.Bool
		dial := a.c.purgeHTTP.dial
		a.c.purgeHTTP.dial = func(ctx context.Context, network, addr string) (net.Conn, error) {
			if slowOnce.CompareAndSwap(true, false) {
				time.Sleep(450 * time.Millisecond)
			}
			return dial(ctx, network, addr)
		}
		a.c.purgeHTTP.dropIdle(strings.TrimPrefix(h.srv.URL, "http://"))
		slowOnce.Store(true)
		// H takes 1.75 s to get to its purge (busy): with the dial it
		// answers at about 2.2 s, past the old 2 s window and within the
		// round's 2.5 s, so it counts as purged.
		holdPurgesAt(h, nil, 1750*time.Millisecond)
		start := time.Now()
		purged := purgeInBackground(t, a, proxy.PurgeRequest{URL: "http://site.example" + p}, a.ph.Purge)
		pastTheOldWindow(pt, start)
		w := askWith(a, p)
		t.Logf("at %v, past the old window: %q, Cache-Status %q", time.Since(start).Round(time.Millisecond), w.Body.String(), w.Header().Get("Cache-Status"))
		noPurgedCopyAfter(t, a, p, purged, 1, start)
	})
}

// TestAnUnrelatedPurgeDoesNotStopKeeping (a cost, not a stale answer):
// the hold was global, not scoped to what was purged. A purge of one URL
// stops every node keeping any page a peer gives it, for 4 × peer_timeout;
// a CMS purging a tag every few seconds keeps the ingress q-rule (and the
// tree's mid-path copies) off for good.
func TestAnUnrelatedPurgeDoesNotStopKeeping(t *testing.T) {
	a, _, _, p := purgeHoldLab(t, 500*time.Millisecond) // A has asked for p once (count 1)
	if _, _, err := a.c.Purge(context.Background(), proxy.PurgeRequest{URL: "http://site.example/unrelated"}, a.ph.Purge); err != nil {
		t.Fatal(err)
	}
	askWith(a, p) // the second request: A's q-rule keeps it
	w := askWith(a, p)
	t.Logf("third request for %s after a purge of /unrelated: Cache-Status %q; held copies %d", p, w.Header().Get("Cache-Status"), a.c.PurgeHeldCopies())
	if !strings.Contains(w.Header().Get("Cache-Status"), "A; hit") {
		t.Errorf("a purge of an unrelated URL kept A from keeping %s", p)
	}
}

// pageHomedAt is a page under prefix whose home, as n ranks it, is home.
func pageHomedAt(t *testing.T, n *realNode, home, prefix string) string {
	t.Helper()
	for i := range 1000 {
		q := prefix + string(rune('a'+i%26)) + strings.Repeat("x", i/26)
		if r := rankingOf(n, q); len(r) > 0 && r[0] == home {
			return q
		}
	}
	t.Fatalf("no page homed at %s in 1000", home)
	return ""
}

// holdPurgesAt makes n's peer purge handler wait, once reached, until
// release is closed (or for the given pause, if release is nil); reached
// closes when the purge request arrives.
func holdPurgesAt(n *realNode, release <-chan struct{}, pause time.Duration) (reached <-chan struct{}) {
	r := make(chan struct{})
	hold := func(req *http.Request) {
		if req.Method == http.MethodPost && strings.HasPrefix(req.URL.Path, "/_edge/purge") {
			close(r)
			if release != nil {
				<-release
			} else {
				time.Sleep(pause)
			}
		}
	}
	n.hold.Store(&hold)
	return r
}

// purgeInBackground sends pr round from n, as node.purge does, with local
// as n's own purge; the channel gets how many peers purged.
func purgeInBackground(t *testing.T, n *realNode, pr proxy.PurgeRequest, local func(proxy.PurgeRequest) (int, error)) <-chan int {
	purged := make(chan int, 1)
	go func() {
		_, peers, err := n.c.Purge(context.Background(), pr, local)
		if err != nil {
			t.Error(err)
		}
		purged <- peers.Purged
	}()
	return purged
}

// noPurgedCopyAfter waits for the purge sent round (peers is how many
// must have purged) and checks that n then answers p with no purged copy.
func noPurgedCopyAfter(t *testing.T, n *realNode, p string, purged <-chan int, peers int, start time.Time) {
	t.Helper()
	if got := <-purged; got != peers {
		// The staging, not the property: a peer's answer meant to land
		// between the old window and the round's end (a 500 ms slot) came
		// after the round on a loaded machine (a CI run: 0 purged at
		// 2.503 s), so the purge did not return with every peer purged.
		t.Skipf("not as staged: peers purged %d, want %d (at %v)", got, peers, time.Since(start))
	}
	t.Logf("purge returned at %v", time.Since(start).Round(time.Millisecond))
	w := askWith(n, p)
	t.Logf("%s after the purge returned (every peer purged): %q, Cache-Status %q", n.id, w.Body.String(), w.Header().Get("Cache-Status"))
	if w.Body.String() == "v1 "+p {
		t.Errorf("after a purge that returned with every peer purged, %s answers the purged copy from its store", n.id)
	}
}
