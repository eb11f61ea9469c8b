package cluster

import (
	"net/http"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/edgecache/edge/routing"
)

// TestS46BesideNegativeWinnerStillCancelsTheOtherNegatives: four nodes, A
// and H in eu, X in us, Y in ap (each its region's home); A runs fna-learned with negative probes
// beside the climb, and both X's and Y's negatives are learnt to hit, so
// both race the climb. The page is at X only, the climb is held at H, and
// Y's probe is held at Y. X's negative hit overtakes the climb; once its
// body is closed, climbBeside's cancelOnClose (neg.cancel) ends Y's probe,
// which is counted cancelled and teaches fna-learned nothing: the
// censoring 32e9fc7 removed from probe (a far answer after a winner now
// teaches its estimate) is left in climbBeside.
func TestS46BesideNegativeWinnerStillCancelsTheOtherNegatives(t *testing.T) {
	nodes := startRealNodes(t, []string{"A", "H", "X", "Y"}, routing.ModeHybrid, 2, 2*time.Second, userOrigin{})
	placeInRegions(nodes, map[string]string{"A": "eu", "H": "eu", "X": "us", "Y": "ap"})
	a := nodes["A"]
	a.c.cfg.Selection = SelectionFNALearned
	a.c.cfg.NegativeProbesBesideClimb = true
	a.c.raceAbove = 0
	for _, id := range []string{"X", "Y"} {
		r := a.c.peers[id].replica
		r.SetEstimates(0.001, 0.3)
		for range 200 {
			r.ObserveHomeNegativeProbe(0.999, true)
			r.ObserveNegativeProbe(false)
		}
	}
	l := &besideLab{t: t, a: a, h: nodes["H"], x: nodes["X"]}
	y := nodes["Y"]
	p := l.pageHomedAtH("/public/s46beside")
	if w := l.ask(l.x, p); w.Code != 200 {
		t.Fatalf("filling X: %d", w.Code)
	}
	e, err := a.c.Explain("http://site.example"+p, nil)
	if err != nil {
		t.Fatal(err)
	}
	chosen := map[string]bool{}
	for _, c := range e.Candidates {
		chosen[c.Peer] = c.Chosen
	}
	if !chosen["X"] || !chosen["Y"] {
		t.Skipf("the selection did not ask both X and Y: %+v", e.Candidates)
	}
	// The climb is held at H until X's answer has been served, Y's probe
	// until the test lets it go.
	gateH, gateY := make(chan struct{}), s45HoldProbes(y)
	t.Cleanup(gateY.open)
	hOpen := func() {
		select {
		case <-gateH:
		default:
			close(gateH)
		}
	}
	t.Cleanup(hOpen)
	holdH := func(r *http.Request) {
		if r.Header.Get(hdrMode) == hopClimb.String() {
			select {
			case <-gateH:
			case <-r.Context().Done():
			}
		}
	}
	l.h.hold.Store(&holdH)
	w := l.ask(a, p)
	if w.Code != 200 {
		t.Fatalf("%d %q", w.Code, w.Body.String())
	}
	if n := l.races("negative_probe"); n != 1 {
		t.Fatalf("races won by a negative probe: %v, want 1", n)
	}
	// A has served X's answer and closed its body; Y's probe is still held.
	gateY.open()
	hOpen()
	m := a.c.metrics
	outcome := func(o string) float64 { return testutil.ToFloat64(m.Probes.WithLabelValues("negative", o)) }
	eventually(t, 5*time.Second, "Y's probe recorded", func() bool {
		return outcome("hit")+outcome("miss")+outcome("cancelled")+outcome("error")+outcome("lost") == 2
	})
	t.Logf("negatives: hit %v miss %v cancelled %v error %v", outcome("hit"), outcome("miss"), outcome("cancelled"), outcome("error"))
	if got := testutil.ToFloat64(m.NegativeProbes.WithLabelValues("Y", "miss")) + testutil.ToFloat64(m.NegativeProbes.WithLabelValues("Y", "hit")); got != 1 {
		t.Errorf("Y was asked and answered, but its negative probe taught nothing (%v samples): X's win cancelled it on close", got)
	}
}
