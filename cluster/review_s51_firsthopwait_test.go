package cluster

import (
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/edgecache/edge/proxy"
)

// s51Gate holds every peer request to the nodes it is set on that want
// says it should hold, until open (called in t.Cleanup too).
type s51Gate struct {
	ch   chan struct{}
	once sync.Once
	mu   sync.Mutex
	seen map[string]int // hop mode -> requests held
}

func s51Hold(t *testing.T, want func(*http.Request) bool, nodes ...*realNode) *s51Gate {
	g := &s51Gate{ch: make(chan struct{}), seen: map[string]int{}}
	t.Cleanup(g.open)
	hold := func(r *http.Request) {
		if want(r) {
			g.mu.Lock()
			g.seen[r.Header.Get(hdrMode)]++
			g.mu.Unlock()
			<-g.ch
		}
	}
	for _, n := range nodes {
		n.hold.Store(&hold)
	}
	t.Cleanup(func() {
		for _, n := range nodes {
			n.hold.Store(nil)
		}
	})
	return g
}

func (g *s51Gate) open() { g.once.Do(func() { close(g.ch) }) }

// TestS51SilentFirstHopHoldsAStalePagesRequestForItsProbe (failed on
// cd66361; mended: firstHit no longer waits for the first hop, and a stale
// copy answers early only if the first hop answered in time).
//
// Steps: the first hop is asked beside the waited-for probes (fno, X
// positively indicated: the default first_hop_with_probes). X holds the
// page stale within its stale-while-revalidate window; H (the page's
// home, A's first hop) does not hold it, and H's probe is held (a first
// hop slow to answer probes, e.g. overloaded or across a lossy link: the
// climb to H itself is not held, the origin answers at once). A client
// asks A, with cluster.stale_while_climbing on (the default) and off.
//
// Expected: as TestFirstHopSlowDoesNotHoldTheClimb says of every miss
// ("once X has missed, A climbs ... without waiting for H's probe
// answer") and firstHit's own comment ("a first hop slow to answer would
// otherwise make the request wait for it twice"): once X has answered,
// A climbs to H at once and ends H's probe, recorded as
// edge_peer_first_hop_probes_total{outcome="cancelled"}. That is what it
// does with the switch off.
//
// Got: with the switch on, cd66361's firstHit waits for H's held probe
// until its header deadline (cluster.peer_timeout) because X's answer was
// stale: the probe ends as outcome="error", and only then does A climb
// to the same H. The wait buys nothing: H's probe said nothing
// ("error" does not set firstHopNoFresh), so no stale copy is served
// early either, and the client waits peer_timeout plus the whole climb.
// An on-by-default feature that exists to cut latency makes every request
// for a page stale at a peer wait one peer_timeout longer than with the
// feature off whenever the first hop is slow to answer probes.
func TestS51SilentFirstHopHoldsAStalePagesRequestForItsProbe(t *testing.T) {
	for _, on := range []bool{false, true} {
		swr := &s45SWROrigin{}
		l := newBesideLab(t, false, swr)
		l.a.c.cfg.StaleWhileClimbing = on
		p := l.pageHomedAtH("/public/s51silent")
		newFirstHopLabOn(t, l, p, true) // X holds p ("v1"), positively indicated at A
		if _, err := l.h.ph.Purge(proxy.PurgeRequest{URL: "http://site.example" + p}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(2100 * time.Millisecond) // X's copy (max-age=1) is stale, within its window
		g := s51Hold(t, func(r *http.Request) bool { return r.Header.Get(hdrMode) == hopProbe.String() }, l.h)

		answered := make(chan *httptest.ResponseRecorder, 1)
		t0 := time.Now()
		go func() { answered <- l.ask(l.a, p) }()
		var w *httptest.ResponseRecorder
		select {
		case w = <-answered:
		case <-time.After(60 * time.Second):
			g.open()
			t.Fatalf("on=%v: A never answered", on)
		}
		took := time.Since(t0)
		g.open()
		l.h.ph.Wait()
		eventually(t, 10*time.Second, "H's probe answer recorded", func() bool { return l.a.c.ProbeRaces().FirstHopAsked == 1 })
		cancelled := testutil.ToFloat64(l.a.c.metrics.FirstHopProbes.WithLabelValues("cancelled"))
		errored := testutil.ToFloat64(l.a.c.metrics.FirstHopProbes.WithLabelValues("error"))
		t.Logf("on=%v: A answered %d %q in %v (peer_timeout %v); H's probe: cancelled %v error %v; served_early %v",
			on, w.Code, w.Body.String(), took.Round(time.Millisecond), l.a.c.cfg.PeerTimeout, cancelled, errored, l.staleFallbacks("served_early"))
		if w.Code != 200 {
			t.Fatalf("on=%v: A answered %d", on, w.Code)
		}
		if cancelled != 1 || errored != 0 {
			t.Errorf("on=%v: A waited for H's held probe until its deadline before climbing to H (first-hop probes cancelled %v, error %v; want the probe ended by the climb)",
				on, cancelled, errored)
		}
	}
}
