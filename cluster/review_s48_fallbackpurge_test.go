package cluster

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/edgecache/edge/proxy"
)

// TestS48StaleFallbackServesAPagePurgedWhileTheClimbWasOut: A's request
// probes X, which answers the page stale (no win), and climbs to H. While
// the climb is out, an operator purges the page at A. The round reaches H
// but not X ("aborted": X's purge request fails, so A owes X the purge;
// "suspected": A suspects X, so it is owed at once), and Purge returns:
// A owes X the purge, and by purgeowed.go does not ask X again until it has
// delivered it. The origin is down, so the climb fails, and the fallback
// asks X again (cs.peers, chosen before the purge) with no regard for the
// owed purge or trust: X, never purged, answers the purged page, and A
// serves it after the operator's purge has returned. "took" (X takes the
// purge) is the control: X answers 504 and nothing is served.
func TestS48StaleFallbackServesAPagePurgedWhileTheClimbWasOut(t *testing.T) {
	for _, mode := range []string{"took", "aborted", "suspected"} {
		t.Run(mode, func(t *testing.T) {
			origin := &downableOrigin{}
			l := newBesideLab(t, false, origin)
			p := l.pageHomedAtH("/public/s48purge")
			newFirstHopLabOn(t, l, p, false)    // X holds p (body "... #1"), positively indicated at A
			time.Sleep(1100 * time.Millisecond) // stale at X, within its SWR window
			origin.down.Store(true)

			gate := make(chan struct{})
			var once sync.Once
			open := func() { once.Do(func() { close(gate) }) }
			t.Cleanup(open)
			climbAtH := make(chan struct{}, 1)
			holdH := func(r *http.Request) {
				if r.Header.Get(hdrMode) == hopClimb.String() {
					select {
					case climbAtH <- struct{}{}:
					default:
					}
					<-gate
				}
			}
			l.h.hold.Store(&holdH)
			if mode == "aborted" {
				abortPurge := func(r *http.Request) {
					if strings.HasPrefix(r.URL.Path, "/_edge/purge") {
						panic(http.ErrAbortHandler)
					}
				}
				l.x.hold.Store(&abortPurge)
			}

			type answer struct {
				code int
				body string
				cs   []string
			}
			done := make(chan answer, 1)
			go func() {
				r := httptest.NewRequest("GET", "http://site.example"+p, nil)
				r.Header.Set("Cookie", "u=b")
				w := httptest.NewRecorder()
				l.a.ph.ServeHTTP(w, r)
				l.a.ph.Wait()
				done <- answer{w.Code, w.Body.String(), w.Result().Header.Values("Cache-Status")}
			}()
			select {
			case <-climbAtH:
			case <-time.After(20 * time.Second):
				t.Fatal("A's request never climbed to H")
			}
			if testutil.ToFloat64(l.a.c.metrics.Probes.WithLabelValues("positive", "stale")) != 1 {
				t.Fatalf("X's probe was not answered stale")
			}
			if mode == "suspected" {
				setTrusted(l.a, "X", false)
			}
			_, fan, err := l.a.c.Purge(context.Background(), proxy.PurgeRequest{URL: "http://site.example" + p}, l.a.ph.Purge)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%s: purge round: %+v; A owes X %d", mode, fan, l.a.c.owed.owedTo("X"))
			if mode != "took" && l.a.c.owed.owedTo("X") == 0 {
				t.Fatalf("%s: the purge is not owed to X (setup)", mode)
			}
			open()
			var a answer
			select {
			case a = <-done:
			case <-time.After(30 * time.Second):
				t.Fatal("A's request never answered")
			}
			t.Logf("%s: A answered %d %q (Cache-Status %q); fallbacks served %v none %v", mode, a.code, a.body, a.cs,
				testutil.ToFloat64(l.a.c.metrics.StaleFallbacks.WithLabelValues("served")),
				testutil.ToFloat64(l.a.c.metrics.StaleFallbacks.WithLabelValues("none")))
			if a.code == 200 && strings.Contains(a.body, "#1") {
				t.Errorf("%s: after the operator's purge of %s returned (X owed it), A served the purged page %q through the stale fallback", mode, p, a.body)
			}
			// Nothing of the purged page may be left at A either.
			l.a.hold.Store(nil)
			if w := l.ask(l.a, p); w.Code == 200 && strings.Contains(w.Body.String(), "#1") && mode == "took" {
				t.Errorf("%s: A's next request got the purged page %q", mode, w.Body.String())
			}
		})
	}
}
