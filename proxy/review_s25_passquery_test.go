package proxy

import (
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"
)

// A review found (performance regression of 316e73b, no leak; now mended): missFor now gives a
// request whose query the key rule trimmed a hit-for-pass memory of its
// own (passKey += "\x00query " + RawQuery), and serveCacheable only looks
// that one up. A page the edge already knows to be uncacheable (its pass
// memory is under the shared key, set by a plain request) is then no
// hit-for-pass for any request carrying an ignored parameter: with
// per-click ids (gclid, fbclid: the docs' ignore_params example) every
// such request is a first miss, joins the fill under way on the shared key
// (fetchAndServe: coalesceKey(m.key, …)) and waits for another visitor's
// origin answer before fetching its own: request collapsing on an
// uncacheable page, what hit-for-pass exists to prevent. Before 316e73b
// these requests passed at once. Fix: also consult the shared passKey
// (m.key + fk [+ cookie]) before coalescing, and only *record* under the
// query-specific one; or never coalesce an ownQuery request with others.
func TestS25IgnoredParamRequestsCollapseOnAHitForPassPage(t *testing.T) {
	site := ruleSite(t, `[{name: pages, key: {ignore_params: [gclid]}}]`)
	arrived := make(chan string, 8)
	p := newRuleProxy(t, site, func(w http.ResponseWriter, r *http.Request) {
		arrived <- r.URL.RawQuery
		if r.URL.RawQuery == "gclid=click1" {
			// The first click's answer waits until the second click reaches
			// the origin too (at most 2 s): a pass does, a collapsed
			// waiter cannot.
			select {
			case <-time.After(2 * time.Second):
			case <-waitSecond(arrived, r.URL.RawQuery):
			}
		}
		w.Header().Set("Cache-Control", "private")
		_, _ = writeString(w, "landing page")
	}, nil)
	if w := p.get("/landing"); w.Code != 200 {
		t.Fatal(w.Code)
	}
	<-arrived
	// The page is now hit-for-pass under its shared key.
	if w := p.get("/landing"); w.Code != 200 {
		t.Fatal(w.Code)
	}
	<-arrived
	start := time.Now()
	var wg sync.WaitGroup
	status := make([]string, 2)
	for i, q := range []string{"gclid=click1", "gclid=click2"} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if i == 1 {
				time.Sleep(100 * time.Millisecond) // the first click's fetch is under way
			}
			r := httptest.NewRequest("GET", "http://shop.test/landing?"+q, nil)
			w := httptest.NewRecorder()
			p.h.ServeInbound(w, r, Inbound{Site: p.site})
			status[i] = w.Header().Get("Cache-Status")
		}()
	}
	wg.Wait()
	p.h.Wait()
	if d := time.Since(start); d > time.Second {
		t.Errorf("two clicks (distinct gclid) on a page known hit-for-pass took %v: the second waited on the first's origin fetch (Cache-Status %q, %q) instead of passing",
			d.Round(time.Millisecond), status[0], status[1])
	}
}

// waitSecond returns a channel closed once a request other than self's
// reaches the origin (read from arrived).
func waitSecond(arrived chan string, self string) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		for q := range arrived {
			if q != self {
				close(done)
				return
			}
		}
	}()
	return done
}
