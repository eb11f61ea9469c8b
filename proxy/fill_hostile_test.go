package proxy

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Regression test for a bug found in review: a personalized page with no Cache-Control but a Last-Modified is
// stored heuristically and served to another user.
func TestHostileHeuristicPersonalPageShared(t *testing.T) {
	clk := &clock{now: t0}
	h, _ := handlerProxy(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Date", clk.Now().Format(http.TimeFormat))
		w.Header().Set("Last-Modified", t0.Add(-30*24*time.Hour).Format(http.TimeFormat))
		c, _ := r.Cookie("uid")
		_, _ = io.WriteString(w, "account of "+c.Value)
	}, func(c *Config) { c.Now = clk.Now })
	serve(h, "GET", "/account", "Cookie", "uid=alice")
	w := serve(h, "GET", "/account", "Cookie", "uid=bob")
	if strings.Contains(w.Body.String(), "alice") {
		t.Errorf("bob got %q (%s)", w.Body.String(), w.Header().Get("Cache-Status"))
	}
}

// A Range request arriving during a fill that turns out too large to store
// is forwarded with its Range at once (before the fix it waited for the
// whole body, then got 503).
func TestHostileRangeOnLargeChunkedFill(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "public, max-age=60")
		if r.Header.Get("Range") == "bytes=0-99" { // an origin that serves ranges
			w.Header().Set("Content-Range", "bytes 0-99/2097152")
			w.WriteHeader(http.StatusPartialContent)
			_, _ = w.Write([]byte(strings.Repeat("x", 100)))
			return
		}
		streamChunks(w, 64, 30*time.Millisecond) // 2 MiB over ~2 s, chunked
	}))
	defer srv.Close()
	cfg := DefaultConfig()
	cfg.MaxObjectBytes = 64 << 10
	store := NewStore(64<<20, 8)
	h := New(cfg, store, &originFetcher{base: srv.URL, client: &http.Client{Transport: &http.Transport{}}}, NewMetrics(prometheus.NewRegistry(), store), nil)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "http://example.com/video", nil))
	}()
	waitUntil(t, "the fill of /video outgrew what it may keep", func() bool { _, trimming := h.fillOf("http://example.com/video"); return trimming })
	start := time.Now()
	w := httptest.NewRecorder()
	r := httptest.NewRequest("GET", "http://example.com/video", nil)
	r.Header.Set("Range", "bytes=0-99")
	h.ServeHTTP(w, r)
	t.Logf("Range request: %d after %v, Cache-Status %q, %d bytes", w.Code, time.Since(start).Round(time.Millisecond), w.Header().Get("Cache-Status"), w.Body.Len())
	if w.Code != http.StatusPartialContent || w.Body.Len() != 100 {
		t.Errorf("Range request during a large fill: %d, %d bytes", w.Code, w.Body.Len())
	}
	if d := time.Since(start); d > 1500*time.Millisecond {
		t.Errorf("the Range request waited %s, as if for the whole body", d) // the body takes 2 s
	}
	wg.Wait()
	h.Wait()
}

// Regression test for a bug found in review: a purge during a fill is undone when the fill completes.
func TestHostilePurgeDuringFill(t *testing.T) {
	var version atomic.Int32
	h, _ := handlerProxy(t, func(w http.ResponseWriter, r *http.Request) {
		v := version.Load()
		w.Header().Set("Cache-Control", "max-age=600")
		w.Header().Set("Content-Length", "4")
		w.(http.Flusher).Flush()
		time.Sleep(300 * time.Millisecond)
		_, _ = io.WriteString(w, []string{"old!", "new!"}[v])
	}, nil)
	first := make(chan struct{})
	go func() {
		defer close(first)
		serve(h, "GET", "/doc")
	}()
	waitUntil(t, "the origin answered the first request", func() bool { streaming, _ := h.fillOf("http://example.com/doc"); return streaming })
	version.Store(1) // deploy, then purge
	n, _ := h.Purge(PurgeRequest{URL: "http://example.com/doc"})
	<-first // the request that started before the purge is answered
	h.Wait()
	w := serve(h, "GET", "/doc")
	t.Logf("purged %d; after purge: %q %s", n, w.Body.String(), w.Header().Get("Cache-Status"))
	if w.Body.String() == "old!" {
		t.Errorf("content fetched before the purge is served after it")
	}
}
