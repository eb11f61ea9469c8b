// A review found (now mended): with limits.max_inflight_per_client on, a client holds as many
// upstream fetches as it likes by leaving range requests for slices of a
// sliced object whose origin is slow: releaseClientOf (dccfb33) moves a
// gone request's count to the "left" count, which only lead and servePass
// check (mayLead); a slice fetch (slicer.slice -> fetchSliceAs, under
// context.WithoutCancel for up to origin.refresh_timeout, 30 s) checks
// nothing, so the handler goes on fetching after its count went.
//
// Steps: slice_size 1024, limits.max_inflight_per_client 1; prime a
// 10 KiB object (Range bytes=0-9: manifest and slice 0 stored). The origin
// then hangs on every Range request past slice 0. One client address asks
// "Range: bytes=K*1024-K*1024+9" for slices 1..8, one at a time, each
// abandoned after 150 ms (curl -m, a player seeking).
// Expected: the client holds at most about twice its bound of upstream
// fetches (docs/operations.md, clientLimiter.mayLead: "a client holds at
// most about twice its bound of upstream slots, never the node's"): with
// bound 1, at most 3 of the origin's Range requests hang at once, the
// rest refused 429. Before dccfb33 the second request was refused 429 (the
// first still counted).
// Got: all 8 reach the origin and hang at once, for up to refresh_timeout
// each; h.clients.left holds 8 for a bound of 1, and n is 0.
// Why it matters: one address takes every upstream slot of the node
// (limits.max_inflight) by seeking through a large video, and every other
// client's misses are refused 503: the per-client bound is what exists to
// stop exactly that.
package proxy

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestS35GoneClientsSliceFetchesAreNotBounded(t *testing.T) {
	const slice, size = 1024, 10 * 1024
	body := []byte(strings.Repeat("v", size))
	release := make(chan struct{})
	var hanging, maxHanging atomic.Int64
	h, _ := handlerProxy(t, func(w http.ResponseWriter, r *http.Request) {
		if rg := r.Header.Get("Range"); rg != "" && !strings.HasPrefix(rg, "bytes=0-") {
			n := hanging.Add(1)
			for {
				m := maxHanging.Load()
				if n <= m || maxHanging.CompareAndSwap(m, n) {
					break
				}
			}
			select { // an origin slow to answer a seek
			case <-release:
			case <-time.After(60 * time.Second):
			}
			hanging.Add(-1)
		}
		w.Header().Set("Cache-Control", "max-age=600")
		w.Header().Set("Content-Type", "application/octet-stream")
		http.ServeContent(w, r, "", time.Date(2006, 1, 2, 15, 4, 5, 0, time.UTC), bytes.NewReader(body))
	}, func(c *Config) {
		c.SliceBytes = slice
		c.MaxInflightPerClient = 1
	})
	var wg sync.WaitGroup
	t.Cleanup(func() { close(release); wg.Wait(); h.Wait() })
	ask := func(ctx context.Context, rg string) *httptest.ResponseRecorder {
		r := httptest.NewRequest("GET", "http://example.com/video", nil).WithContext(ctx)
		r.RemoteAddr = "192.0.2.35:40000"
		r.Header.Set("Range", rg)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w
	}
	if w := ask(context.Background(), "bytes=0-9"); w.Code != http.StatusPartialContent {
		t.Fatalf("prime: %d %s", w.Code, w.Body.String())
	}
	h.Wait()
	refused := 0
	var answered atomic.Int64
	for k := 1; k <= 8; k++ {
		ctx, cancel := context.WithTimeout(context.Background(), 150*time.Millisecond)
		a := k * slice
		got := make(chan int, 1)
		wg.Go(func() {
			code := ask(ctx, "bytes="+strconv.Itoa(a)+"-"+strconv.Itoa(a+9)).Code
			answered.Add(1)
			got <- code
		})
		<-ctx.Done()
		cancel()
		select {
		case code := <-got:
			if code == http.StatusTooManyRequests {
				refused++
			}
		case <-time.After(500 * time.Millisecond):
			// still being served after its client left
		}
	}
	// Give every request that is not refused the time to reach the origin:
	// wait until each has been answered (turned away) or hangs there, and
	// every fetch the proxy still holds for the client is one that hangs.
	// (Waiting for hanging+refused to reach 8 waited the whole 10 s: the
	// requests turned away are answered 503 once their client left.)
	atOrigin := func() bool {
		h.clients.mu.Lock()
		held := int64(h.clients.n["192.0.2.35"] + h.clients.left["192.0.2.35"])
		h.clients.mu.Unlock()
		return answered.Load()+hanging.Load() == 8 && held == hanging.Load()
	}
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) && hanging.Load()+int64(refused) < 8 && !atOrigin() {
		time.Sleep(20 * time.Millisecond)
	}
	h.clients.mu.Lock()
	n, left := h.clients.n["192.0.2.35"], h.clients.left["192.0.2.35"]
	h.clients.mu.Unlock()
	t.Logf("origin Range requests hanging at once: %d (max %d); refused 429: %d; clients.n=%d clients.left=%d", hanging.Load(), maxHanging.Load(), refused, n, left)
	if maxHanging.Load() > 3 {
		t.Errorf("one client (max_inflight_per_client 1) that left its seeks holds %d upstream fetches at once, want at most about twice its bound (3); %d refused 429", maxHanging.Load(), refused)
	}
}

