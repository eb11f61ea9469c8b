package proxy

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// Regression test for a bug found in the second review: a GET with a body to a URL that is passed (uncacheable/too-large/authorization)
// now fails with 502: dropUnreadBody makes the body return errBodyDropped, but
// servePass still forwards it.
func TestGetWithBodyPass(t *testing.T) {
	h, calls := handlerProxy(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "no-store")
		io.WriteString(w, "ok")
	}, nil)
	serve(h, "GET", "/api") // learns hit-for-pass
	r := httptest.NewRequest("GET", "http://example.com/api", strings.NewReader(`{"q":1}`))
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	h.Wait()
	t.Logf("status %d %q cache-status %q origin calls %d", w.Code, w.Body.String(), w.Header().Get("Cache-Status"), calls.Load())
	if w.Code != 200 {
		t.Errorf("GET with body on a pass URL: %d", w.Code)
	}
}

// Regression test for a bug found in the second review: Range on an object known too large (Content-Length) needs two upstream slots.
func TestRangeTooLargeTwoSlots(t *testing.T) {
	body := strings.Repeat("x", 200<<10)
	h, _ := handlerProxy(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "public, max-age=60")
		http.ServeContent(w, r, "", time.Time{}, strings.NewReader(body))
	}, func(c *Config) { c.MaxObjectBytes = 64 << 10; c.MaxInflight = 1 })
	w := serve(h, "GET", "/big", "Range", "bytes=0-9")
	t.Logf("first Range: %d %q", w.Code, w.Header().Get("Cache-Status"))
	if w.Code != http.StatusPartialContent {
		t.Errorf("Range on a too-large object with one free slot: %d", w.Code)
	}
}

// Regression test for a bug found in the second review: same with a chunked (trimming) body: the leader's own pump holds the slot.
func TestRangeTrimLeaderTwoSlots(t *testing.T) {
	h, _ := handlerProxy(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "public, max-age=60")
		if r.Header.Get("Range") != "" {
			w.Header().Set("Content-Range", "bytes 0-9/1048576")
			w.WriteHeader(206)
			io.WriteString(w, "0123456789")
			return
		}
		streamChunks(w, 32, 5*time.Millisecond)
	}, func(c *Config) { c.MaxObjectBytes = 64 << 10; c.MaxInflight = 1 })
	w := serve(h, "GET", "/big", "Range", "bytes=0-9")
	t.Logf("Range leader: %d %q body %d", w.Code, w.Header().Get("Cache-Status"), w.Body.Len())
	if w.Code != http.StatusPartialContent {
		t.Errorf("Range leader on a trimming fill with one free slot: %d", w.Code)
	}
}

// Regression test for a bug found in the second review: an anonymous request with no-cache,no-store evicts a shared entry (all variants) via a 304.
func TestNoStoreRequestEvicts(t *testing.T) {
	h, calls := handlerProxy(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=600")
		w.Header().Set("ETag", `"v1"`)
		if r.Header.Get("If-None-Match") == `"v1"` {
			w.WriteHeader(304)
			return
		}
		io.WriteString(w, "page")
	}, nil)
	serve(h, "GET", "/p")
	serve(h, "GET", "/p", "Cache-Control", "no-cache, no-store")
	before := calls.Load()
	w := serve(h, "GET", "/p")
	t.Logf("after attacker: %q, origin calls %d->%d", w.Header().Get("Cache-Status"), before, calls.Load())
	if !strings.Contains(w.Header().Get("Cache-Status"), "hit") {
		t.Errorf("one anonymous request evicted the shared entry")
	}
}

// Buffered drift over mixed trim workloads.
func TestBufferedDrift(t *testing.T) {
	h, _ := handlerProxy(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "public, max-age=60")
		n := 40
		if r.URL.Query().Get("n") != "" {
			fmt.Sscan(r.URL.Query().Get("n"), &n)
		}
		chunk := strings.Repeat("x", 16<<10)
		for i := 0; i < n; i++ {
			if _, err := w.Write([]byte(chunk)); err != nil {
				return
			}
			if i%4 == 0 {
				w.(http.Flusher).Flush()
			}
		}
		if r.URL.Query().Get("cut") != "" {
			panic(http.ErrAbortHandler)
		}
	}, func(c *Config) {
		c.MaxObjectBytes = 128 << 10
		c.MaxBufferedBytes = 512 << 10
		c.CoalesceTimeout = 5 * time.Second
	})
	var wg sync.WaitGroup
	for i := 0; i < 60; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { recover() }()
			q := fmt.Sprintf("/o%d?n=%d", i%5, []int{2, 8, 40, 100}[i%4])
			if i%7 == 0 {
				q += "&cut=1"
			}
			var hdr []string
			switch i % 6 {
			case 1:
				hdr = []string{"Range", "bytes=0-9"}
			case 2:
				hdr = []string{"If-None-Match", `"x"`}
			}
			method := "GET"
			if i%5 == 3 {
				method = "HEAD"
			}
			r := httptest.NewRequest(method, "http://example.com"+q, nil)
			for j := 0; j+1 < len(hdr); j += 2 {
				r.Header.Set(hdr[j], hdr[j+1])
			}
			var w http.ResponseWriter = httptest.NewRecorder()
			if i%3 == 0 {
				w = &blockingWriter{ResponseRecorder: httptest.NewRecorder(), d: 3 * time.Millisecond}
			}
			h.ServeHTTP(w, r)
		}()
		time.Sleep(time.Millisecond)
	}
	wg.Wait()
	h.Wait()
	t.Logf("Buffered after = %d, sem len %d", h.Buffered(), h.upstream.inFlight())
	if h.Buffered() != 0 || h.upstream.inFlight() != 0 {
		t.Errorf("drift: buffered %d, slots held %d", h.Buffered(), h.upstream.inFlight())
	}
}
