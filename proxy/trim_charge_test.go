package proxy

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// Regression test for a bug found in review: a trimming fill kept its
// pre-trim charge after the bytes were freed, so the budget never came
// back. The charge now follows the memory really held: while stalled
// readers hold unread bytes they count (new fills stream uncached, the
// documented trade-off), and once they are gone the budget is whole again
// and small pages are stored.
func TestHostileTrimFillOvercharge(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "public, max-age=60")
		if r.URL.Path == "/small" {
			_, _ = io.WriteString(w, "small page")
			return
		}
		streamChunks(w, 256, 0) // 8 MiB chunked
	}))
	defer srv.Close()
	cfg := DefaultConfig()
	cfg.MaxObjectBytes = 1 << 20
	cfg.MaxBufferedBytes = 4 << 20
	store := NewStore(64<<20, 8)
	h := New(cfg, store, &originFetcher{base: srv.URL, client: &http.Client{Transport: &http.Transport{}}}, NewMetrics(prometheus.NewRegistry(), store), nil)
	release := make(chan struct{})
	var wg sync.WaitGroup
	for i := 0; i < 4; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			h.ServeHTTP(&stallWriter{ResponseRecorder: httptest.NewRecorder(), release: release}, httptest.NewRequest("GET", fmt.Sprintf("http://example.com/big?%d", i), nil))
		}()
		target := fmt.Sprintf("http://example.com/big?%d", i)
		waitUntil(t, target+" trims behind its stalled reader", func() bool { _, trimming := h.fillOf(target); return trimming })
	}
	t.Logf("4 stalled clients: Buffered()=%d of %d", h.Buffered(), cfg.MaxBufferedBytes)
	w1 := httptest.NewRecorder()
	h.ServeHTTP(w1, httptest.NewRequest("GET", "http://example.com/small", nil))
	w2 := httptest.NewRecorder()
	h.ServeHTTP(w2, httptest.NewRequest("GET", "http://example.com/small", nil))
	t.Logf("small page while stalled: %q then %q", w1.Header().Get("Cache-Status"), w2.Header().Get("Cache-Status"))
	if b := h.Buffered(); b > cfg.MaxBufferedBytes+4*(trimWindow+blockSize) {
		t.Errorf("Buffered() = %d with 4 stalled readers, beyond the budget plus their windows", b)
	}
	close(release)
	wg.Wait()
	h.Wait()
	if b := h.Buffered(); b != 0 {
		t.Errorf("Buffered() = %d after the stalled readers left, want 0", b)
	}
	h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "http://example.com/small", nil))
	h.Wait()
	w3 := httptest.NewRecorder()
	h.ServeHTTP(w3, httptest.NewRequest("GET", "http://example.com/small", nil))
	if !strings.Contains(w3.Header().Get("Cache-Status"), "hit") {
		t.Errorf("after the stalled readers left, a small page is still not stored: %q", w3.Header().Get("Cache-Status"))
	}
	h.Wait()
}
