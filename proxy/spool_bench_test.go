package proxy

import (
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
)

// BenchmarkUncacheableStream is a fast client of a 1 MiB uncacheable
// answer (a loopback origin), with the spool and without: what a spooling
// pump costs a client that keeps up.
func BenchmarkUncacheableStream(b *testing.B) {
	srv := spoolOrigin(b, "no-store")
	for _, tc := range []struct {
		name  string
		spool int64
	}{{"spool", 256 << 20}, {"no-spool", 0}} {
		b.Run(tc.name, func(b *testing.B) {
			h, _ := spoolProxy(b, srv, tc.spool, func(c *Config) { c.MaxInflight = 64 })
			const size = 1 << 20
			b.SetBytes(size)
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				w := &discardWriter{h: http.Header{}}
				h.ServeHTTP(w, httptest.NewRequest("GET", "http://example.com/"+strconv.Itoa(i%8)+"/"+strconv.Itoa(size), nil))
			}
			h.Wait()
		})
	}
}
