package cluster

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/edgecache/edge/indicators"
	"github.com/edgecache/edge/proxy"
	"github.com/edgecache/edge/routing"
)

// besideLab is the two-region cluster of the negative-probe leak test: A
// and H in eu, X in us, regional homes. A runs fna-learned and has learnt
// that X's negatives hit, so every miss at A probes X despite X's "no".
type besideLab struct {
	t       *testing.T
	a, h, x *realNode
}

func newBesideLab(t *testing.T, beside bool, origin proxy.Fetcher) *besideLab {
	nodes := startRealNodes(t, []string{"A", "H", "X"}, routing.ModeHybrid, 2, 2*time.Second, origin)
	placeInRegions(nodes, map[string]string{"A": "eu", "H": "eu", "X": "us"})
	a := nodes["A"]
	a.c.cfg.Selection = SelectionFNALearned
	a.c.cfg.NegativeProbesBesideClimb = beside
	// X's learned ν is small (its negatives hit), so by default it would be
	// waited for: these tests race every negative (the threshold has its
	// own test).
	a.c.raceAbove = 0
	x := a.c.peers["X"]
	x.replica.SetEstimates(0.001, 0.3)
	for range 200 {
		x.replica.ObserveHomeNegativeProbe(0.999, true)
	}
	return &besideLab{t: t, a: a, h: nodes["H"], x: nodes["X"]}
}

// placeInRegions gives each node its region (by id) and regional homes,
// and tells every node its peers' regions.
func placeInRegions(nodes map[string]*realNode, region map[string]string) {
	for id, n := range nodes {
		n.c.cfg.Region, n.c.cfg.RegionalHomes = region[id], true
		n.c.mu.Lock()
		for pid, p := range n.c.peers {
			p.region = region[pid]
		}
		n.c.mu.Unlock()
	}
}

// pageHomedAtH is a page whose eu home is H, so that A's climb asks H.
func (l *besideLab) pageHomedAtH(prefix string) string {
	for i := range 1000 {
		p := prefix + strconv.Itoa(i)
		for _, id := range rankingOf(l.a, p) {
			if id == "H" {
				return p
			}
			if id == "A" {
				break
			}
		}
	}
	l.t.Fatal("no page homed at H in 1000")
	return ""
}

func (l *besideLab) ask(n *realNode, p string) *httptest.ResponseRecorder {
	r := httptest.NewRequest("GET", "http://site.example"+p, nil)
	w := httptest.NewRecorder()
	n.ph.ServeHTTP(w, r)
	n.ph.Wait()
	return w
}

func (l *besideLab) races(winner string) float64 {
	return testutil.ToFloat64(l.a.c.metrics.BesideClimb.WithLabelValues(winner))
}

func (l *besideLab) negativeProbes() float64 {
	m := l.a.c.metrics.NegativeProbes
	return testutil.ToFloat64(m.WithLabelValues("X", "hit")) + testutil.ToFloat64(m.WithLabelValues("X", "miss"))
}

// TestClimbDoesNotWaitForANegativeProbe: the page is at its home H; the
// negative probe to X is held at X. Beside the climb, A answers from H
// while X's answer is still held, and records X's answer when it comes (a
// sample fna-learned learns from); before the climb, A waits for it.
func TestClimbDoesNotWaitForANegativeProbe(t *testing.T) {
	for _, beside := range []bool{true, false} {
		l := newBesideLab(t, beside, userOrigin{})
		p := l.pageHomedAtH("/public/")
		if w := l.ask(l.h, p); w.Code != 200 {
			t.Fatalf("filling H: %d", w.Code)
		}
		released := holdProbes(300*time.Millisecond, l.x)
		w := l.ask(l.a, p)
		answeredHeld := !released.Load()
		if w.Code != 200 || !strings.Contains(w.Body.String(), "for ") {
			t.Fatalf("beside %v: %d %q", beside, w.Code, w.Body.String())
		}
		if beside != answeredHeld {
			t.Errorf("beside %v: answered while X's probe was held: %v", beside, answeredHeld)
		}
		if beside && l.races("climb") != 1 {
			t.Errorf("races won by the climb: %v, want 1", l.races("climb"))
		}
		eventually(t, 5*time.Second, "X's probe answer recorded", func() bool { return l.negativeProbes() == 1 })
	}
}

// holdProbes holds every probe the nodes get for d, and reports when it
// has let them go.
func holdProbes(d time.Duration, nodes ...*realNode) *atomic.Bool {
	released := &atomic.Bool{}
	release := make(chan struct{})
	hold := func(r *http.Request) {
		if r.Header.Get(hdrMode) == hopProbe.String() {
			<-release
		}
	}
	for _, n := range nodes {
		n.hold.Store(&hold)
	}
	go func() {
		time.Sleep(d)
		released.Store(true)
		close(release)
	}()
	return released
}

// heldOrigin holds every fetch while shut (until its context ends).
type heldOrigin struct {
	shut    atomic.Bool
	open    chan struct{}
	fetches atomic.Int64
}