// A review found (now mended): the same with no object primed: a Range request for a URL not
// in the store is answered by a probe of its first slice (probeSliced ->
// probe, under context.WithoutCancel for up to refresh_timeout), which no
// bound checks either.
//
// Steps: slice_size 1024, limits.max_inflight_per_client 1, an origin
// that hangs; one client address asks "Range: bytes=0-9" of /v?n=1 ..
// /v?n=8 one at a time, each abandoned after 150 ms.
// Expected: at most about twice the bound (3) of the origin's requests
// hang at once, the rest refused 429 (before dccfb33: 1, 7 refused).
// Got: 8 hang at once, clients.left=8 for a bound of 1.
// Why it matters: any client takes all of limits.max_inflight with short
// range requests it abandons: any cache-busting query will do.
func TestS35GoneClientsRangeProbesAreNotBounded(t *testing.T) {
	release := make(chan struct{})
	var hanging, maxHanging atomic.Int64
	h, _ := handlerProxy(t, func(w http.ResponseWriter, r *http.Request) {
		n := hanging.Add(1)
		for {
			m := maxHanging.Load()
			if n <= m || maxHanging.CompareAndSwap(m, n) {
				break
			}
		}
		select {
		case <-release:
		case <-time.After(60 * time.Second):
		}
		hanging.Add(-1)
		w.Header().Set("Cache-Control", "max-age=600")
		http.ServeContent(w, r, "", time.Date(2006, 1, 2, 15, 4, 5, 0, time.UTC), bytes.NewReader(make([]byte, 8192)))
	}, func(c *Config) {
		c.SliceBytes = 1024
		c.MaxInflightPerClient = 1
	})
	var wg sync.WaitGroup
	t.Cleanup(func() { close(release); wg.Wait(); h.Wait() })
	refused := 0
	for k := 1; k <= 8; k++ {
		ctx, cancel := context.WithTimeout(context.Background(), 150*time.Millisecond)
		got := make(chan int, 1)
		wg.Go(func() {
			r := httptest.NewRequest("GET", "http://example.com/v?n="+strconv.Itoa(k), nil).WithContext(ctx)
			r.RemoteAddr = "192.0.2.36:40000"
			r.Header.Set("Range", "bytes=0-9")
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			got <- w.Code
		})
		<-ctx.Done()
		cancel()
		select {
		case code := <-got:
			if code == http.StatusTooManyRequests {
				refused++
			}
		case <-time.After(500 * time.Millisecond):
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) && hanging.Load()+int64(refused) < 8 {
		time.Sleep(20 * time.Millisecond)
	}
	h.clients.mu.Lock()
	n, left := h.clients.n["192.0.2.36"], h.clients.left["192.0.2.36"]
	h.clients.mu.Unlock()
	t.Logf("origin requests hanging at once: %d (max %d); refused 429: %d; clients.n=%d clients.left=%d", hanging.Load(), maxHanging.Load(), refused, n, left)
	if maxHanging.Load() > 3 {
		t.Errorf("one client (max_inflight_per_client 1) that left its range requests holds %d upstream fetches at once, want at most about twice its bound (3); %d refused 429", maxHanging.Load(), refused)
	}
}
