package proxy

import (
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"
)

// TestS40JoinerWithStaleOfARefusedLeaderStillServesStale: before the
// ask-again (fetchAndServe, askedAgain), a request that had a stale copy
// allowing stale-if-error and joined a fill whose leader was refused an
// upstream slot answered with the stale copy (answerFetchError). Now it
// asks again first and leads; when no slot is free for it either (the
// node at limits.max_inflight: the very case that refused the leader), it
// answers through lead's refuseOverload, which never looks at the stale
// copy: a 503 where the same request got its stale page before the
// change.
func TestS40JoinerWithStaleOfARefusedLeaderStillServesStale(t *testing.T) {
	var now atomic.Int64
	now.Store(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	clock := func() time.Time { return time.Unix(0, now.Load()) }
	h, calls := handlerProxy(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Date", clock().Format(http.TimeFormat)) // the test's clock, or the copy's age is years
		w.Header().Set("Cache-Control", "max-age=1, stale-if-error=600")
		_, _ = io.WriteString(w, "page")
	}, func(c *Config) { c.Now = clock })
	if w := serve(h, "GET", "/p"); w.Code != 200 {
		t.Fatalf("warming: %d", w.Code)
	}
	now.Add(int64(5 * time.Second)) // stale, within stale-if-error

	// Every upstream slot taken (max_inflight 1, held here).
	h.SetLimits(1, 0)
	slot, why := h.upstream.acquire("")
	if why != "" {
		t.Fatalf("taking the only slot: %s", why)
	}
	defer slot.release()

	// The leader, between its join and its refusal.
	req := httptest.NewRequest("GET", "http://example.com/p", nil)
	ckey := coalesceKey(h.requestKey(req), h.varyKey(nil, req))
	purges := h.purges.Load()
	f, leader := h.co.join(ckey, purges, fillWait{})
	if !leader {
		t.Fatal("the test's fill did not lead")
	}
	answered := make(chan *httptest.ResponseRecorder, 1)
	go func() { answered <- serve(h, "GET", "/p") }()
	waitUntil(t, "the stale reader waits on the leader's fill", waitingOnAFill)
	h.co.done(ckey, f) // what lead does when refused (refusedOverload)
	f.publish(nil, false, errOverload)

	var w *httptest.ResponseRecorder
	select {
	case w = <-answered:
	case <-time.After(3 * time.Second):
		t.Fatal("no answer")
	}
	if w.Code != 200 || w.Body.String() != "page" {
		t.Fatalf("a reader with a stale copy (stale-if-error=600) that joined a fill refused for overload got %d %q (Cache-Status %q; origin asked %d times), want the stale page as before the ask-again: "+
			"its own ask leads, is refused too, and lead's refuseOverload ignores m.stale", w.Code, w.Body.String(), w.Header().Get("Cache-Status"), calls.Load())
	}
}