func (o *heldOrigin) Fetch(ctx context.Context, fr proxy.FetchRequest) (proxy.Result, error) {
	if o.shut.Load() {
		o.fetches.Add(1)
		select {
		case <-o.open:
		case <-time.After(10 * time.Second): // a test that failed to race ends
		case <-ctx.Done():
			return proxy.Result{}, ctx.Err()
		}
	}
	h := http.Header{"Cache-Control": {"public, max-age=600"}, "Content-Type": {"text/plain"}}
	body := "page " + fr.Req.URL.Path
	return proxy.Result{Resp: &http.Response{StatusCode: 200, Header: h, Body: io.NopCloser(strings.NewReader(body)), ContentLength: int64(len(body))}, Keep: true}, nil
}

// TestNegativeProbeHitOvertakesTheClimb: the page is at X only, and the
// origin is held. Beside the climb, X's negative-probe hit answers the
// request while the climb (A → H → origin) still waits, and the climb is
// cancelled: H's request from A ends.
func TestNegativeProbeHitOvertakesTheClimb(t *testing.T) {
	origin := &heldOrigin{open: make(chan struct{})}
	l := newBesideLab(t, true, origin)
	p := l.pageHomedAtH("/o/")
	want := l.ask(l.x, p)
	if want.Code != 200 {
		t.Fatalf("filling X: %d", want.Code)
	}
	origin.shut.Store(true)
	defer close(origin.open)
	// X answers its probe only once the climb has reached H, so the race
	// is run whatever the scheduling.
	climbs := make(chan context.Context, 4)
	atH := make(chan struct{})
	var once atomic.Bool
	holdH := func(r *http.Request) {
		if r.Header.Get(hdrMode) == hopClimb.String() {
			climbs <- r.Context()
			if once.CompareAndSwap(false, true) {
				close(atH)
			}
		}
	}
	l.h.hold.Store(&holdH)
	holdX := func(r *http.Request) {
		if r.Header.Get(hdrMode) == hopProbe.String() {
			select {
			case <-atH:
			case <-time.After(5 * time.Second):
			}
		}
	}
	l.x.hold.Store(&holdX)
	w := l.ask(l.a, p)
	if w.Code != 200 || w.Body.String() != want.Body.String() {
		t.Fatalf("A answered %d %q, want X's %q", w.Code, w.Body.String(), want.Body.String())
	}
	if n := l.races("negative_probe"); n != 1 {
		t.Errorf("races won by a negative probe: %v, want 1", n)
	}
	select {
	case ctx := <-climbs:
		select {
		case <-ctx.Done():
		case <-time.After(5 * time.Second):
			t.Error("the climb's request to H was not cancelled after X answered")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("A's climb never reached H: the race was not run")
	}
}

// TestNegativeHitWithABrokenBodyCountsAsClimb: X's negative probe hits
// first, but its body breaks before A has it whole, so A climbs again and
// serves the climb's answer. The race is counted as the climb's: the
// client's page came from the climb, not from the negative probe.
func TestNegativeHitWithABrokenBodyCountsAsClimb(t *testing.T) {
	origin := &heldOrigin{open: make(chan struct{})}
	l := newBesideLab(t, true, origin)
	l.a.c.cfg.PeerWholeBytes = DefaultConfig().PeerWholeBytes // read whole: a broken body is a failed hop
	p := l.pageHomedAtH("/b/")
	want := l.ask(l.x, p)
	if want.Code != 200 {
		t.Fatalf("filling X: %d", want.Code)
	}
	// A climb that reaches H before X's answer has been cut is held until
	// A cancels it, so the negative hit comes first whatever the
	// scheduling (a hostile review: released when X merely received its
	// probe, the climb often won and the old counting passed 2 runs in 5).
	// One that comes after the cut (A climbing again) goes on.
	cut := make(chan struct{})
	var once sync.Once
	onCut := func() { once.Do(func() { close(cut) }) }
	l.x.onCut.Store(&onCut)
	l.x.cutProbes.Store(true)
	holdH := func(r *http.Request) {
		if r.Header.Get(hdrMode) == hopClimb.String() {
			select {
			case <-r.Context().Done():
			case <-cut:
			case <-time.After(5 * time.Second):
			}
		}
	}
	l.h.hold.Store(&holdH)
	w := l.ask(l.a, p)
	if w.Code != 200 || w.Body.String() != want.Body.String() {
		t.Fatalf("A answered %d %q, want the page %q", w.Code, w.Body.String(), want.Body.String())
	}
	if n := l.races("negative_probe"); n != 0 {
		t.Errorf("races won by a negative probe: %v, want 0 (its body broke)", n)
	}
	if n := l.races("climb"); n != 1 {
		t.Errorf("races won by the climb: %v, want 1", n)
	}
}

// TestOnlyUnlikelyNegativesRace: a negative that more likely hits (ρ
// below ½) is waited for like a positive; one that more likely misses
// races the climb; positives never race.
func TestOnlyUnlikelyNegativesRace(t *testing.T) {
	cs := candidateSet{negative: 0b0110}
	for _, rho := range []float64{0.01, 0.05, 0.7, 0.9} {
		cs.cands = append(cs.cands, indicators.Candidate{Cost: 1, Rho: rho})
	}
	// 0: positive, ρ 0.01; 1: negative, 0.05; 2: negative, 0.7; 3: positive, 0.9.
	if got := cs.unlikelyNegatives(raceAbove); got != 0b0100 {
		t.Errorf("raced %04b, want 0100", got)
	}
	if got := cs.unlikelyNegatives(0); got != 0b0110 {
		t.Errorf("threshold 0 raced %04b, want every negative, 0110", got)
	}
}
