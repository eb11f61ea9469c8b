package cluster

import (
	"context"
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

// versionedOrigin answers "vN path" for its current version N; fetches
// made once slow is set take 300 ms (an origin farther than any peer).
type versionedOrigin struct {
	version atomic.Int32
	slow    atomic.Bool
	fetches atomic.Int64
}

func (o *versionedOrigin) Fetch(ctx context.Context, fr proxy.FetchRequest) (proxy.Result, error) {
	o.fetches.Add(1)
	if o.slow.Load() {
		select {
		case <-time.After(300 * time.Millisecond):
		case <-ctx.Done():
			return proxy.Result{}, ctx.Err()
		}
	}
	h := http.Header{"Cache-Control": {"public, max-age=600"}, "Content-Type": {"text/plain"}}
	body := "v" + string(rune('0'+o.version.Load())) + " " + fr.Req.URL.Path
	return proxy.Result{Resp: &http.Response{StatusCode: 200, Header: h, Body: io.NopCloser(strings.NewReader(body)), ContentLength: int64(len(body))}, Keep: true}, nil
}

func askWith(n *realNode, p string, hdr ...string) *httptest.ResponseRecorder {
	r := httptest.NewRequest("GET", "http://site.example"+p, nil)
	for i := 0; i+1 < len(hdr); i += 2 {
		r.Header.Add(hdr[i], hdr[i+1])
	}
	w := httptest.NewRecorder()
	n.ph.ServeHTTP(w, r)
	n.ph.Wait()
	return w
}

// TestNoCacheIsNotAnsweredByAProbe: a probe asks only-if-cached in place
// of the request's own Cache-Control, so a client's no-cache (honoured)
// must not be probed for: with race-all, which probes every peer on every
// miss, X's old copy answered it while the climb took the no-cache to the
// origin.
func TestNoCacheIsNotAnsweredByAProbe(t *testing.T) {
	for _, sel := range []Selection{SelectionOff, SelectionRaceAll} {
		t.Run(sel.String(), func(t *testing.T) { noCacheThroughProbe(t, sel) })
	}
}

func noCacheThroughProbe(t *testing.T, sel Selection) {
	o := &versionedOrigin{}
	o.version.Store(1)
	nodes := startRealNodes(t, []string{"A", "H", "X", "Y"}, routing.ModeHybrid, 2, 2*time.Second, o)
	a, x := nodes["A"], nodes["X"]
	a.c.cfg.Selection = sel
	l := &raceAllLab{besideLab: &besideLab{t: t, a: a, h: nodes["H"], x: x}, y: nodes["Y"]}
	p := l.homedAtH("/doc/")
	for range 2 { // X keeps the page from its second request
		if w := askWith(x, p); w.Code != 200 || w.Body.String() != "v1 "+p {
			t.Fatalf("filling X: %d %q", w.Code, w.Body.String())
		}
	}
	if w := askWith(x, p); !strings.Contains(w.Header().Get("Cache-Status"), "X; hit") {
		t.Fatalf("X does not hold the page: %q", w.Header().Get("Cache-Status"))
	}
	// The content changes at the origin.
	o.version.Store(2)
	o.slow.Store(true)
	before := o.fetches.Load()
	w := askWith(a, p, "Cache-Control", "no-cache")
	t.Logf("A, no-cache: %d %q, Cache-Status %q, origin fetches %d", w.Code, w.Body.String(), w.Header().Get("Cache-Status"), o.fetches.Load()-before)
	if w.Body.String() == "v1 "+p {
		t.Errorf("a no-cache request (honoured) was answered with a peer's stored copy the origin no longer serves, via race-all's probe")
	}
}

// oneGatedPathOrigin holds the fetches of one path until open is closed.
type oneGatedPathOrigin struct {
	path    string
	open    chan struct{}
	waiting chan struct{}
}

func (o *oneGatedPathOrigin) Fetch(ctx context.Context, fr proxy.FetchRequest) (proxy.Result, error) {
	if fr.Req.URL.Path == o.path {
		o.waiting <- struct{}{}
		select {
		case <-o.open:
		case <-ctx.Done():
			return proxy.Result{}, ctx.Err()
		}
	} else {
		select { // the origin is farther than any peer
		case <-time.After(200 * time.Millisecond):
		case <-ctx.Done():
			return proxy.Result{}, ctx.Err()
		}
	}
	h := http.Header{"Cache-Control": {"public, max-age=600"}, "Content-Type": {"text/plain"}}
	body := "page " + fr.Req.URL.Path
	return proxy.Result{Resp: &http.Response{StatusCode: 200, Header: h, Body: io.NopCloser(strings.NewReader(body)), ContentLength: int64(len(body))}, Keep: true}, nil
}

// TestAPeersRefusalIsNotAHit: a probed peer's own refusal (its
// per-client limit's 429: it counts everything a node relays as one
// client) is not the page. Counted as a hit, it won the race under
// race-all, the climb was cancelled and the client got the 429.
func TestAPeersRefusalIsNotAHit(t *testing.T) {
	for _, sel := range []Selection{SelectionOff, SelectionRaceAll} {
		t.Run(sel.String(), func(t *testing.T) { probed429(t, sel) })
	}
}

func probed429(t *testing.T, sel Selection) {
	o := &oneGatedPathOrigin{open: make(chan struct{}), waiting: make(chan struct{}, 4)}
	nodes := startRealNodesWith(t, []string{"A", "H", "X", "Y"}, routing.ModeHybrid, 2, 2*time.Second, o, 1000,
		nodeTuning{proxy: func(c *proxy.Config) { c.MaxInflightPerClient = 1 }})
	a := nodes["A"]
	a.c.cfg.Selection = sel
	l := &raceAllLab{besideLab: &besideLab{t: t, a: a, h: nodes["H"], x: nodes["X"]}, y: nodes["Y"]}
	p := l.homedAtH("/p/")
	var q string
	for i := range 1000 {
		c := "/q/" + strings.Repeat("z", i%7) + string(rune('a'+i%26)) + strings.Repeat("y", i/26)
		if r := rankingOf(a, c); len(r) > 0 && r[0] == "X" {
			q = c
			break
		}
	}
	if q == "" {
		t.Fatal("no page homed at X")
	}
	o.path = q
	defer close(o.open)

	// One client's request for q: A climbs to X, whose fill waits on the origin.
	go func() {
		r := httptest.NewRequest("GET", "http://site.example"+q, nil)
		r.RemoteAddr = "192.0.2.7:1000"
		a.ph.ServeHTTP(httptest.NewRecorder(), r)
	}()
	<-o.waiting
	// Another client's request for p (homed at H; the origin answers it in 200 ms).
	r := httptest.NewRequest("GET", "http://site.example"+p, nil)
	r.RemoteAddr = "192.0.2.8:1000"
	w := httptest.NewRecorder()
	a.ph.ServeHTTP(w, r)
	t.Logf("A for %s: %d %q, Cache-Status %q", p, w.Code, w.Body.String(), w.Header().Get("Cache-Status"))
	if w.Code != 200 {
		t.Errorf("%v: a probed peer's 429 (its per-client limit, A's address) answered A's client, got %d", sel, w.Code)
	}
}

// TestPurgeFanOutDoesNotRefillFromAPeer: a request at A after A's purge,
// while the purge is still on its way to the page's home H, climbs to H,
// which still holds the old copy. A must not keep it: after the purge has
// reached every node, A must not answer the purged copy (purgehold.go).
func TestPurgeFanOutDoesNotRefillFromAPeer(t *testing.T) {
	a, h, _, p := purgeHoldLab(t, 2*time.Second) // the content changes; the operator purges it at A
	release := make(chan struct{})
	reached := holdPurgesAt(h, release, 0) // the fan-out's round trips to the peers before H
	purged := purgeInBackground(t, a, proxy.PurgeRequest{URL: "http://site.example" + p}, a.ph.Purge)
	<-reached
	w := askWith(a, p) // a client request made after A's purge, during the fan-out
	t.Logf("during the fan-out: %q, Cache-Status %q", w.Body.String(), w.Header().Get("Cache-Status"))
	close(release)
	if n := <-purged; n != 1 {
		t.Fatalf("peers purged: %d", n)
	}
	// The purge has returned, on every node.
	w = askWith(a, p)
	t.Logf("after the purge returned: %q, Cache-Status %q", w.Body.String(), w.Header().Get("Cache-Status"))
	if w.Body.String() == "v1 "+p {
		t.Errorf("after a purge applied on every node, A still answers the purged copy (refilled from H during the fan-out)")
	}
}
