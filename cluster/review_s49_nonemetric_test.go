package cluster

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/edgecache/edge/proxy"
)

// TestS49NoStaleSeenIsCountedAsAStaleFallback (FAILS on cc4ca1a).
//
// Steps: cluster.stale_while_climbing off (the lab's default: false). X
// holds the page and A is told so (positive indication, fno), then X's
// copy is purged at X alone: A's probe of X is a false positive, a plain
// miss, no peer answered stale. The origin is down, so A's climb fails.
//
// Expected: edge_peer_stale_fallbacks_total stays at 0 for every outcome.
// Its help says it counts "requests that asked again the peers a probe had
// found holding the page stale"; no probe found it stale and nobody was
// asked again. Before cc4ca1a staleFallback returned early (mask == 0)
// without counting, so with the option off nothing was counted.
//
// Got: outcome "none" is 1. staleOnFailure counts whatever staleFallback
// returns, and its mask==0 early return now returns "none" to be counted.
// Every failed climb that had probed anything (every origin outage, every
// 5xx home) now shows up as a stale fallback that found nothing, so the
// ratio served/(served+none) an operator reads to judge how often stale
// copies save a request collapses; and the option being off does not
// restore the old behaviour of the metric ("config false must restore the
// old behaviour exactly").
func TestS49NoStaleSeenIsCountedAsAStaleFallback(t *testing.T) {
	origin := &downableOrigin{}
	l := newBesideLab(t, false, origin)
	if l.a.c.cfg.StaleWhileClimbing {
		t.Fatal("setup: the lab is expected to start with stale_while_climbing off")
	}
	p := l.pageHomedAtH("/public/s49none")
	newFirstHopLabOn(t, l, p, false) // X holds p, positively indicated at A
	if _, err := l.x.ph.Purge(proxy.PurgeRequest{URL: "http://site.example" + p}); err != nil {
		t.Fatal(err)
	}
	origin.down.Store(true)
	w := l.ask(l.a, p)
	l.h.ph.Wait()
	probes := l.a.c.metrics.Probes
	t.Logf("A answered %d; X's probe: miss %v stale %v", w.Code,
		testutil.ToFloat64(probes.WithLabelValues("positive", "miss")), testutil.ToFloat64(probes.WithLabelValues("positive", "stale")))
	if w.Code < 500 {
		t.Fatalf("setup: the climb was meant to fail, A answered %d", w.Code)
	}
	if testutil.ToFloat64(probes.WithLabelValues("positive", "stale")) != 0 {
		t.Fatal("setup: X answered stale")
	}
	for _, o := range []string{"served", "served_early", "climb_first", "none", "purged", "cancelled"} {
		if got := testutil.ToFloat64(l.a.c.metrics.StaleFallbacks.WithLabelValues(o)); got != 0 {
			t.Errorf("stale_while_climbing off, no probe answered stale, nobody asked again: edge_peer_stale_fallbacks_total{outcome=%q} = %v, want 0 (as before cc4ca1a)", o, got)
		}
	}
}
