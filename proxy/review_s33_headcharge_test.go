package proxy

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"
)

// A review found (now mended): chargeClientFor (commit a48a43a) counts every miss a HEAD leads
// against its client until the GET the fill makes of the whole body ends:
// serveFrom answers a HEAD with the head alone and returns at once, so
// the HEAD "left" its fill by construction. A client that asks HEAD and
// then GET (download managers, wget --spider, link checkers, curl -I
// then curl) is refused 429 on its next request, for as long as the
// origin takes to send a body nobody asked it for yet, though it has
// nothing in flight.
//
// Steps: limits.max_inflight_per_client 1; an origin that sends the head
// and the first KiB of a cacheable 256 KiB body, the rest later (a large
// object from a far origin). Client 192.0.2.7 sends HEAD /big (answered
// 200 at once), then GET /small.
// Expected: 200: the client has no request in flight (as before a48a43a).
// Got: 429 "too many requests in flight from this client" (detail
// client_limit) until the origin ends the body; the same for the GET /big
// that would only have joined the fill under way (not asserted here: on
// the old code it waits for the body). With a bound of N, N HEADs of large
// objects lock the client out the same way.
func TestS33HeadMissLocksItsClientOutUntilTheBodyEnds(t *testing.T) {
	release := make(chan struct{})
	var bigFetches atomic.Int64
	h, _ := handlerProxy(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=600")
		if r.URL.Path != "/big" {
			_, _ = w.Write([]byte("small page"))
			return
		}
		bigFetches.Add(1)
		const size = 256 << 10
		w.Header().Set("Content-Length", fmt.Sprint(size))
		w.WriteHeader(200)
		_, _ = w.Write(make([]byte, 1024))
		w.(http.Flusher).Flush()
		select {
		case <-release:
			_, _ = w.Write(make([]byte, size-1024))
		case <-r.Context().Done():
		case <-time.After(60 * time.Second):
		}
	}, func(c *Config) { c.MaxInflightPerClient = 1 })
	t.Cleanup(func() { close(release); h.Wait() })
	ask := func(method, path string) *httptest.ResponseRecorder {
		r := httptest.NewRequest(method, "http://example.com"+path, nil)
		r.RemoteAddr = "192.0.2.7:40000"
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w
	}
	if w := ask("HEAD", "/big"); w.Code != 200 {
		t.Fatalf("HEAD /big: %d", w.Code)
	}
	if bigFetches.Load() != 1 {
		t.Fatalf("origin fetches of /big: %d, want 1", bigFetches.Load())
	}
	if w := ask("GET", "/small"); w.Code != 200 {
		t.Errorf("GET /small after an answered HEAD /big (nothing of this client in flight): %d %q, want 200",
			w.Code, w.Header().Get("Cache-Status"))
	}
}
