package proxy

// Hostile review s37: background refreshes and limits.max_inflight_per_client.
// 0138b3d says a refresh takes a slot "and stays within the client's
// bound", and mayLead's comment says a client "holds at most about twice
// its bound of upstream slots, never the node's". A refresh is checked
// with mayLead but never counted against the client that triggered it
// (chargeClientFor counts the fills a client's misses leave; nothing counts
// refreshes), and the request that triggers it ends at once with the stale
// copy: one client asking for many stale pages, one at a time, starts a
// refresh for each and can hold every upstream slot.
//
// A review found (now mended): 8 of 8 slots held, another client's miss 503.
// refreshInBackground now counts a refresh against its client (leave, then
// ended when its slot goes back), as chargeClientFor counts a left fill.

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestS37OneClientsRefreshesStayWithinItsBound(t *testing.T) {
	const limit, perClient, pages = 8, 2, 20
	clk := &clock{now: t0}
	gate := make(chan struct{})
	var open sync.Once
	release := func() { open.Do(func() { close(gate) }) }
	t.Cleanup(release)
	var stale atomic.Bool
	h, _ := handlerProxy(t, func(w http.ResponseWriter, r *http.Request) {
		if stale.Load() && strings.HasPrefix(r.URL.Path, "/p") {
			select { // the origin is slow for the refreshed pages
			case <-gate:
			case <-r.Context().Done():
			}
		}
		w.Header().Set("Date", clk.Now().Format(http.TimeFormat))
		w.Header().Set("Cache-Control", "max-age=1, stale-while-revalidate=600")
		_, _ = fmt.Fprintf(w, "page %s", r.URL.Path)
	}, func(c *Config) {
		c.Now = clk.Now
		c.MaxInflight = limit
		c.MaxInflightPerClient = perClient
		c.RefreshTimeout = 4 * time.Second
	})
	get := func(path, client string) *httptest.ResponseRecorder {
		r := httptest.NewRequest("GET", "http://example.com"+path, nil)
		r.RemoteAddr = client + ":40000"
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w
	}
	for i := range pages {
		if w := get(fmt.Sprintf("/p%d", i), "198.51.100.1"); w.Code != 200 {
			t.Fatalf("fill: %d", w.Code)
		}
	}
	h.Wait()
	clk.Set(t0.Add(10 * time.Second))
	stale.Store(true)
	// One client, one request at a time: each is answered at once.
	for i := range pages {
		if w := get(fmt.Sprintf("/p%d", i), "198.51.100.66"); w.Code != 200 {
			t.Fatalf("stale /p%d: %d", i, w.Code)
		}
	}
	time.Sleep(50 * time.Millisecond)
	used, _ := h.UpstreamBySite()
	held := used[""]
	// Another client's miss.
	w := get("/other", "203.0.113.9")
	release()
	h.Wait()
	t.Logf("slots held by one client's refreshes: %d of %d (per-client bound %d); another client's miss: %d", held, limit, perClient, w.Code)
	if held > 2*perClient || w.Code != 200 {
		t.Errorf("one client asking for %d stale pages one at a time held %d of %d upstream slots (bound %d per client, \"at most about twice\" = %d); another client's miss got %d %q",
			pages, held, limit, perClient, 2*perClient, w.Code, w.Header().Get("Cache-Status"))
	}
	s37NoSlotsHeld(t, h, "after")
}
