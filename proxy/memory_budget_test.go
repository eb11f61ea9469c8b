package proxy

import (
	"bytes"
	"compress/gzip"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// stalledWriter is a client that accepts the head and then does not read:
// its first body write blocks until release is closed, and bytes are
// dropped (the test measures the handler's memory, not the client's).
type stalledWriter struct {
	hdr     http.Header
	code    int
	n       int
	release chan struct{}
	stalled atomic.Bool // a Write is waiting for release
}

func (w *stalledWriter) Header() http.Header { return w.hdr }
func (w *stalledWriter) WriteHeader(c int) {
	if w.code == 0 {
		w.code = c
	}
}
func (w *stalledWriter) Write(p []byte) (int, error) {
	if w.code == 0 {
		w.code = 200
	}
	w.stalled.Store(true)
	<-w.release
	w.n += len(p)
	return len(p), nil
}

// TestDecodedFormsAreChargedBeforeTheyExist: twelve identity clients of
// distinct stored gzip objects that decode to 31 MiB each, all reading
// slowly, with a 16 MiB buffer budget. Before the fix each decoded its
// object into a growing buffer and only then asked the budget (about 600
// MB of heap); now the decode stops when the budget is spent, so the heap
// stays near the budget and the clients that did not fit get 503.
func TestDecodedFormsAreChargedBeforeTheyExist(t *testing.T) {
	const decoded, budget, clients = 31 << 20, 16 << 20, 12
	var plain bytes.Buffer
	for plain.Len() < decoded {
		plain.WriteString("<p>a line of a large page that compresses well, number ")
		plain.WriteString(strings.Repeat("x", plain.Len()%13))
		plain.WriteString("</p>\n")
	}
	var gz bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&gz, gzip.BestSpeed)
	_, _ = zw.Write(plain.Bytes()[:decoded])
	_ = zw.Close()
	p := newTestProxy(t, func(c *Config) {
		withCompression(c)
		c.MaxBufferedBytes = budget
	})
	p.origin.set(originResp{header: map[string]string{"Cache-Control": "max-age=600", "Content-Type": "text/html", "Content-Encoding": "gzip"}, body: gz.String()})
	for i := range clients {
		if w := p.do("GET", "/big/"+string(rune('a'+i)), map[string]string{"Accept-Encoding": "gzip"}); w.Code != 200 {
			t.Fatalf("fill %d: %d", i, w.Code)
		}
	}
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	base := ms.HeapInuse

	release := make(chan struct{})
	var wg sync.WaitGroup
	var peakHeap atomic.Uint64
	stop := make(chan struct{})
	go func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(5 * time.Millisecond):
			}
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			if ms.HeapInuse > peakHeap.Load() {
				peakHeap.Store(ms.HeapInuse)
			}
			if b := p.h.Buffered(); b > budget {
				t.Errorf("buffer budget exceeded: %d bytes charged", b)
			}
		}
	}()
	ws := make([]*stalledWriter, clients)
	for i := range clients {
		ws[i] = &stalledWriter{hdr: http.Header{}, release: release}
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := httptest.NewRequest("GET", "http://example.com/big/"+string(rune('a'+i)), nil)
			r.Header.Set("Accept-Encoding", "identity")
			p.h.ServeHTTP(ws[i], r)
		}()
	}
	waitUntil(t, "every client stalled on its body or its refusal", func() bool {
		for _, w := range ws {
			if !w.stalled.Load() {
				return false
			}
		}
		return true
	})
	close(release)
	wg.Wait()
	close(stop)
	served, refused := 0, 0
	for _, w := range ws {
		switch {
		case w.code == 200 && w.n == decoded && w.hdr.Get("Content-Encoding") == "":
			served++
		case w.code == http.StatusServiceUnavailable:
			refused++
		default:
			t.Errorf("a client got %d with %d bytes, Content-Encoding %q", w.code, w.n, w.hdr.Get("Content-Encoding"))
		}
	}
	grown := int64(peakHeap.Load()) - int64(base)
	t.Logf("heap grew %d MiB at most over %d MiB before; %d clients served, %d refused (503); buffer budget %d MiB", grown>>20, base>>20, served, refused, budget>>20)
	if grown > 2*budget+8<<20 {
		t.Errorf("the heap grew by %d MiB for a %d MiB budget: decoded bytes were allocated before they were charged", grown>>20, budget>>20)
	}
	if p.h.Buffered() != 0 {
		t.Errorf("%d bytes still charged after every client ended", p.h.Buffered())
	}
}
