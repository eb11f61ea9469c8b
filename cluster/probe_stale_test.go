package cluster

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/edgecache/edge/proxy"
)

// TestStaleProbeAnswerIsNoWin: X, positively indicated at A and not on
// A's climb, holds a page gone stale within its stale-while-revalidate
// window; H, the page's home and A's first hop, no longer holds it. X's
// probe answers the stale copy (only-if-cached never refreshes). Served
// from there, the copy would stay stale at X for the whole window, and
// every request that probes X would get it. A must climb instead (to H,
// which fetches it afresh), and count X's answer stale.
func TestStaleProbeAnswerIsNoWin(t *testing.T) {
	for _, firstHop := range []bool{false, true} {
		origin := &s45SWROrigin{}
		l := newBesideLab(t, false, origin)
		p := l.pageHomedAtH("/public/swr-x")
		newFirstHopLabOn(t, l, p, firstHop) // X holds p ("v1"), positively indicated at A
		if _, err := l.h.ph.Purge(proxy.PurgeRequest{URL: "http://site.example" + p}); err != nil {
			t.Fatal(err)
		}
		before := origin.n.Load()
		time.Sleep(2100 * time.Millisecond) // X's copy (max-age=1) is stale now, within its SWR window
		w := l.ask(l.a, p)
		l.h.ph.Wait()
		if w.Code != 200 {
			t.Fatalf("firstHop=%v: %d %q", firstHop, w.Code, w.Body.String())
		}
		if got := w.Body.String(); got == "v1" {
			t.Errorf("firstHop=%v: A served X's stale copy %q from a probe (Cache-Status %q); nothing refreshes it there",
				firstHop, got, w.Result().Header.Values("Cache-Status"))
		}
		if origin.n.Load() == before {
			t.Errorf("firstHop=%v: the origin was not asked: the request did not climb past X's stale copy", firstHop)
		}
		if got := testutil.ToFloat64(l.a.c.metrics.Probes.WithLabelValues("positive", "stale")); got != 1 {
			t.Errorf("firstHop=%v: X's stale answer counted %v times as stale, want 1 (hit: %v)", firstHop, got,
				testutil.ToFloat64(l.a.c.metrics.Probes.WithLabelValues("positive", "hit")))
		}
	}
}
