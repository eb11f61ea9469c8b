package cluster

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/edgecache/edge/proxy"
)

// failingOrigin answers until failing is set, then fails every fetch at once.
type failingOrigin struct{ failing atomic.Bool }

func (o *failingOrigin) Fetch(ctx context.Context, fr proxy.FetchRequest) (proxy.Result, error) {
	if o.failing.Load() {
		return proxy.Result{}, errors.New("origin down")
	}
	h := http.Header{"Cache-Control": {"public, max-age=600"}, "Content-Type": {"text/plain"}}
	body := "page " + fr.Req.URL.Path
	return proxy.Result{Resp: &http.Response{StatusCode: 200, Header: h, Body: io.NopCloser(strings.NewReader(body)), ContentLength: int64(len(body))}, Keep: true}, nil
}

// A climb that fails does not win the race against a negative probe whose
// hit is still to come: X's hit is served in both modes (found by the
// hostile review: beside the climb, the client got the climb's 502).
func TestReviewClimbErrorBeatsPendingNegativeHit(t *testing.T) {
	for _, beside := range []bool{false, true} {
		origin := &failingOrigin{}
		l := newBesideLab(t, beside, origin)
		p := l.pageHomedAtH("/e/")
		want := l.ask(l.x, p) // X holds the page
		if want.Code != 200 {
			t.Fatalf("filling X: %d", want.Code)
		}
		origin.failing.Store(true)
		hold := func(r *http.Request) {
			if r.Header.Get(hdrMode) == hopProbe.String() {
				time.Sleep(300 * time.Millisecond) // X's hit comes after the climb failed
			}
		}
		l.x.hold.Store(&hold)
		w := l.ask(l.a, p)
		if w.Code != 200 || w.Body.String() != want.Body.String() {
			t.Errorf("beside=%v: A answered %d %q although X's negative probe hit (want X's %q); races climb=%v negative=%v",
				beside, w.Code, w.Body.String(), want.Body.String(), l.races("climb"), l.races("negative_probe"))
		}
	}
}

// A negative hit that has already arrived is served while a positive probe
// is still out (found by the hostile review of the race: beside the climb
// it waited for the slow positive).
func TestReviewNegativeHitWaitsForSlowPositive(t *testing.T) {
	for _, beside := range []bool{false, true} {
		l := newBesideLab(t, beside, userOrigin{})
		l.a.c.cfg.ProbeFirstHop = true // so that H is probed, positively indicated
		p := l.pageHomedAtH("/public/s")
		want := l.ask(l.x, p)
		if want.Code != 200 {
			t.Fatalf("filling X: %d", want.Code)
		}
		if w := l.ask(l.h, p); w.Code != 200 { // H holds it too: positively indicated at A
			t.Fatalf("filling H: %d", w.Code)
		}
		l.h.c.advertise()
		if err := l.a.c.peers["H"].replica.Apply(l.h.c.advFull); err != nil {
			t.Fatal(err)
		}
		l.a.c.peers["H"].replica.SetEstimates(0.05, 0.01)
		for i := range 400 {
			l.a.c.peers["H"].replica.Count(i%2 == 0, true)
		}
		holdH := func(r *http.Request) {
			if r.Header.Get(hdrMode) == hopProbe.String() {
				time.Sleep(1200 * time.Millisecond) // a slow positive hit (within the 2 s header timeout)
			}
		}
		l.h.hold.Store(&holdH)
		probesH := func() float64 {
			return testutilProbes(l, "positive")
		}
		before := probesH()
		start := time.Now()
		w := l.ask(l.a, p)
		d := time.Since(start)
		if testutil.ToFloat64(l.a.c.metrics.NegativeProbes.WithLabelValues("X", "hit")) == 0 {
			t.Fatalf("beside=%v: X not probed", beside)
		}
		if w.Code != 200 {
			t.Fatalf("beside=%v: %d %q", beside, w.Code, w.Body.String())
		}
		t.Logf("beside=%v: X's hit served after %v", beside, d)
		if d > time.Second {
			t.Errorf("beside=%v: X's negative hit (immediate) was served only after %v: it waited for the slow positive H", beside, d)
		}
		// H's slow answer is recorded when it comes (after the winner).
		eventually(t, 5*time.Second, "H probed positively", func() bool { return probesH() > before })
		l.h.hold.Store(nil)
	}
}

func testutilProbes(l *besideLab, ind string) float64 {
	var n float64
	for _, o := range probeOutcomes {
		n += testutil.ToFloat64(l.a.c.metrics.Probes.WithLabelValues(ind, o))
	}
	return n
}

func keyOf(n *realNode, raw string) string { u, _ := url.Parse(raw); return n.ph.URLKey(u) }

// The client goes away mid-race: Fetch returns promptly and every peer
// request of A ends (no waiting entry left behind).
func TestReviewClientCancelMidRace(t *testing.T) {
	origin := &heldOrigin{open: make(chan struct{})}
	l := newBesideLab(t, true, origin)
	p := l.pageHomedAtH("/c/")
	if w := l.ask(l.x, p); w.Code != 200 {
		t.Fatal(w.Code)
	}
	origin.shut.Store(true)
	defer close(origin.open)
	hold := func(r *http.Request) {
		if r.Header.Get(hdrMode) == hopProbe.String() {
			select {
			case <-r.Context().Done():
			case <-time.After(1500 * time.Millisecond):
			}
		}
	}
	l.x.hold.Store(&hold)
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(150*time.Millisecond, cancel)
	r, _ := http.NewRequestWithContext(ctx, "GET", "http://site.example"+p, nil)
	start := time.Now()
	res, err := l.a.c.Fetch(ctx, proxy.FetchRequest{Key: keyOf(l.a, "http://site.example"+p), Req: r})
	t.Logf("after %v: err %v res %v", time.Since(start), err, res.Resp != nil)
	if err == nil {
		res.Resp.Body.Close()
	}
	eventually(t, 3*time.Second, "A's peer requests end", func() bool {
		l.a.c.mu.Lock()
		defer l.a.c.mu.Unlock()
		n := 0
		for _, p := range l.a.c.peers {
			n += len(p.waiting)
		}
		return n == 0
	})
}
