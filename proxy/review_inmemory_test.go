package proxy

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

func reviewBody(path string, n int) []byte {
	b := make([]byte, n)
	seed := []byte(path)
	for i := range b {
		b[i] = seed[i%len(seed)] ^ byte(i)
	}
	return b
}

// sizedFetcher: an in-memory answer whose size and headers come from the path.
type sizedFetcher struct {
	size     func(path string) int
	cc       string
	inMemory bool
	lieCL    int64 // >0: ContentLength declared, whatever the body
	calls    atomic.Int64
}

func (s *sizedFetcher) Fetch(_ context.Context, fr FetchRequest) (Result, error) {
	s.calls.Add(1)
	b := reviewBody(fr.Req.URL.Path, s.size(fr.Req.URL.Path))
	cl := int64(len(b))
	if s.lieCL > 0 {
		cl = s.lieCL
	}
	cc := s.cc
	if cc == "" {
		cc = "max-age=600"
	}
	h := http.Header{"Cache-Control": {cc}, "Content-Type": {"application/octet-stream"}}
	return Result{Resp: &http.Response{StatusCode: 200, Header: h, Body: io.NopCloser(bytes.NewReader(b)), ContentLength: cl},
		Keep: true, From: UpstreamPeer, InMemory: s.inMemory}, nil
}

// Many concurrent in-memory fills with a tight buffer budget (so that
// charges race with storageFor's check and some pumps trim) and pooled
// chunks: every client gets its own bytes, stored entries are intact, and
// the budget returns to zero.
func TestReviewInMemoryConcurrentTightBudget(t *testing.T) {
	store := NewStore(256<<20, 4)
	cfg := DefaultConfig()
	cfg.MaxBufferedBytes = 600 << 10
	sizes := []int{0, 1, 4096, 8192, 32767, 32768, 32769, 65536, 100000, 200000, 255 << 10, (256 << 10) - 1, 256 << 10, 300000}
	f := &sizedFetcher{inMemory: true, size: func(p string) int {
		var i int
		fmt.Sscanf(p, "/o/%d", &i)
		return sizes[i%len(sizes)]
	}}
	h := New(cfg, store, f, NewMetrics(prometheus.NewRegistry(), store), nil)
	var wg sync.WaitGroup
	var bad atomic.Int64
	rounds := 3
	if raceDetector {
		rounds = 2
	}
	for round := 0; round < rounds; round++ {
		for i := 0; i < 200; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				p := fmt.Sprintf("/o/%d", i)
				w := httptest.NewRecorder()
				h.ServeHTTP(w, httptest.NewRequest("GET", "http://example.com"+p, nil))
				want := reviewBody(p, sizes[i%len(sizes)])
				if w.Code != 200 || !bytes.Equal(w.Body.Bytes(), want) {
					if bad.Add(1) < 5 {
						t.Errorf("%s: %d, %d bytes (want %d), %s", p, w.Code, w.Body.Len(), len(want), w.Header().Get("Cache-Status"))
					}
				}
			}()
		}
		wg.Wait()
	}
	h.Wait()
	if b := h.buffered.Load(); b != 0 {
		t.Errorf("buffered budget holds %d bytes after all fills", b)
	}
}

// A Fetcher whose body is longer than the declared ContentLength (a
// contract violation by a third-party Fetcher), with InMemory set and
// without: does the leader hang on its own reader? With InMemory it did
// (the synchronous pump trimmed and waited for the leader's reader); the
// pump now reads no more than ContentLength there.
func TestReviewInMemoryLyingLengthDoesNotHang(t *testing.T) {
	for _, inMemory := range []bool{true, false} {
		store := NewStore(64<<20, 4)
		cfg := DefaultConfig()
		cfg.MaxObjectBytes = 64 << 10
		f := &sizedFetcher{inMemory: inMemory, lieCL: 100, size: func(string) int { return 2 << 20 }}
		h := New(cfg, store, f, NewMetrics(prometheus.NewRegistry(), store), nil)
		done := make(chan int)
		go func() {
			w := httptest.NewRecorder()
			h.ServeHTTP(w, httptest.NewRequest("GET", "http://example.com/lie", nil))
			done <- w.Body.Len()
		}()
		select {
		case n := <-done:
			t.Logf("InMemory %v: returned with %d bytes", inMemory, n)
		case <-time.After(5 * time.Second):
			t.Errorf("InMemory %v: the leader hangs on a body longer than its ContentLength", inMemory)
		}
	}
}

// Background revalidation (stale-while-revalidate) of an in-memory answer:
// no reader is taken; the refresh must store the new body and not hang.
func TestReviewInMemoryBackgroundRefresh(t *testing.T) {
	store := NewStore(64<<20, 4)
	cfg := DefaultConfig()
	var now atomic.Int64
	now.Store(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	cfg.Now = func() time.Time { return time.Unix(0, now.Load()) }
	var gen atomic.Int64
	f := &sizedFetcher{inMemory: true, cc: "max-age=1, stale-while-revalidate=600", size: func(string) int { return 1000 + int(gen.Load()) }}
	h := New(cfg, store, f, NewMetrics(prometheus.NewRegistry(), store), nil)
	get := func() (int, string) {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest("GET", "http://example.com/swr", nil))
		return w.Body.Len(), w.Header().Get("Cache-Status")
	}
	get()
	h.Wait()
	gen.Store(5)
	now.Add(int64(10 * time.Second))
	n, cs := get()
	t.Logf("stale: %d %s", n, cs)
	h.Wait()
	n, cs = get()
	if n != 1005 {
		t.Errorf("after the background refresh: %d bytes (%s), want the refreshed 1005", n, cs)
	}
	if b := h.buffered.Load(); b != 0 {
		t.Errorf("buffered %d", b)
	}
}
