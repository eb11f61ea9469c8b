package proxy

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/edgecache/edge/origin"
	"github.com/prometheus/client_golang/prometheus"
)

type idleFetcher struct {
	originFetcher
	idle time.Duration
}

func (f *idleFetcher) Fetch(ctx context.Context, fr FetchRequest) (Result, error) {
	ctx, cancel := context.WithCancel(ctx)
	res, err := f.originFetcher.Fetch(ctx, fr)
	if err != nil {
		cancel()
		return res, err
	}
	res.Resp.Body = origin.WithIdleTimeout(res.Resp.Body, f.idle, cancel)
	return res, nil
}

// blockingWriter is a client that stops reading: each Write blocks for d.
type blockingWriter struct {
	*httptest.ResponseRecorder
	d time.Duration
	n atomic.Int64
}

func (b *blockingWriter) Write(p []byte) (int, error) {
	time.Sleep(b.d)
	if b.n.Load() > 64<<10 {
		return 0, errors.New("the slow client gives up") // bounds the test's time
	}
	b.n.Add(int64(len(p)))
	return len(p), nil
}

func bigChunkedOrigin(t *testing.T, size int) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "public, max-age=60")
		streamChunks(w, (size+chunkSize-1)/chunkSize, 5*time.Millisecond)
	}))
	t.Cleanup(srv.Close)
	return srv
}

// One client that stops reading a shared, too-large (trimming) fill must
// not cut another client's download short (before the fix the origin
// body's idle timer fired while the pump waited for the slow reader).
func TestHostileSlowReaderKillsSharedTrimFill(t *testing.T) {
	srv := bigChunkedOrigin(t, 4<<20)
	cfg := DefaultConfig()
	cfg.MaxObjectBytes = 64 << 10
	store := NewStore(64<<20, 8)
	f := &idleFetcher{originFetcher{base: srv.URL, client: &http.Client{Transport: &http.Transport{}}}, 500 * time.Millisecond}
	h := New(cfg, store, f, NewMetrics(prometheus.NewRegistry(), store), nil)

	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // attacker, the leader
		defer wg.Done()
		defer func() { recover() }()
		r := httptest.NewRequest("GET", "http://example.com/big", nil)
		h.ServeHTTP(&blockingWriter{ResponseRecorder: httptest.NewRecorder(), d: 2 * time.Second}, r)
	}()
	time.Sleep(20 * time.Millisecond)
	var aborted any
	victim := httptest.NewRecorder()
	func() {
		defer func() { aborted = recover() }()
		r := httptest.NewRequest("GET", "http://example.com/big", nil)
		h.ServeHTTP(victim, r)
	}()
	t.Logf("victim: status %d, %d of %d bytes, Cache-Status %q, panic %v", victim.Code, victim.Body.Len(), 4<<20, victim.Header().Get("Cache-Status"), aborted)
	if aborted != nil || victim.Body.Len() != 4<<20 {
		t.Errorf("a fast client's download was cut short because another client stopped reading")
	}
	wg.Wait()
	h.Wait()
}
