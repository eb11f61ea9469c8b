package proxy

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// A cookie-bearing revalidation of a heuristic entry (304) must not evict
// it for everyone: the next plain request revalidates the stored entry,
// not a fresh miss.
func TestCookieEvictsHeuristic(t *testing.T) {
	clk := &clock{now: t0}
	h, calls := handlerProxy(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Date", clk.Now().Format(http.TimeFormat))
		w.Header().Set("Last-Modified", t0.Add(-10*time.Hour).Format(http.TimeFormat))
		w.Header().Set("ETag", `"a"`)
		if r.Header.Get("If-None-Match") == `"a"` {
			w.WriteHeader(304)
			return
		}
		io.WriteString(w, "logo")
	}, func(c *Config) { c.Now = clk.Now })
	serve(h, "GET", "/logo.png")
	clk.Set(t0.Add(2 * time.Hour)) // past the 1 h heuristic lifetime
	serve(h, "GET", "/logo.png", "Cookie", "sid=1")
	w := serve(h, "GET", "/logo.png")
	if cs := w.Header().Get("Cache-Status"); !strings.Contains(cs, "fwd=stale") || w.Body.String() != "logo" {
		t.Fatalf("after a cookie revalidation: %q %q (origin calls %d): the shared entry was evicted", cs, w.Body.String(), calls.Load())
	}
}

// SWR: a trigger with Cache-Control: no-store must not evict the entry:
// the next request is still served from it.
func TestSWRNoStoreEvicts(t *testing.T) {
	clk := &clock{now: t0}
	h, _ := handlerProxy(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Date", clk.Now().Format(http.TimeFormat))
		w.Header().Set("Cache-Control", "max-age=10, stale-while-revalidate=600")
		io.WriteString(w, "page")
	}, func(c *Config) { c.Now = clk.Now })
	serve(h, "GET", "/p")
	clk.Set(t0.Add(20 * time.Second))
	serve(h, "GET", "/p", "Cache-Control", "no-store")
	w := serve(h, "GET", "/p")
	if cs := w.Header().Get("Cache-Status"); !strings.Contains(cs, "hit") {
		t.Fatalf("after an SWR trigger with no-store: %q: the entry was evicted", cs)
	}
}

// HTTP semantics during a trimming fill and on stored entries.
func TestSharedEntrySemantics(t *testing.T) {
	h, _ := handlerProxy(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "public, max-age=60")
		w.Header().Set("ETag", `"e"`)
		if r.URL.Path == "/small" {
			http.ServeContent(w, r, "", time.Time{}, strings.NewReader("0123456789"))
			return
		}
		if r.Header.Get("If-None-Match") == `"e"` {
			w.WriteHeader(304)
			return
		}
		if r.Method == "HEAD" {
			return
		}
		streamChunks(w, 40, 10*time.Millisecond)
	}, func(c *Config) { c.MaxObjectBytes = 64 << 10 })
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "http://example.com/big", nil))
	}()
	waitUntil(t, "the fill of /big trims", func() bool { _, trimming := h.fillOf("http://example.com/big"); return trimming })
	for _, c := range []struct {
		m    string
		hdr  []string
		code int
	}{{"HEAD", nil, 200}, {"GET", []string{"If-None-Match", `"e"`}, 304}, {"HEAD", []string{"If-None-Match", `"e"`}, 304}} {
		w := serve(h, c.m, "/big", c.hdr...)
		if w.Code != c.code || w.Body.Len() != 0 {
			t.Errorf("during trim: %s %v -> %d, %d body bytes (%q); want %d, none", c.m, c.hdr, w.Code, w.Body.Len(), w.Header().Get("Cache-Status"), c.code)
		}
	}
	wg.Wait()
	h.Wait()
	serve(h, "GET", "/small")
	for _, c := range []struct {
		hdr  []string
		code int
		body string
	}{
		{[]string{"Range", "bytes=0-1"}, 206, "01"},
		{[]string{"Range", "bytes=0-1", "Range", "bytes=2-3"}, 200, "0123456789"}, // two Range fields: ignored (RFC 9110 §14.2)
		{[]string{"If-None-Match", `"e"`}, 304, ""},
		{[]string{"Range", "bytes=0-1", "If-Range", `"e"`}, 206, "01"},
	} {
		w := serve(h, "GET", "/small", c.hdr...)
		if w.Code != c.code || w.Body.String() != c.body || !strings.Contains(w.Header().Get("Cache-Status"), "hit") {
			t.Errorf("stored: %v -> %d %q %q; want %d %q from the store", c.hdr, w.Code, w.Body.String(), w.Header().Get("Cache-Status"), c.code, c.body)
		}
	}
	w := serve(h, "HEAD", "/small")
	if w.Code != 200 || w.Body.Len() != 0 || w.Header().Get("Content-Length") != "10" {
		t.Errorf("stored HEAD -> %d, %d body bytes, Content-Length %q", w.Code, w.Body.Len(), w.Header().Get("Content-Length"))
	}
	if b := h.Buffered(); b != 0 {
		t.Errorf("%d bytes still charged to the buffer budget", b)
	}
}
