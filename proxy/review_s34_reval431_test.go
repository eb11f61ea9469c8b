package proxy

import (
	"net/http"
	"sync/atomic"
	"testing"
	"time"
)

// Held: a stored 200 revalidated with one client's oversized field, the
// origin answering 431 with its usual freshness: the requester gets the
// 431, the stored copy stays (no request-error removal, no hit-for-pass),
// and the next plain request revalidates it and gets the page.
func TestS34A431ToARevalidationKeepsTheStoredCopy(t *testing.T) {
	var refused atomic.Int32
	p := newRuleProxy(t, ruleSite(t, `[]`), func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=60")
		w.Header().Set("ETag", `"v1"`)
		if r.Header.Get("Referer") != "" {
			refused.Add(1)
			w.WriteHeader(http.StatusRequestHeaderFieldsTooLarge)
			return
		}
		if r.Header.Get("If-None-Match") == `"v1"` {
			w.WriteHeader(http.StatusNotModified)
			return
		}
		_, _ = w.Write([]byte("the page"))
	}, nil)
	if w := p.get("/p"); w.Code != 200 {
		t.Fatalf("first: %d", w.Code)
	}
	p.advance(2 * time.Minute)
	if w := p.get("/p", "Referer", "https://a.test/x"); w.Code != http.StatusRequestHeaderFieldsTooLarge || refused.Load() != 1 {
		t.Fatalf("the oversized revalidation: %d (%d refused)", w.Code, refused.Load())
	}
	w := p.get("/p")
	if w.Code != 200 || w.Body.String() != "the page" {
		t.Fatalf("after the 431: %d %q (%s)", w.Code, w.Body.String(), w.Header().Get("Cache-Status"))
	}
	if w := p.get("/p"); w.Code != 200 || p.calls.Load() != 3 {
		t.Fatalf("then a hit: %d after %d origin calls (%s)", w.Code, p.calls.Load(), w.Header().Get("Cache-Status"))
	}
}
