package cluster

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/edgecache/edge/proxy"
)

// originGate holds every fetch of the origin it wraps while shut: an
// origin slow to answer, not down.
type originGate struct {
	inner proxy.Fetcher
	mu    sync.Mutex
	ch    chan struct{} // nil: open
}

func (g *originGate) shut() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.ch == nil {
		g.ch = make(chan struct{})
	}
}

func (g *originGate) open() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.ch != nil {
		close(g.ch)
		g.ch = nil
	}
}

func (g *originGate) Fetch(ctx context.Context, fr proxy.FetchRequest) (proxy.Result, error) {
	g.mu.Lock()
	ch := g.ch
	g.mu.Unlock()
	if ch != nil {
		select {
		case <-ch:
		case <-ctx.Done():
			return proxy.Result{}, ctx.Err()
		}
	}
	return g.inner.Fetch(ctx, fr)
}

// askWhileHeld shuts gate, asks, and returns the answer given while the
// origin is held; ok is false if none came in 30 s (the gate is then
// opened: the request waited for the origin).
func askWhileHeld[T any](gate *originGate, ask func() T) (ans T, ok bool) {
	gate.shut()
	answered := make(chan T, 1)
	go func() { answered <- ask() }()
	select {
	case ans = <-answered:
		return ans, true
	case <-time.After(30 * time.Second):
		gate.open()
		return <-answered, false
	}
}

// askLettingGo shuts gate, asks, lets the origin go if no answer came in
// a moment (the request waits for its climb) and returns the answer. The
// moment bounds nothing: an answer before or after it is judged the same.
func askLettingGo[T any](gate *originGate, ask func() T) T {
	gate.shut()
	answered := make(chan T, 1)
	go func() { answered <- ask() }()
	select {
	case ans := <-answered:
		return ans
	case <-time.After(500 * time.Millisecond):
		gate.open()
		return <-answered
	}
}

// firstHopFirst orders the next request's probes as a near home and a far
// peer answer: X's next probe waits until A has counted the first hop's
// probe answer (edge_peer_first_hop_probes_total), the order in which
// mayServeStaleEarly learns that the first hop holds no fresh copy. Only
// X's first probe after each call waits (not the stale copy asked again);
// then holds, if any, runs too. A 30 s deadline keeps a test from hanging.
func (l *besideLab) firstHopFirst(then func(*http.Request)) {
	answers := func() float64 {
		var n float64
		for _, o := range probeOutcomes {
			n += testutil.ToFloat64(l.a.c.metrics.FirstHopProbes.WithLabelValues(o))
		}
		return n
	}
	base := answers()
	var armed atomic.Bool
	armed.Store(true)
	hold := func(r *http.Request) {
		if r.Header.Get(hdrMode) == hopProbe.String() && armed.CompareAndSwap(true, false) {
			for deadline := time.Now().Add(30 * time.Second); answers() <= base && time.Now().Before(deadline); {
				time.Sleep(time.Millisecond)
			}
		}
		if then != nil {
			then(r)
		}
	}
	l.x.hold.Store(&hold)
}

// newStaleClimbLab is newBesideLab over an s45SWROrigin behind a gate
// (opened at cleanup), with cluster.stale_while_climbing on at A.
func newStaleClimbLab(t *testing.T, beside bool) (*besideLab, *s45SWROrigin, *originGate) {
	swr := &s45SWROrigin{}
	gate := &originGate{inner: swr}
	t.Cleanup(gate.open)
	l := newBesideLab(t, beside, gate)
	l.a.c.cfg.StaleWhileClimbing = true
	return l, swr, gate
}

func (l *besideLab) staleFallbacks(outcome string) float64 {
	return testutil.ToFloat64(l.a.c.metrics.StaleFallbacks.WithLabelValues(outcome))
}

