package cluster

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/edgecache/edge/proxy"
)

// s45SWROrigin answers every page fresh for a second, then usable stale
// for ten minutes while it is refreshed (stale-while-revalidate), with a
// body naming the fetch ("v1", "v2", ...); past failAfter fetches (if
// not 0) it fails every one (the origin went down).
type s45SWROrigin struct {
	n         atomic.Int64
	failAfter int64
}

func (o *s45SWROrigin) Fetch(ctx context.Context, fr proxy.FetchRequest) (proxy.Result, error) {
	n := o.n.Add(1)
	if o.failAfter > 0 && n > o.failAfter {
		return proxy.Result{}, errors.New("origin down")
	}
	h := http.Header{"Cache-Control": {"public, max-age=1, stale-while-revalidate=600"}, "Content-Type": {"text/plain"}}
	body := "v" + strconv.FormatInt(n, 10)
	return proxy.Result{Resp: &http.Response{StatusCode: 200, Header: h, Body: io.NopCloser(strings.NewReader(body)), ContentLength: int64(len(body))}, Keep: true}, nil
}

// s45Gate holds every probe the nodes are sent until open is called.
type s45Gate struct {
	ch   chan struct{}
	once sync.Once
}

func s45HoldProbes(nodes ...*realNode) *s45Gate {
	g := &s45Gate{ch: make(chan struct{})}
	hold := func(r *http.Request) {
		if r.Header.Get(hdrMode) == hopProbe.String() {
			<-g.ch
		}
	}
	for _, n := range nodes {
		n.hold.Store(&hold)
	}
	return g
}

func (g *s45Gate) open() { g.once.Do(func() { close(g.ch) }) }

// TestS45FirstHopProbeStopsTheHomesStaleRefresh: H, A's first hop and the
// page's home, holds a copy that has gone stale within its
// stale-while-revalidate window; X is positively indicated but no longer
// holds the page (a false positive), so A waits for X's probe. Before the
// change A climbed to H, which served the stale copy and refreshed it from
// the origin in the background. With the first hop asked beside the
// probes, H answers the probe (only-if-cached: a probe never refreshes,
// proxy/handler.go) and A serves that stale copy: the home never
// refreshes, and every request that waits for a probe gets the stale page
// for the whole window (here ten minutes; a day for a site that says so).
func TestS45FirstHopProbeStopsTheHomesStaleRefresh(t *testing.T) {
	for _, with := range []bool{false, true} {
		origin := &s45SWROrigin{}
		l := newBesideLab(t, false, origin)
		p := l.pageHomedAtH("/public/swr")
		newFirstHopLabOn(t, l, p, with) // X holds p, positively indicated at A
		if w := l.ask(l.h, p); w.Code != 200 {
			t.Fatalf("filling H: %d", w.Code)
		}
		if _, err := l.x.ph.Purge(proxy.PurgeRequest{URL: "http://site.example" + p}); err != nil {
			t.Fatal(err)
		}
		before := origin.n.Load()           // X's fill and H's
		time.Sleep(2100 * time.Millisecond) // H's copy (max-age=1) is stale now, within its SWR window
		// X's probe is held until A has answered (it misses when it
		// comes): with the first hop beside, H's answer is what A serves;
		// without, A climbs to H once X's probe timed out.
		gate := s45HoldProbes(l.x)
		t.Cleanup(gate.open)
		if !with {
			gate.open()
		}
		w := l.ask(l.a, p)
		gate.open()
		l.h.ph.Wait()
		if w.Code != 200 {
			t.Fatalf("with=%v: %d %q", with, w.Code, w.Body.String())
		}
		t.Logf("with=%v: A served %q (Cache-Status %q)", with, w.Body.String(), w.Result().Header.Values("Cache-Status"))
		deadline := time.Now().Add(3 * time.Second)
		for origin.n.Load() == before && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
		}
		if origin.n.Load() == before {
			t.Errorf("with=%v: a stale page served from its home within stale-while-revalidate, and the home never refreshed it (origin fetches stay %d; first-hop probes %v hit)",
				with, before, testutil.ToFloat64(l.a.c.metrics.FirstHopProbes.WithLabelValues("hit")))
		}
	}
}

// TestS45LateFirstHopAnswerCountedAsAHit: H's probe is held; X (a false
// positive) misses, so A climbs to H, which fetches the page and keeps it
// (it is the home). Only then is H's probe answered: it finds the copy the
// climb just stored. The request never used that answer, and H did not
// hold the page when asked, yet it is counted as a first-hop hit
// (edge_peer_first_hop_probes_total{outcome="hit"}, the status page's
// "holding the page"), which the docs' first-hop hit rate is read from.
func TestS45LateFirstHopAnswerCountedAsAHit(t *testing.T) {
	l := newBesideLab(t, false, userOrigin{})
	p := l.pageHomedAtH("/public/late")
	newFirstHopLabOn(t, l, p, true)
	if _, err := l.x.ph.Purge(proxy.PurgeRequest{URL: "http://site.example" + p}); err != nil {
		t.Fatal(err)
	}
	gate := s45HoldProbes(l.h)
	t.Cleanup(gate.open) // a failed check must not leave H's handler held
	w := l.ask(l.a, p)
	if w.Code != 200 {
		t.Fatalf("%d %q", w.Code, w.Body.String())
	}
	gate.open()
	l.h.ph.Wait()
	eventually(t, 5*time.Second, "H's probe answer recorded", func() bool { return l.a.c.ProbeRaces().FirstHopAsked == 1 })
	// Once A climbed to H, A ended H's probe: recorded as cancelled.
	if got := testutil.ToFloat64(l.a.c.metrics.FirstHopProbes.WithLabelValues("cancelled")); got != 1 {
		t.Errorf("H's probe, overtaken by the climb: %v cancelled, want 1", got)
	}
	if st := l.a.c.ProbeRaces(); st.FirstHopHits != 0 {
		t.Errorf("a first-hop answer that came after the climb had filled H counted as a hit: %+v (metric hit=%v)",
			st, testutil.ToFloat64(l.a.c.metrics.FirstHopProbes.WithLabelValues("hit")))
	}
}
