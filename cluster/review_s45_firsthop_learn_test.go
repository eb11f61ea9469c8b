package cluster

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestS45FirstHopWinCensorsTheNegativeSamples: X, the other region's
// home, holds the page but is negatively indicated at A (fna-learned, its
// learned ν small, so its probe is waited for); H, A's first hop, holds it
// too. X's probe is held at X. With the first hop beside the probes, H's
// hit wins and its body's close ends the probes' context: X's answer is
// counted "cancelled" and never reaches ObserveNegativeProbe /
// ObserveHomeNegativeProbe. Every request for a page the regional home
// holds now drops the negative probe's sample, and those are the pages
// most likely at X too: the estimate fna-learned and fna-rate price X's
// negatives with is fed from the pages H misses only (recordAnswer's own
// rule: "leaving it out would teach fna-learned that far negatives miss").
func TestS45FirstHopWinCensorsTheNegativeSamples(t *testing.T) {
	l := newBesideLab(t, false, userOrigin{})
	p := l.pageHomedAtH("/public/censor")
	l.a.c.cfg.FirstHopWithProbes = true
	for _, n := range []*realNode{l.h, l.x} {
		if w := l.ask(n, p); w.Code != 200 {
			t.Fatalf("filling %s: %d", n.id, w.Code)
		}
	}
	gate := s45HoldProbes(l.x)
	t.Cleanup(gate.open)
	w := l.ask(l.a, p)
	gate.open()
	if w.Code != 200 {
		t.Fatalf("%d %q", w.Code, w.Body.String())
	}
	if got := testutil.ToFloat64(l.a.c.metrics.FirstHopProbes.WithLabelValues("hit")); got != 1 {
		t.Fatalf("H's first-hop probe did not win: %v hits", got)
	}
	eventually(t, 5*time.Second, "X's probe recorded", func() bool { return testutilProbes(l, "negative") == 1 })
	t.Logf("X's negative probe: hit %v, miss %v, cancelled %v, error %v",
		testutil.ToFloat64(l.a.c.metrics.Probes.WithLabelValues("negative", "hit")),
		testutil.ToFloat64(l.a.c.metrics.Probes.WithLabelValues("negative", "miss")),
		testutil.ToFloat64(l.a.c.metrics.Probes.WithLabelValues("negative", "cancelled")),
		testutil.ToFloat64(l.a.c.metrics.Probes.WithLabelValues("negative", "error")))
	if got := l.negativeProbes(); got != 1 {
		t.Errorf("X held the page and was asked, but its negative probe taught fna-learned nothing (%v samples): H's win cancelled it", got)
	}
}
