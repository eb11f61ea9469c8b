package proxy

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Regression test for a bug found in review: fills release their upstream slot once headers are in; a trimming
// fill then holds an origin connection and an uncharged window per slow
// reader, so MaxInflight and MaxBufferedBytes bound neither.
func TestHostileTrimFillsBypassInflightAndBudget(t *testing.T) {
	var active, peak atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := active.Add(1)
		defer active.Add(-1)
		for {
			p := peak.Load()
			if n <= p || peak.CompareAndSwap(p, n) {
				break
			}
		}
		w.Header().Set("Cache-Control", "public, max-age=60")
		streamChunks(w, 2048, 0) // 64 MiB, chunked
	}))
	defer srv.Close()
	cfg := DefaultConfig()
	cfg.MaxObjectBytes = 64 << 10
	cfg.MaxInflight = 2
	cfg.MaxBufferedBytes = 1 << 20
	store := NewStore(64<<20, 8)
	h := New(cfg, store, &originFetcher{base: srv.URL, client: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 100}}}, NewMetrics(prometheus.NewRegistry(), store), nil)

	const n = 40
	release := make(chan struct{})
	var wg sync.WaitGroup
	var codes sync.Map
	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { recover() }()
			w := &stallWriter{ResponseRecorder: httptest.NewRecorder(), release: release}
			h.ServeHTTP(w, httptest.NewRequest("GET", fmt.Sprintf("http://example.com/big?%d", i), nil))
			codes.Store(i, w.Code)
		}()
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(1500 * time.Millisecond)
	runtime.GC()
	var during runtime.MemStats
	runtime.ReadMemStats(&during)
	t.Logf("MaxInflight=%d: concurrent origin responses in progress=%d (peak %d); Buffered()=%d (budget %d); heap growth %.1f MiB",
		cfg.MaxInflight, active.Load(), peak.Load(), h.Buffered(), cfg.MaxBufferedBytes, float64(during.HeapInuse-before.HeapInuse)/(1<<20))
	time.Sleep(10 * time.Millisecond)
	if active.Load() > int64(cfg.MaxInflight) {
		t.Errorf("origin connections in use exceed MaxInflight")
	}
	close(release)
	wg.Wait()
	hist := map[int]int{}
	codes.Range(func(k, v any) bool { hist[v.(int)]++; return true })
	t.Logf("client status codes: %v", hist)
	h.Wait()
}

// stallWriter is a client that reads nothing until release.
type stallWriter struct {
	*httptest.ResponseRecorder
	release chan struct{}
}

func (s *stallWriter) Write(p []byte) (int, error) { <-s.release; return len(p), nil }
