package proxy

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// discardWriter is a reusable ResponseWriter, so the benchmark measures the
// handler and not a recorder's allocations.
type discardWriter struct {
	h    http.Header
	code int
	n    int
}

func (w *discardWriter) Header() http.Header         { return w.h }
func (w *discardWriter) WriteHeader(code int)        { w.code = code }
func (w *discardWriter) Write(b []byte) (int, error) { w.n += len(b); return len(b), nil }

// SetWriteDeadline is there because net/http's writer has it; the handler
// extends the deadline on every response.
func (w *discardWriter) SetWriteDeadline(time.Time) error { return nil }

func (w *discardWriter) reset() {
	clear(w.h)
	w.code, w.n = 0, 0
}

// BenchmarkHit measures answering a fresh 4 KiB object from the store.
func BenchmarkHit(b *testing.B) {
	p := newTestProxyB(b)
	p.origin.set(originResp{header: map[string]string{"Cache-Control": "max-age=3600", "Content-Type": "text/html", "ETag": `"x"`}, body: strings.Repeat("x", 4096)})
	req := httptest.NewRequest("GET", "http://example.com/obj?b=2&a=1", nil)
	w := &discardWriter{h: make(http.Header)}
	p.h.ServeHTTP(w, req)
	b.ReportAllocs()
	b.SetBytes(4096)
	b.ResetTimer()
	for b.Loop() {
		w.reset()
		p.h.ServeHTTP(w, req)
	}
	if w.code != 200 || w.n != 4096 {
		b.Fatalf("got %d, %d bytes", w.code, w.n)
	}
}

// BenchmarkHitParallel is BenchmarkHit from GOMAXPROCS goroutines.
func BenchmarkHitParallel(b *testing.B) {
	p := newTestProxyB(b)
	p.origin.set(originResp{header: map[string]string{"Cache-Control": "max-age=3600"}, body: strings.Repeat("x", 4096)})
	p.h.ServeHTTP(&discardWriter{h: make(http.Header)}, httptest.NewRequest("GET", "http://example.com/obj", nil))
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		req := httptest.NewRequest("GET", "http://example.com/obj", nil)
		w := &discardWriter{h: make(http.Header)}
		for pb.Next() {
			w.reset()
			p.h.ServeHTTP(w, req)
		}
	})
}

func BenchmarkParseCacheControl(b *testing.B) {
	h := http.Header{"Cache-Control": {"public, max-age=3600, stale-while-revalidate=60, s-maxage=600"}}
	b.ReportAllocs()
	for b.Loop() {
		ParseCacheControl(h, "Cache-Control")
	}
}

func BenchmarkCacheKey(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		CacheKey("http", "Example.com", "/a/b/c.html", "z=1&a=2&m=3")
	}
}

func newTestProxyB(b *testing.B) *testProxy { return newTestProxy(b, nil) }

// BenchmarkHitCoded compares hits on a cached 16 KiB HTML page sent as
// stored (identity) and in each derived coding: a cached compressed page
// must cost about what an identity hit costs (compressing on every hit
// would be a defect).
func BenchmarkHitCoded(b *testing.B) {
	p := newTestProxy(b, withCompression)
	body := page(16 << 10)
	p.origin.set(originResp{header: map[string]string{"Cache-Control": "max-age=3600", "Content-Type": "text/html", "ETag": `"x"`}, body: body})
	for _, ae := range []string{"identity", "br", "zstd", "gzip", "gzip, deflate, br, zstd"} {
		b.Run(strings.ReplaceAll(ae, " ", ""), func(b *testing.B) {
			// A browser's fields, so that only the coding differs.
			req := httptest.NewRequest("GET", "http://example.com/page", nil)
			req.Header.Set("User-Agent", "Mozilla/5.0 (X11; Linux x86_64) Chrome/156.0 Safari/537.36")
			req.Header.Set("Accept", "text/html,application/xhtml+xml,*/*;q=0.8")
			req.Header.Set("Accept-Language", "en-US,en;q=0.9")
			req.Header.Set("Accept-Encoding", ae)
			w := &discardWriter{h: make(http.Header)}
			p.h.ServeHTTP(w, req)
			p.h.Wait()
			w.reset()
			p.h.ServeHTTP(w, req) // makes the derived form
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				w.reset()
				p.h.ServeHTTP(w, req)
			}
			if w.code != 200 || (ae != "identity" && w.n >= len(body)/2) {
				b.Fatalf("got %d, %d bytes", w.code, w.n)
			}
			b.SetBytes(int64(w.n))
		})
	}
}
