// A review found (now mended): with limits.max_inflight_per_client set, a client that gives up
// on misses whose origin has not answered yet is refused 429 on its hits
// until origin.response_timeout ends those misses (30 s by default).
//
// Steps (seen first on a real node, `edge serve` with two sites, one whose
// origin accepts and never answers, limits.max_inflight_per_client: 2):
// GET a cacheable page twice (the second is "Cache-Status: s34; hit");
// `curl -m 2` two pages of the hung site (curl gives up, connection
// closed); 3 s later GET the cached page again.
// Expected: 200 from the cache: docs/operations.md's isolation table says
// a fill its request left (a client gone, ...) counts against the client
// only when it would start another fetch, "hits and requests joining a
// fill are not refused for it"; the client has nothing of its own in flight.
// Got: 429 "too many requests in flight from this client" for the hit (and
// every miss) until the origin's response_timeout; edge_inflight_requests
// stays 2 with no client connected. The leader waits for the origin's head
// under context.WithoutCancel (proxy/fetch.go lead) while the handler still
// holds the per-client count taken in ServeHTTP, so a gone client's request
// is "under way" for as long as the origin is silent.
// Why it matters: the bound is per address (a NAT, an office); one slow
// origin page that users abandon locks everyone behind that address out of
// the whole site, cached pages included, for up to 30 s at a time.
package proxy

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

func TestS34OpsGoneClientsMissesDoNotRefuseItsHits(t *testing.T) {
	release := make(chan struct{})
	h, _ := handlerProxy(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/hang" {
			select { // an origin that accepts and does not answer (yet)
			case <-release:
			case <-time.After(20 * time.Second):
			}
		}
		w.Header().Set("Cache-Control", "max-age=600")
		_, _ = w.Write([]byte("page " + r.URL.Path))
	}, func(c *Config) { c.MaxInflightPerClient = 1 })
	t.Cleanup(func() { close(release); h.Wait() })
	ask := func(ctx context.Context, path string) *httptest.ResponseRecorder {
		r := httptest.NewRequest("GET", "http://example.com"+path, nil).WithContext(ctx)
		r.RemoteAddr = "192.0.2.9:40000"
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w
	}
	if w := ask(context.Background(), "/page"); w.Code != 200 {
		t.Fatalf("GET /page: %d", w.Code)
	}
	if w := ask(context.Background(), "/page"); w.Code != 200 || w.Header().Get("Cache-Status") == "" {
		t.Fatalf("GET /page again: %d %q", w.Code, w.Header().Get("Cache-Status"))
	}
	// The client asks the hung page and gives up after 100 ms.
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	done := make(chan struct{})
	go func() { defer close(done); ask(ctx, "/hang") }()
	<-ctx.Done()
	time.Sleep(300 * time.Millisecond)
	w := ask(context.Background(), "/page")
	if w.Code != 200 {
		t.Errorf("a hit 300 ms after the client gave up its only miss: %d %q (%s), want 200 from the cache",
			w.Code, w.Header().Get("Cache-Status"), w.Body.String())
	}
	select {
	case <-done:
	default:
		t.Logf("the gone client's request is still being served %v after it left", 300*time.Millisecond)
	}
}
