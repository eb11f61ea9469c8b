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

// A cookie-bearing revalidation of a heuristic entry (304) evicts it for everyone.
func TestRegress2CookieEvictsHeuristic(t *testing.T) {
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
	t.Logf("after a cookie revalidation: %q (origin calls %d)", w.Header().Get("Cache-Status"), calls.Load())
}

// SWR: a trigger with Cache-Control: no-store evicts the entry.
func TestRegress2SWRNoStoreEvicts(t *testing.T) {
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
	t.Logf("after an SWR trigger with no-store: %q", w.Header().Get("Cache-Status"))
}

// HTTP semantics during a trimming fill and on stored entries.
func TestRegress2Semantics(t *testing.T) {
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
	time.Sleep(150 * time.Millisecond)
	for _, c := range []struct {
		m   string
		hdr []string
	}{{"HEAD", nil}, {"GET", []string{"If-None-Match", `"e"`}}, {"HEAD", []string{"If-None-Match", `"e"`}}} {
		w := serve(h, c.m, "/big", c.hdr...)
		t.Logf("during trim: %s %v -> %d len %d %q", c.m, c.hdr, w.Code, w.Body.Len(), w.Header().Get("Cache-Status"))
	}
	wg.Wait()
	h.Wait()
	serve(h, "GET", "/small")
	for _, hdr := range [][]string{{"Range", "bytes=0-1"}, {"Range", "bytes=0-1", "Range", "bytes=2-3"}, {"If-None-Match", `"e"`}, {"Range", "bytes=0-1", "If-Range", `"e"`}} {
		w := serve(h, "GET", "/small", hdr...)
		t.Logf("stored: %v -> %d %q %q", hdr, w.Code, w.Body.String(), w.Header().Get("Cache-Status"))
	}
	w := serve(h, "HEAD", "/small")
	t.Logf("stored HEAD -> %d len %d CL %q", w.Code, w.Body.Len(), w.Header().Get("Content-Length"))
	t.Logf("Buffered %d", h.Buffered())
}
