package proxy

import (
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// A review found (now mended): since speaksForURL (commit a48a43a) a URL whose every answer is
// an uncacheable error other than 404/410 is no longer remembered as
// hit-for-pass, so concurrent requests for it are coalesced behind one
// leader again: each waits for the leader's whole round trip, learns the
// answer cannot be shared, and only then goes to the origin itself
// (request serialisation, which the pass memory exists to prevent).
//
// Steps: an API endpoint that answers every anonymous request 401
// "Cache-Control: private" (a logged-out /api/me, as most APIs do). One
// GET teaches the cache it is uncacheable. Then 4 GETs at once; the origin
// holds each answer until 4 requests are in (or 15 s pass).
// Expected: the 4 reach the origin together (hit-for-pass: each forwarded
// at once), as before a48a43a.
// Got: one reaches it; the other 3 wait on its fill until the origin gives
// up waiting (15 s here: in production one origin round trip added to
// every concurrent request for the URL, for ever, since nothing is
// remembered).
func TestS33UncacheableErrorURLIsCoalescedAgain(t *testing.T) {
	var inFlight, maxSeen atomic.Int64
	var mu sync.Mutex
	arrived := sync.NewCond(&mu)
	h, _ := handlerProxy(t, func(w http.ResponseWriter, r *http.Request) {
		n := inFlight.Add(1)
		defer inFlight.Add(-1)
		for {
			m := maxSeen.Load()
			if n <= m || maxSeen.CompareAndSwap(m, n) {
				break
			}
		}
		mu.Lock()
		arrived.Broadcast()
		if r.Header.Get("X-Burst") != "" {
			end := time.Now().Add(15 * time.Second)
			timer := time.AfterFunc(15*time.Second, func() { mu.Lock(); arrived.Broadcast(); mu.Unlock() })
			// maxSeen, not inFlight: the first to be answered leaves (inFlight
			// 3) before every woken waiter has looked again, and one that
			// looked then would wait out the whole 15 s.
			for maxSeen.Load() < 4 && time.Now().Before(end) {
				arrived.Wait()
			}
			timer.Stop()
		}
		mu.Unlock()
		w.Header().Set("Cache-Control", "private")
		w.Header().Set("WWW-Authenticate", `Bearer realm="api"`)
		w.WriteHeader(http.StatusUnauthorized)
		_, _ = w.Write([]byte(`{"error":"login required"}`))
	}, func(c *Config) { c.UnkeyedRequestHeaders = append(c.UnkeyedRequestHeaders, "X-Burst") })
	if w := serve(h, "GET", "/api/me"); w.Code != http.StatusUnauthorized {
		t.Fatalf("first GET: %d", w.Code)
	}
	maxSeen.Store(0)
	var wg sync.WaitGroup
	codes := make([]int, 4)
	for i := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := httptest.NewRequest("GET", "http://example.com/api/me", nil)
			r.Header.Set("X-Burst", "1")
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			codes[i] = w.Code
		}()
	}
	wg.Wait()
	h.Wait()
	for i, c := range codes {
		if c != http.StatusUnauthorized {
			t.Errorf("request %d: %d", i, c)
		}
	}
	if got := maxSeen.Load(); got < 4 {
		t.Errorf("a URL the origin answers 401 private to everyone: at most %d of 4 concurrent requests reached the origin together (coalesced behind a leader, not hit-for-pass)", got)
	}
}
