package proxy

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Stress: random origin behaviour x random client behaviour; afterwards the
// buffer budget must be back to 0 (minus what is legitimately pinned: nothing)
// and no fill may stay registered.
func TestHostileStress(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		size, _ := strconv.Atoi(q.Get("size"))
		mode := q.Get("mode")
		w.Header().Set("Cache-Control", "public, max-age=1")
		if q.Get("cl") == "1" {
			w.Header().Set("Content-Length", strconv.Itoa(size))
		}
		switch mode {
		case "500":
			w.WriteHeader(500)
			return
		case "304":
			w.Header().Set("ETag", `"x"`)
			if r.Header.Get("If-None-Match") == `"x"` {
				w.WriteHeader(304)
				return
			}
		}
		chunk := strings.Repeat("y", 8<<10)
		sent := 0
		for sent < size {
			n := min(len(chunk), size-sent)
			if mode == "cut" && sent > size/2 {
				panic(http.ErrAbortHandler)
			}
			if _, err := w.Write([]byte(chunk[:n])); err != nil {
				return
			}
			sent += n
			if rand.IntN(4) == 0 {
				w.(http.Flusher).Flush()
				time.Sleep(time.Millisecond)
			}
		}
	}))
	defer srv.Close()
	cfg := DefaultConfig()
	cfg.MaxObjectBytes = 128 << 10
	cfg.MaxBufferedBytes = 512 << 10
	cfg.CoalesceTimeout = 5 * time.Second
	store := NewStore(256<<10, 4)
	h := New(cfg, store, &originFetcher{base: srv.URL, client: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}}, NewMetrics(prometheus.NewRegistry(), store), nil)

	g0 := runtime.NumGoroutine()
	var wg sync.WaitGroup
	deadline := time.Now().Add(6 * time.Second)
	var mu sync.Mutex
	panics := map[string]int{}
	for c := 0; c < 24; c++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(c), 7))
			for time.Now().Before(deadline) {
				sizes := []int{0, 100, 40 << 10, 200 << 10, 700 << 10}
				modes := []string{"ok", "ok", "500", "304", "cut"}
				u := fmt.Sprintf("/o%d?size=%d&mode=%s&cl=%d", rng.IntN(3), sizes[rng.IntN(len(sizes))], modes[rng.IntN(len(modes))], rng.IntN(2))
				method := "GET"
				if rng.IntN(6) == 0 {
					method = "HEAD"
				}
				r := httptest.NewRequest(method, "http://example.com"+u, nil)
				switch rng.IntN(6) {
				case 0:
					r.Header.Set("Range", "bytes=10-20")
				case 1:
					r.Header.Set("If-None-Match", `"x"`)
				case 2:
					r.Header.Set("Cache-Control", "no-cache")
				}
				ctx, cancel := context.WithCancel(r.Context())
				if rng.IntN(4) == 0 {
					time.AfterFunc(time.Duration(rng.IntN(20))*time.Millisecond, cancel)
				}
				r = r.WithContext(ctx)
				var w http.ResponseWriter = httptest.NewRecorder()
				if rng.IntN(5) == 0 {
					w = &blockingWriter{ResponseRecorder: httptest.NewRecorder(), d: 5 * time.Millisecond}
				}
				func() {
					defer func() {
						if p := recover(); p != nil {
							mu.Lock()
							panics[fmt.Sprint(p)]++
							mu.Unlock()
						}
					}()
					done := make(chan struct{})
					go func() {
						defer close(done)
						defer func() {
							if p := recover(); p != nil {
								mu.Lock()
								panics[fmt.Sprint(p)]++
								mu.Unlock()
							}
						}()
						h.ServeHTTP(w, r)
					}()
					select {
					case <-done:
					case <-time.After(20 * time.Second):
						mu.Lock()
						panics["HANG "+u]++
						mu.Unlock()
					}
				}()
				cancel()
			}
		}()
	}
	wg.Wait()
	h.Wait()
	time.Sleep(200 * time.Millisecond)
	h.co.mu.Lock()
	nf := len(h.co.fills)
	h.co.mu.Unlock()
	t.Logf("panics: %v; fills registered after: %d; Buffered after: %d; goroutines %d -> %d", panics, nf, h.Buffered(), g0, runtime.NumGoroutine())
	if nf != 0 || h.Buffered() != 0 {
		t.Errorf("leak: fills=%d buffered=%d", nf, h.Buffered())
	}
	for k := range panics {
		if k != "net/http: abort Handler" {
			t.Errorf("unexpected: %s", k)
		}
	}
}
