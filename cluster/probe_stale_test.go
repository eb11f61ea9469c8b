package cluster

import (
	"context"
	"errors"
	"io"
	"strings"
	"sync/atomic"
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

// downableOrigin is s47UserSWROrigin's user pages until down is set, then
// fails every fetch.
type downableOrigin struct {
	s47UserSWROrigin
	down atomic.Bool
}

func (o *downableOrigin) Fetch(ctx context.Context, fr proxy.FetchRequest) (proxy.Result, error) {
	if o.down.Load() {
		return proxy.Result{}, errors.New("origin down")
	}
	return o.s47UserSWROrigin.Fetch(ctx, fr)
}

// userPageStaleAtX returns a page of kind (userOrigin's) under prefix,
// homed at H, that X holds for user a, H does not, and that is stale now
// within its stale-while-revalidate window (an origin of
// s47UserSWROrigin's: fresh for a second). Unless beside, X is positively
// indicated at A under fno (the probe is waited for); beside, X is
// negatively indicated and its probe races the climb.
func (l *besideLab) userPageStaleAtX(prefix, kind string, beside bool) string {
	p := l.pageHomedAtH(prefix)
	if r := askAsUser(l.x, p, kind, "a").Result(); r.StatusCode != 200 {
		l.t.Fatalf("%s: filling X as a: %d", kind, r.StatusCode)
	}
	if _, err := l.h.ph.Purge(proxy.PurgeRequest{URL: "http://site.example" + p}); err != nil {
		l.t.Fatal(err)
	}
	if !beside {
		l.a.c.cfg.Selection = SelectionFNO
		l.indicateX()
	}
	time.Sleep(1100 * time.Millisecond) // stale now, within the window
	return p
}

// TestStaleFallbackNeverLeaksBetweenUsers: the stale fallback hands a
// peer's stored answer to a request whose climb failed, so it must hold
// to what every probe holds to. User a's private, Set-Cookie, Vary:
// Cookie and authorised pages are at X, stale within their
// stale-while-revalidate window; the origin goes down; user b asks A.
// b may get an error, never a's answer or cookie; the public page's stale
// copy is served.
func TestStaleFallbackNeverLeaksBetweenUsers(t *testing.T) {
	for _, beside := range []bool{true, false} {
		origin := &downableOrigin{}
		l := newBesideLab(t, beside, origin)
		for _, kind := range []string{"public", "private", "setcookie", "vary", "auth"} {
			origin.down.Store(false)
			p := l.userPageStaleAtX("/"+kind+"/fallback", kind, beside)
			origin.down.Store(true)
			r := askAsUser(l.a, p, kind, "b").Result()
			b, _ := io.ReadAll(r.Body)
			t.Logf("beside=%v %s: b got %d %q", beside, kind, r.StatusCode, b)
			// The public page is one answer for everyone (its body names
			// whoever filled it); every other kind is a's alone.
			if kind != "public" && (strings.Contains(string(b), "u=a") || strings.Contains(string(b), "Bearer a")) || strings.Contains(strings.Join(r.Header.Values("Set-Cookie"), ";"), "u=a") {
				t.Errorf("beside=%v %s: user b got user a's answer %q (Set-Cookie %q)", beside, kind, b, r.Header.Values("Set-Cookie"))
			}
			if kind == "public" && (r.StatusCode != 200 || !strings.Contains(string(b), "#1")) {
				t.Errorf("beside=%v: the public page's stale copy at X was not served when the climb failed: %d %q", beside, r.StatusCode, b)
			}
		}
	}
}
