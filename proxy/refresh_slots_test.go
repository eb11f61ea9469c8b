package proxy

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// Background refreshes (stale-while-revalidate) take upstream slots like
// the misses they stand for. Before, they took none: 40 stale pages asked
// for at once started 40 origin fetches at once under limits.max_inflight
// 4, the burst a soft purge of a site followed by its traffic makes.
func TestBackgroundRefreshesStayWithinMaxInflight(t *testing.T) {
	const limit, pages = 4, 40
	clk := &clock{now: t0}
	var now, most atomic.Int64
	gate := make(chan struct{})
	var open sync.Once
	release := func() { open.Do(func() { close(gate) }) }
	t.Cleanup(release) // never leave the origin's handlers waiting
	var stale atomic.Bool
	h, calls := handlerProxy(t, func(w http.ResponseWriter, r *http.Request) {
		if stale.Load() {
			n := now.Add(1)
			for {
				m := most.Load()
				if n <= m || most.CompareAndSwap(m, n) {
					break
				}
			}
			<-gate // the origin is slow: the refreshes pile up
			now.Add(-1)
		}
		w.Header().Set("Date", clk.Now().Format(http.TimeFormat))
		w.Header().Set("Cache-Control", "max-age=1, stale-while-revalidate=600")
		_, _ = fmt.Fprintf(w, "page %s", r.URL.Path)
	}, func(c *Config) {
		c.Now = clk.Now
		c.MaxInflight = limit
	})
	for i := range pages {
		if w := serve(h, "GET", fmt.Sprintf("/p%d", i)); w.Code != 200 {
			t.Fatalf("fill /p%d: %d", i, w.Code)
		}
	}
	clk.Set(t0.Add(10 * time.Second)) // every page stale, within stale-while-revalidate
	stale.Store(true)
	before := calls.Load()

	var wg sync.WaitGroup
	for i := range pages {
		wg.Go(func() {
			r := httptest.NewRequest("GET", fmt.Sprintf("http://example.com/p%d", i), nil)
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			// Every client gets the stale copy at once, refreshed or not.
			if w.Code != 200 || w.Body.String() != fmt.Sprintf("page /p%d", i) || !strings.Contains(w.Header().Get("Cache-Status"), "hit") {
				t.Errorf("/p%d: %d %q %q", i, w.Code, w.Body.String(), w.Header().Get("Cache-Status"))
			}
		})
	}
	wg.Wait()
	// The refreshes that got a slot reach the origin (and, before,
	// every one of them did).
	waitUntil(t, "the refreshes that got a slot to reach the origin", func() bool { return now.Load() >= limit })
	time.Sleep(50 * time.Millisecond) // room for any more to arrive
	release()
	h.Wait()

	if m := most.Load(); m > limit {
		t.Errorf("%d refreshes reached the origin at once under limits.max_inflight %d", m, limit)
	}
	refused := testutil.ToFloat64(h.metrics.Refreshes.WithLabelValues(refreshRefused))
	ok := testutil.ToFloat64(h.metrics.Refreshes.WithLabelValues(refreshOK))
	if got := calls.Load() - before; got != int64(ok) || ok != limit || refused != pages-limit {
		t.Errorf("origin fetches %d, refreshes ok %v, refused %v: want %d fetched and stored, %d refused", got, ok, refused, limit, pages-limit)
	}
	if used, _ := h.UpstreamBySite(); used[""] != 0 {
		t.Errorf("slots still held after the refreshes: %v", used)
	}

	// A refused refresh is tried again by a later request, once a slot
	// is free: the copy does not stay stale for good.
	stale.Store(false)
	serve(h, "GET", "/p39") // stale: starts the refresh
	if w := serve(h, "GET", "/p39"); !strings.Contains(w.Header().Get("Cache-Status"), "hit") || strings.Contains(w.Header().Get("Cache-Status"), "stale") {
		t.Errorf("after a slot was free the page was not refreshed: %q", w.Header().Get("Cache-Status"))
	}
}
