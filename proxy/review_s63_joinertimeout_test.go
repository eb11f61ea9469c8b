package proxy

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestS63CoalescedWaiterGets504WhereItsStaleCopyMayBeServed: a stored
// page (max-age=10) is 10 s stale, well inside cache.stale_if_error's
// default 5 minutes. The origin hangs. The first request leads the
// revalidation; a second request for the same page joins it and waits
// cache.coalesce_timeout. When that ends the waiter is answered 504
// "coalesce-timeout" (fetchAndServe), although it holds the same stale
// copy that staleOnErrorOK allows on an origin error and that the leader
// is given when the origin finally fails. One slow origin answer turns
// every collapsed request of a stale page into an error while the leader,
// and any request that timed out on its own fetch (answerFetchError),
// gets the page.
//
// Expected (RFC 5861 §4, the operator's cache.stale_if_error): an error
// reaching the cache while it revalidates lets it serve the stale copy,
// here for the waiter as for the leader; a waiter that gives up on the
// flight should go through answerFetchError.
func TestS63CoalescedWaiterGets504WhereItsStaleCopyMayBeServed(t *testing.T) {
	gate := make(chan struct{})
	var once sync.Once
	release := func() { once.Do(func() { close(gate) }) }
	t.Cleanup(release)
	var calls atomic.Int64
	clk := &clock{now: t0}
	h, _ := handlerProxy(t, func(w http.ResponseWriter, r *http.Request) {
		n := calls.Add(1)
		w.Header().Set("Date", clk.Now().Format(http.TimeFormat))
		if n > 1 {
			<-gate // the origin hangs, then fails
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("Cache-Control", "max-age=10")
		_, _ = w.Write([]byte("page v1"))
	}, func(c *Config) {
		c.Now = clk.Now
		c.CoalesceTimeout = 50 * time.Millisecond // the gate is held past it: no race
	})
	if w := serve(h, "GET", "/p"); w.Code != http.StatusOK {
		t.Fatalf("fill: %d", w.Code)
	}
	clk.Set(t0.Add(20 * time.Second))

	leader := make(chan *httptest.ResponseRecorder, 1)
	go func() {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest("GET", "http://example.com/p", nil))
		leader <- w
	}()
	waitUntil(t, "the leader's revalidation reaches the origin", func() bool { return calls.Load() >= 2 })

	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest("GET", "http://example.com/p", nil))
	release()
	lw := <-leader
	h.Wait()

	if lw.Code != http.StatusOK || !strings.Contains(lw.Body.String(), "page v1") {
		t.Fatalf("leader: %d %q %q: expected the stale copy on the origin's 503", lw.Code, lw.Body.String(), lw.Header().Get("Cache-Status"))
	}
	if w.Code != http.StatusOK || !strings.Contains(w.Body.String(), "page v1") {
		t.Errorf("collapsed waiter: %d %q (Cache-Status %q); the leader got the stale copy (%q): the waiter holds the same copy within its stale-if-error window",
			w.Code, strings.TrimSpace(w.Body.String()), w.Header().Get("Cache-Status"), lw.Header().Get("Cache-Status"))
	}
}
