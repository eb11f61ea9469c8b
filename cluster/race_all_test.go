package cluster

import (
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/edgecache/edge/proxy"
	"github.com/edgecache/edge/routing"
)

// raceAllLab: four nodes, A running race-all; pages are picked so that
// their home is H, the climb's first hop from A.
type raceAllLab struct {
	*besideLab
	y *realNode
}

func startRaceAllLab(t *testing.T, o *heldOrigin) *raceAllLab {
	nodes := startRealNodes(t, []string{"A", "H", "X", "Y"}, routing.ModeHybrid, 2, 2*time.Second, o)
	a := nodes["A"]
	a.c.cfg.Selection = SelectionRaceAll
	return &raceAllLab{besideLab: &besideLab{t: t, a: a, h: nodes["H"], x: nodes["X"]}, y: nodes["Y"]}
}

// homedAtH is a page whose home is H.
func (l *raceAllLab) homedAtH(prefix string) string {
	for i := range 1000 {
		p := prefix + strconv.Itoa(i)
		if r := rankingOf(l.a, p); len(r) > 0 && r[0] == "H" {
			return p
		}
	}
	l.t.Fatal("no page homed at H in 1000")
	return ""
}

func (l *raceAllLab) probesTo(id, outcome string) float64 {
	return testutil.ToFloat64(l.a.c.metrics.NegativeProbes.WithLabelValues(id, outcome))
}

// TestRaceAllAsksEveryPeerAndWaitsForNone: the page is at its home H only.
// X and Y hold it not, their indicators say so, and their probes are held:
// race-all asks both anyway (every trusted peer but the climb's first hop),
// and A answers from the climb while they are still held.
func TestRaceAllAsksEveryPeerAndWaitsForNone(t *testing.T) {
	l := startRaceAllLab(t, &heldOrigin{open: make(chan struct{})})
	p := l.homedAtH("/public/")
	if w := l.ask(l.h, p); w.Code != 200 {
		t.Fatalf("filling H: %d", w.Code)
	}
	released := holdProbes(300*time.Millisecond, l.x, l.y)
	w := l.ask(l.a, p)
	if w.Code != 200 || !strings.Contains(w.Body.String(), p) {
		t.Fatalf("A answered %d %q", w.Code, w.Body.String())
	}
	if released.Load() {
		t.Error("A waited for the held probes before answering")
	}
	if n := l.races("climb"); n != 1 {
		t.Errorf("races won by the climb: %v, want 1", n)
	}
	eventually(t, 5*time.Second, "X's and Y's probe answers recorded", func() bool {
		return l.probesTo("X", "miss") == 1 && l.probesTo("Y", "miss") == 1
	})
	if n := testutil.ToFloat64(l.a.c.metrics.NegativeProbes.WithLabelValues("H", "miss")) + testutil.ToFloat64(l.a.c.metrics.NegativeProbes.WithLabelValues("H", "hit")); n != 0 {
		t.Errorf("the climb's first hop H was probed too (%v)", n)
	}
}

// TestRaceAllServesTheNearestCopy: the page is at X only and the origin is
// held. A's probe to X answers while the climb (A → H → origin) waits, and
// serves X's copy.
func TestRaceAllServesTheNearestCopy(t *testing.T) {
	origin := &heldOrigin{open: make(chan struct{})}
	l := startRaceAllLab(t, origin)
	p := l.homedAtH("/o/")
	// X keeps a page from its second request; then H forgets it (a purge
	// of its own), so that X alone holds it.
	var want *httptest.ResponseRecorder
	for range 2 {
		if want = l.ask(l.x, p); want.Code != 200 {
			t.Fatalf("filling X: %d", want.Code)
		}
	}
	u := "http://site.example" + p
	if n, err := l.h.ph.Purge(proxy.PurgeRequest{URL: u}); err != nil || n != 1 {
		t.Fatalf("purging H alone: %d %v", n, err)
	}
	if w := l.ask(l.x, p); !strings.Contains(w.Header().Get("Cache-Status"), "X; hit") {
		t.Fatalf("X does not hold the page: %q", w.Header().Get("Cache-Status"))
	}
	origin.shut.Store(true)
	defer close(origin.open)
	w := l.ask(l.a, p)
	if w.Code != 200 || w.Body.String() != want.Body.String() {
		t.Fatalf("A answered %d %q, want X's %q", w.Code, w.Body.String(), want.Body.String())
	}
	if n := l.races("negative_probe"); n != 1 {
		t.Errorf("races won by a probe: %v, want 1 (Cache-Status %q)", n, w.Header().Get("Cache-Status"))
	}
}
