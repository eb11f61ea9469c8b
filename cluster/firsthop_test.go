package cluster

import (
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/edgecache/edge/proxy"
)

func (l *besideLab) firstHopProbes(outcome string) float64 {
	return testutil.ToFloat64(l.a.c.metrics.FirstHopProbes.WithLabelValues(outcome))
}

// TestFirstHopAnswersBesideAFarProbe: H, A's first hop, holds the page, and
// X (across the ocean, positively indicated) holds it too, its probe held
// for 1.5 s. With the first hop beside the probes A answers from H while
// X's probe is still held; without, A waits for X's answer first (the
// observation that made the option: the median request of the two-region
// lab took a cross-region round trip with fno, a regional one with off).
func TestFirstHopAnswersBesideAFarProbe(t *testing.T) {
	for _, with := range []bool{true, false} {
		l := newBesideLab(t, false, userOrigin{})
		p := l.pageHomedAtH("/public/fh")
		newFirstHopLabOn(t, l, p, with)
		if w := l.ask(l.h, p); w.Code != 200 {
			t.Fatalf("filling H: %d", w.Code)
		}
		released := holdProbes(1500*time.Millisecond, l.x)
		w := l.ask(l.a, p)
		answeredHeld := !released.Load()
		if w.Code != 200 || !strings.Contains(w.Body.String(), "for ") {
			t.Fatalf("with=%v: %d %q", with, w.Code, w.Body.String())
		}
		if answeredHeld != with {
			t.Errorf("with=%v: answered while X's probe was held: %v", with, answeredHeld)
		}
		want := map[bool]float64{true: 1, false: 0}[with]
		if got := l.firstHopProbes("hit"); got != want {
			t.Errorf("with=%v: first-hop hits %v, want %v", with, got, want)
		}
		if st := l.a.c.ProbeRaces(); st.FirstHopWithProbes != with || float64(st.FirstHopHits) != want || float64(st.FirstHopAsked) != want {
			t.Errorf("with=%v: the status page's first hop: %+v", with, st)
		}
		// After the request: the explorer prices X with what it taught.
		if e, err := l.a.c.Explain("http://site.example"+p, nil); err != nil {
			t.Fatal(err)
		} else if want := map[bool]string{true: "H", false: ""}[with]; e.FirstHopWithProbes != want {
			t.Errorf("with=%v: the route explorer's first_hop_with_probes %q, want %q", with, e.FirstHopWithProbes, want)
		}
		// X's answer is recorded when it comes, as a positive probe's.
		eventually(t, 5*time.Second, "X's probe recorded", func() bool { return testutilProbes(l, "positive") == 1 })
	}
}

// TestFirstHopSlowDoesNotHoldTheClimb: X is positively indicated but its
// copy was purged (a false positive), and H's probe is held. Once X has
// missed, A climbs (to H: the climb is no probe, so it is not held)
// without waiting for H's probe answer, which is recorded when it comes.
func TestFirstHopSlowDoesNotHoldTheClimb(t *testing.T) {
	l := newBesideLab(t, false, userOrigin{})
	p := l.pageHomedAtH("/public/slow")
	newFirstHopLabOn(t, l, p, true)
	if _, err := l.x.ph.Purge(proxy.PurgeRequest{URL: "http://site.example" + p}); err != nil {
		t.Fatal(err)
	}
	released := holdProbes(1500*time.Millisecond, l.h)
	w := l.ask(l.a, p)
	answeredHeld := !released.Load()
	if w.Code != 200 {
		t.Fatalf("%d %q", w.Code, w.Body.String())
	}
	if !answeredHeld {
		t.Error("A waited for H's held probe after X missed, before climbing to H")
	}
	if got := testutil.ToFloat64(l.a.c.metrics.Probes.WithLabelValues("positive", "miss")); got != 1 {
		t.Errorf("X's false positive: %v positive misses, want 1", got)
	}
	eventually(t, 5*time.Second, "H's probe answer recorded", func() bool {
		return l.a.c.ProbeRaces().FirstHopAsked == 1
	})
}

// newFirstHopLabOn puts A on fno with the first hop beside the probes or
// not, and has X hold p, positively indicated for it at A.
func newFirstHopLabOn(t *testing.T, l *besideLab, p string, with bool) {
	l.a.c.cfg.Selection = SelectionFNO
	l.a.c.cfg.FirstHopWithProbes = with
	if w := l.ask(l.x, p); w.Code != 200 {
		t.Fatalf("filling X: %d", w.Code)
	}
	l.indicateX()
}

// indicateX gives A X's current indicator, as an advertisement would.
func (l *besideLab) indicateX() {
	l.x.c.advertise()
	if err := l.a.c.peers["X"].replica.Apply(l.x.c.advFull); err != nil {
		l.t.Fatal(err)
	}
}

// TestFirstHopProbeNeverLeaksBetweenUsers: the first hop's probe hands H's
// stored answer to another user's request, so it must hold to what every
// probe holds to. User a's answers for private, Set-Cookie, Vary: Cookie
// and authorised pages are at H (and X, positively indicated, so that A
// probes); user b then asks A for each. b must get b's own answer, never
// a's, and never a's cookie.
// askAsUser asks n for page p as user: with an Authorization of the
// user's for the "auth" kind of userOrigin's pages, a Cookie naming the
// user otherwise; it waits for n's background work.
func askAsUser(n *realNode, p, kind, user string) *httptest.ResponseRecorder {
	r := httptest.NewRequest("GET", "http://site.example"+p, nil)
	if kind == "auth" {
		r.Header.Set("Authorization", "Bearer "+user)
	} else {
		r.Header.Set("Cookie", "u="+user)
	}
	w := httptest.NewRecorder()
	n.ph.ServeHTTP(w, r)
	n.ph.Wait()
	return w
}

func TestFirstHopProbeNeverLeaksBetweenUsers(t *testing.T) {
	l := newBesideLab(t, false, userOrigin{})
	for _, kind := range []string{"private", "setcookie", "vary", "auth"} {
		p := l.pageHomedAtH("/" + kind + "/fh")
		newFirstHopLabOn(t, l, p, true)
		askAs := func(n *realNode, user string) *httptest.ResponseRecorder { return askAsUser(n, p, kind, user) }
		for _, n := range []*realNode{l.h, l.x} {
			if w := askAs(n, "a"); w.Code != 200 {
				t.Fatalf("%s: filling %s as a: %d", kind, n.id, w.Code)
			}
		}
		l.indicateX()
		w := askAs(l.a, "b")
		body := w.Body.String()
		if strings.Contains(body, "u=a") || strings.Contains(body, "Bearer a") {
			t.Errorf("%s: user b got user a's answer %q", kind, body)
		}
		if !strings.Contains(body, "b") {
			t.Errorf("%s: user b got %q, not its own answer", kind, body)
		}
		for _, c := range w.Result().Header.Values("Set-Cookie") {
			if strings.Contains(c, "u=a") {
				t.Errorf("%s: user b got user a's cookie %q", kind, c)
			}
		}
	}
	// A first-hop hit is no leak by itself: the request does not wait for
	// the first hop once the others missed, so on a busy machine H may
	// answer the probe after the climb stored b's own variant there. The
	// bodies and cookies above are what must never be a's.
	if l.a.c.ProbeRaces().FirstHopAsked == 0 {
		t.Error("the first hop was never asked: the test tests nothing")
	}
}