// TestStaleWhileClimbingServesTheStaleCopyFirst: X holds a page gone
// stale within its stale-while-revalidate window, H (the page's home, A's
// first hop) no longer holds it, and the origin is slow. A single cache
// holding X's copy would serve it at once and refresh it in the
// background; A serves it while its climb is still waiting on the
// origin, and the climb, running on, leaves H holding the page fresh.
//
// Only when H, asked with the probes, said it has no fresh copy: with the
// first hop not asked (firstHop false), or no probe waited for (beside:
// X negatively indicated, its probe racing the climb), H might answer the
// climb fresh a moment later, so A waits for the climb (a review's
// TestS50APeerRefreshLeavesTheNextRequestRacingTheSameStaleCopy).
func TestStaleWhileClimbingServesTheStaleCopyFirst(t *testing.T) {
	for _, c := range []struct{ beside, firstHop, early bool }{{false, true, true}, {false, false, false}, {true, false, false}} {
		beside, firstHop := c.beside, c.firstHop
		l, swr, gate := newStaleClimbLab(t, beside)
		p := l.pageHomedAtH("/public/swc")
		if beside {
			if w := l.ask(l.x, p); w.Code != 200 { // X holds p ("v1"), negatively indicated at A
				t.Fatalf("filling X: %d", w.Code)
			}
		} else {
			newFirstHopLabOn(t, l, p, firstHop) // X holds p ("v1"), positively indicated at A
		}
		if _, err := l.h.ph.Purge(proxy.PurgeRequest{URL: "http://site.example" + p}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(2100 * time.Millisecond) // X's copy (max-age=1) is stale now, within its window
		before := swr.n.Load()
		ask := func() *httptest.ResponseRecorder { return l.ask(l.a, p) }
		var w *httptest.ResponseRecorder
		if firstHop {
			l.firstHopFirst(nil)
		}
		if c.early {
			var ok bool
			if w, ok = askWhileHeld(gate, ask); !ok {
				t.Fatalf("beside=%v firstHop=%v: A waited for the origin (held for 30 s) with X's stale copy at hand", beside, firstHop)
			}
		} else {
			w = askLettingGo(gate, ask) // A waits for the climb
		}
		want, wantEarly := "v1", 1.0
		if !c.early {
			want, wantEarly = "v2", 0
		}
		if w.Code != 200 || w.Body.String() != want {
			t.Fatalf("beside=%v firstHop=%v: A answered %d %q, want %q", beside, firstHop, w.Code, w.Body.String(), want)
		}
		if got := l.staleFallbacks("served_early"); got != wantEarly {
			t.Errorf("beside=%v firstHop=%v: served_early counted %v, want %v", beside, firstHop, got, wantEarly)
		}
		if st := l.a.c.ProbeRaces(); float64(st.StaleServedEarly) != wantEarly || !st.StaleWhileClimbing {
			t.Errorf("beside=%v firstHop=%v: status: stale_served_while_climbing %d (on: %v), want %v", beside, firstHop, st.StaleServedEarly, st.StaleWhileClimbing, wantEarly)
		}
		// The climb runs on: H fetches the page afresh and keeps it.
		gate.open()
		deadline := time.Now().Add(30 * time.Second)
		for swr.n.Load() == before && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		l.h.ph.Wait()
		if got := swr.n.Load() - before; got != 1 {
			t.Errorf("beside=%v firstHop=%v: the origin was asked %d times by the climb, want 1", beside, firstHop, got)
		}
		if w := l.ask(l.h, p); w.Body.String() != "v2" || !strings.Contains(strings.Join(w.Result().Header.Values("Cache-Status"), ","), "hit") {
			t.Errorf("beside=%v firstHop=%v: H answered %q (Cache-Status %q), want its fresh v2 from its store", beside, firstHop, w.Body.String(), w.Result().Header.Values("Cache-Status"))
		}
	}
}

// TestStaleWhileClimbingTakesAClimbThatAnswersFirst: the same, but X is
// slow to answer again and the origin is not: the climb's fresh answer is
// served, and X's stale copy is not.
func TestStaleWhileClimbingTakesAClimbThatAnswersFirst(t *testing.T) {
	swr := &s45SWROrigin{}
	l := newBesideLab(t, false, swr)
	l.a.c.cfg.StaleWhileClimbing = true
	p := l.pageHomedAtH("/public/swc-climb")
	newFirstHopLabOn(t, l, p, true)
	if _, err := l.h.ph.Purge(proxy.PurgeRequest{URL: "http://site.example" + p}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2100 * time.Millisecond)
	// X answers its first probe (stale) and holds every later one.
	held := make(chan struct{})
	var heldOnce sync.Once
	release := func() { heldOnce.Do(func() { close(held) }) }
	t.Cleanup(release)
	var probes atomic.Int64
	l.firstHopFirst(func(r *http.Request) {
		if r.Header.Get(hdrMode) == hopProbe.String() && probes.Add(1) > 1 {
			<-held
		}
	})
	// H answers the climb once X has the stale copy's second asking: on a
	// loaded machine the climb could otherwise end before that asking was
	// sent (a clean-clone run with two busy loops found X asked once),
	// and the race this test stages would not have been run.
	holdH := func(r *http.Request) {
		if r.Header.Get(hdrMode) == hopClimb.String() {
			for deadline := time.Now().Add(30 * time.Second); probes.Load() < 2 && time.Now().Before(deadline); {
				time.Sleep(time.Millisecond)
			}
		}
	}
	l.h.hold.Store(&holdH)
	w := l.ask(l.a, p)
	release()
	if w.Code != 200 || w.Body.String() != "v2" {
		t.Fatalf("A answered %d %q, want the climb's fresh v2", w.Code, w.Body.String())
	}
	if got := l.staleFallbacks("climb_first"); got != 1 {
		t.Errorf("climb_first counted %v, want 1 (served_early %v)", got, l.staleFallbacks("served_early"))
	}
	if n := probes.Load(); n < 2 {
		t.Errorf("X was asked %d times, want its probe and the stale copy asked again", n)
	}
}

// TestStaleWhileClimbingNeverLeaksBetweenUsers: served while the climb is
// out, a peer's stored answer goes to another request, so it must hold to
// what every probe holds to. User a's private, Set-Cookie, Vary: Cookie
// and authorised pages are at X, stale within their window; the origin is
// slow; user b asks A. b gets b's own answer once the origin answers,
// never a's answer or cookie; the public page's stale copy is served at
// once where a stale copy may answer early (the first hop asked with
// waited-for probes), and, beside, the climb's answer.
func TestStaleWhileClimbingNeverLeaksBetweenUsers(t *testing.T) {
	for _, beside := range []bool{true, false} {
		origin := &s47UserSWROrigin{}
		gate := &originGate{inner: origin}
		t.Cleanup(gate.open)
		l := newBesideLab(t, beside, gate)
		l.a.c.cfg.StaleWhileClimbing = true
		// Waited-for probes (not beside) with the first hop asked: the
		// one setting where a stale copy may answer early.
		l.a.c.cfg.FirstHopWithProbes = !beside
		early := !beside
		for _, kind := range []string{"public", "private", "setcookie", "vary", "auth"} {
			gate.open()
			p := l.userPageStaleAtX("/"+kind+"/swc", kind, beside)
			if early {
				l.firstHopFirst(nil)
			}
			ask := func() *http.Response { return askAsUser(l.a, p, kind, "b").Result() }
			var r *http.Response
			if kind == "public" && early {
				// X's copy is everyone's: served before the origin answers.
				var ok bool
				if r, ok = askWhileHeld(gate, ask); !ok {
					t.Fatalf("beside=%v: the public page's stale copy at X was not served while the origin was held", beside)
				}
			} else {
				// Nothing at X is b's: A's climb is the answer, once the
				// origin gives it.
				r = askLettingGo(gate, ask)
			}
			gate.open()
			b, _ := io.ReadAll(r.Body)
			t.Logf("beside=%v %s: b got %d %q", beside, kind, r.StatusCode, b)
			if kind != "public" && (strings.Contains(string(b), "u=a") || strings.Contains(string(b), "Bearer a")) || strings.Contains(strings.Join(r.Header.Values("Set-Cookie"), ";"), "u=a") {
				t.Errorf("beside=%v %s: user b got user a's answer %q (Set-Cookie %q)", beside, kind, b, r.Header.Values("Set-Cookie"))
			}
			if kind == "public" && early && (r.StatusCode != 200 || !strings.Contains(string(b), "#1")) {
				t.Errorf("beside=%v: the public page's stale copy at X was not served: %d %q", beside, r.StatusCode, b)
			}
			l.h.ph.Wait()
			l.a.ph.Wait()
		}
	}
}
