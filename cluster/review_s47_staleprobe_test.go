package cluster

import (
	"context"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/edgecache/edge/proxy"
)

// TestS47StaleProbeAnswerTurnsIntoAnErrorWhenTheOriginIsDown: X holds the
// page stale within its stale-while-revalidate window (a copy the site
// says may be served for ten more minutes); H, A's home for it, does not
// hold it, and the origin is down. Before aef8de8 A served X's copy
// (200 "v1"). Now X's answer is "stale", no win: A climbs, H's fetch and
// A's own fail, and the client gets a 5xx although a peer answered with a
// servable copy. Both with X positively indicated (fno, waited for) and
// negatively indicated racing the climb (fna-learned, beside_climb), and
// with race-all (X's probe races the climb).
func TestS47StaleProbeAnswerTurnsIntoAnErrorWhenTheOriginIsDown(t *testing.T) {
	for _, mode := range []string{"positive", "beside", "raceall"} {
		origin := &s45SWROrigin{failAfter: 1} // "v1", then the origin is down
		l := newBesideLab(t, mode == "beside", origin)
		p := l.pageHomedAtH("/public/s47down")
		if mode != "beside" {
			newFirstHopLabOn(t, l, p, false) // X holds p ("v1"), positively indicated at A
			if mode == "raceall" {
				l.a.c.cfg.Selection = SelectionRaceAll
			}
		} else if w := l.ask(l.x, p); w.Code != 200 { // X holds p, negatively indicated at A
			t.Fatalf("%s: filling X: %d", mode, w.Code)
		}
		time.Sleep(2100 * time.Millisecond) // X's copy (max-age=1) is stale now, within its SWR window
		w := l.ask(l.a, p)
		l.h.ph.Wait()
		ind := map[string]string{"positive": "positive", "beside": "negative", "raceall": "positive"}[mode]
		t.Logf("%s: A answered %d %q (Cache-Status %q); X's probe stale=%v hit=%v", mode, w.Code, w.Body.String(),
			w.Result().Header.Values("Cache-Status"),
			testutil.ToFloat64(l.a.c.metrics.Probes.WithLabelValues(ind, "stale")),
			testutil.ToFloat64(l.a.c.metrics.Probes.WithLabelValues(ind, "hit")))
		if w.Code != 200 || w.Body.String() != "v1" {
			t.Errorf("%s: the origin is down and X answered a copy servable for ten more minutes, yet the client got %d %q",
				mode, w.Code, w.Body.String())
		}
	}
}

// s47UserSWROrigin is userOrigin's pages made stale-while-revalidate:
// fresh for a second, then servable stale for ten minutes; the body names
// the user and the fetch.
type s47UserSWROrigin struct{ n atomic.Int64 }

func (o *s47UserSWROrigin) Fetch(ctx context.Context, fr proxy.FetchRequest) (proxy.Result, error) {
	res, err := userOrigin{}.Fetch(ctx, fr)
	if err != nil {
		return res, err
	}
	n := o.n.Add(1)
	cc := strings.Replace(res.Resp.Header.Get("Cache-Control"), "max-age=600", "max-age=1, stale-while-revalidate=600", 1)
	res.Resp.Header.Set("Cache-Control", cc)
	b, _ := io.ReadAll(res.Resp.Body)
	body := string(b) + " #" + strconv.FormatInt(n, 10)
	res.Resp.Body, res.Resp.ContentLength = io.NopCloser(strings.NewReader(body)), int64(len(body))
	return res, nil
}

// TestS47StaleNegativeProbeBesideClimbCountsAndIsolation (held): beside
// the climb, X's negative probe answers a stale copy; A serves the climb's
// fresh answer, the race is the climb's, and X's answer is counted stale
// in edge_peer_probes_total and edge_peer_negative_probes_total, a miss to
// the peer's status counters. For the user pages (private, Set-Cookie,
// Vary: Cookie, authorised) held stale at X for user a, user b never gets
// a's answer.
func TestS47StaleNegativeProbeBesideClimbCountsAndIsolation(t *testing.T) {
	origin := &s45SWROrigin{}
	l := newBesideLab(t, true, origin)
	p := l.pageHomedAtH("/public/s47beside")
	if w := l.ask(l.x, p); w.Code != 200 {
		t.Fatalf("filling X: %d", w.Code)
	}
	time.Sleep(2100 * time.Millisecond)
	w := l.ask(l.a, p)
	l.h.ph.Wait()
	if w.Code != 200 || w.Body.String() == "v1" {
		t.Errorf("A served %d %q, want the climb's fresh page", w.Code, w.Body.String())
	}
	eventually(t, 5*time.Second, "X's answer recorded", func() bool {
		return testutil.ToFloat64(l.a.c.metrics.Probes.WithLabelValues("negative", "stale")) == 1
	})
	m := l.a.c.metrics
	if got := testutil.ToFloat64(m.NegativeProbes.WithLabelValues("X", "stale")); got != 1 {
		t.Errorf("edge_peer_negative_probes_total{X,stale} %v, want 1", got)
	}
	if got := testutil.ToFloat64(m.NegativeProbes.WithLabelValues("X", "hit")); got != 0 {
		t.Errorf("edge_peer_negative_probes_total{X,hit} %v, want 0", got)
	}
	if l.races("climb") != 1 || l.races("negative_probe") != 0 {
		t.Errorf("races climb %v negative %v, want 1 0", l.races("climb"), l.races("negative_probe"))
	}
	if x := l.a.c.peers["X"]; x.negProbes.Load() != 1 || x.negHits.Load() != 0 {
		t.Errorf("X's status counters: %d probes %d hits, want 1 0", x.negProbes.Load(), x.negHits.Load())
	}

	for _, beside := range []bool{true, false} {
		l := newBesideLab(t, beside, &s47UserSWROrigin{})
		for _, kind := range []string{"private", "setcookie", "vary", "auth"} {
			p := l.pageHomedAtH("/" + kind + "/s47")
			askAs := func(n *realNode, user string) *http.Response { return askAsUser(n, p, kind, user).Result() }
			if r := askAs(l.x, "a"); r.StatusCode != 200 {
				t.Fatalf("%s: filling X as a: %d", kind, r.StatusCode)
			}
			if !beside {
				l.a.c.cfg.Selection = SelectionFNO
				l.indicateX()
			}
			time.Sleep(1100 * time.Millisecond)
			r := askAs(l.a, "b")
			b, _ := io.ReadAll(r.Body)
			if strings.Contains(string(b), "u=a") || strings.Contains(string(b), "Bearer a") || strings.Contains(strings.Join(r.Header.Values("Set-Cookie"), ";"), "u=a") {
				t.Errorf("beside=%v %s: user b got user a's answer %q (Set-Cookie %q)", beside, kind, b, r.Header.Values("Set-Cookie"))
			}
		}
	}
}
