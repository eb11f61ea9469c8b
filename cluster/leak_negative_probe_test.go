package cluster

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/edgecache/edge/proxy"
)

// A probe sent despite a negative indication (fna-rate, the default, or fna-learned)
// asks a peer the ingress did not ask before this selection: the page's home
// in the other region. Whatever that home holds for one user must never
// reach another through it. Alice fills the us home X; then Bob asks the eu
// ingress A, whose replica of X says no but whose learned ν makes the probe
// worth it. Bob must get his own answer and no cookie of Alice's; a public
// page, the control, must come back from X through the same probe.
//
// Beside the climb (cluster.negative_probes), X's answer races A's climb:
// the origin answers Bob a second late there, so that X's public answer,
// the control, wins.
//
// Every policy that sends such probes, fna-learned, fna-rate and
// race-all, is run: they price X differently (race-all not at all) but
// must hand Bob the same answer. race-all's probes always race the climb.
func TestNegativeProbeNeverLeaksBetweenUsers(t *testing.T) {
	for _, sel := range []Selection{SelectionFNALearned, SelectionFNARate, SelectionRaceAll} {
		for _, beside := range []bool{false, true} {
			if sel == SelectionRaceAll && !beside {
				continue
			}
			t.Run(sel.String()+"/beside="+strconv.FormatBool(beside), func(t *testing.T) { testNegativeProbeNeverLeaks(t, sel, beside) })
		}
	}
}

func testNegativeProbeNeverLeaks(t *testing.T, sel Selection, beside bool) {
	var origin proxy.Fetcher = userOrigin{}
	if beside {
		origin = proxy.FetcherFunc(func(ctx context.Context, req *http.Request) (*http.Response, error) {
			if strings.Contains(req.Header.Get("Cookie")+req.Header.Get("Authorization"), "bob") {
				select {
				case <-time.After(time.Second):
				case <-ctx.Done():
					return nil, ctx.Err()
				}
			}
			res, err := userOrigin{}.Fetch(ctx, proxy.FetchRequest{Req: req})
			return res.Resp, err
		})
	}
	// A's replica of X has estimates (so its derived ν is below 1) and has
	// learnt that X's negatives hit: every miss at A probes X (and, beside
	// the climb, races it).
	l := newBesideLab(t, beside, origin)
	a := l.a
	a.c.cfg.Selection = sel
	nodes := map[string]*realNode{"A": l.a, "H": l.h, "X": l.x}
	users := []string{"user=alice", "user=bob"}
	ask := func(n *realNode, p string, u int) *httptest.ResponseRecorder {
		r := httptest.NewRequest("GET", "http://site.example"+p, nil)
		if strings.HasPrefix(p, "/auth/") {
			r.Header.Set("Authorization", "Bearer "+users[u])
		} else {
			r.Header.Set("Cookie", users[u])
		}
		w := httptest.NewRecorder()
		n.ph.ServeHTTP(w, r)
		n.ph.Wait()
		return w
	}
	negativeProbes := func() float64 {
		return testutil.ToFloat64(a.c.metrics.NegativeProbes.WithLabelValues("X", "hit")) + testutil.ToFloat64(a.c.metrics.NegativeProbes.WithLabelValues("X", "miss"))
	}
	for i, kind := range []string{"private", "setcookie", "vary", "auth"} {
		p := "/" + kind + "/" + strconv.Itoa(i)
		ask(nodes["X"], p, 0) // Alice fills X
		before := negativeProbes()
		w := ask(a, p, 1)
		if negativeProbes() == before {
			t.Fatalf("%s: A sent no negative probe to X: the test did not exercise the path", p)
		}
		if w.Code != 200 || !strings.Contains(w.Body.String(), "user=bob") || strings.Contains(w.Body.String(), "alice") {
			t.Fatalf("%s: Bob got %d %q (%s): another user's answer through a negative probe", p, w.Code, w.Body.String(), w.Header().Get("Cache-Status"))
		}
		for _, sc := range w.Header().Values("Set-Cookie") {
			if strings.Contains(sc, "alice") {
				t.Fatalf("%s: Bob got Alice's cookie %q through a negative probe", p, sc)
			}
		}
	}
	// The control: a page every user may share does come back from X
	// through the negative probe, so the checks above were not vacuous.
	first := ask(nodes["X"], "/public/9", 0)
	hits := testutil.ToFloat64(a.c.metrics.NegativeProbes.WithLabelValues("X", "hit"))
	if w := ask(a, "/public/9", 1); w.Body.String() != first.Body.String() {
		t.Fatalf("public page: Bob got %q, want X's shared %q", w.Body.String(), first.Body.String())
	}
	if testutil.ToFloat64(a.c.metrics.NegativeProbes.WithLabelValues("X", "hit")) == hits {
		t.Fatal("public page: not answered by X's negative-probe hit")
	}
}
