package cluster

import (
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestS46SettleFailureClimbsWhileTheFirstHopProbeIsOut: X (positively
// indicated) wins with a hit whose body breaks before A has it whole, so
// settle fails and A climbs to H, its first hop, while H's own probe (on
// fctx) is still held at H. probe returned without ending fctx (release
// waits for the drain of H's answer, which waits for H), so H answers the
// probe only after the climb stored the page there: the climb's own fill is
// counted a first-hop hit, the very miscount 32e9fc7's third mend ended on
// the no-winner path (TestS45LateFirstHopAnswerCountedAsAHit).
func TestS46SettleFailureClimbsWhileTheFirstHopProbeIsOut(t *testing.T) {
	l := newBesideLab(t, false, userOrigin{})
	l.a.c.cfg.PeerWholeBytes = DefaultConfig().PeerWholeBytes // read whole: a broken body is a failed hop
	p := l.pageHomedAtH("/public/s46settle")
	newFirstHopLabOn(t, l, p, true) // X holds p, positively indicated at A; H does not
	cut := make(chan struct{})
	var once sync.Once
	onCut := func() { once.Do(func() { close(cut) }) }
	l.x.onCut.Store(&onCut)
	l.x.cutProbes.Store(true)
	gate := s45HoldProbes(l.h)
	t.Cleanup(gate.open)
	w := l.ask(l.a, p)
	if w.Code != 200 {
		t.Fatalf("%d %q", w.Code, w.Body.String())
	}
	select {
	case <-cut:
	default:
		t.Fatal("X's probe answer was never cut: the scenario did not run")
	}
	if got := testutil.ToFloat64(l.a.c.metrics.Probes.WithLabelValues("positive", "hit")); got != 1 {
		t.Fatalf("X's cut answer was not the winner: %v positive hits", got)
	}
	// H now holds p: the climb went to it (the home keeps its pages).
	gate.open()
	l.h.ph.Wait()
	eventually(t, 5*time.Second, "H's probe answer recorded", func() bool { return l.a.c.ProbeRaces().FirstHopAsked == 1 })
	t.Logf("first hop: hit %v, miss %v, cancelled %v, error %v", l.firstHopProbes("hit"), l.firstHopProbes("miss"),
		l.firstHopProbes("cancelled"), l.firstHopProbes("error"))
	if st := l.a.c.ProbeRaces(); st.FirstHopHits != 0 {
		t.Errorf("H did not hold the page when asked; its probe, answered after the climb's fill, counted a hit: %+v", st)
	}
}
