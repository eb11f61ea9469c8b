package proxy

import (
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
)

// s9Binary is n bytes of a type the edge never compresses.
func s9Binary(n int) string {
	var b strings.Builder
	for i := 0; b.Len() < n; i++ {
		b.WriteByte(byte(i*131 + i>>3))
	}
	return b.String()[:n]
}

// TestS9IfRangeDateOnIncompressiblePassKeeps206: a large download (zip,
// larger than max_object_bytes, or no-store) is a pass. The edge never
// encodes an application/zip answer, so its first part reached the client
// in identity and a resumption with Range + If-Range: <Last-Modified> can
// splice nothing. splicesCodings strips Range and If-Range for any client
// that accepts gzip when compression is configured, whatever the type:
// the resumable download restarts from byte 0.
//
// Failed before 2026-12-06; fixed: splicesCodings looks at the answer's type.
func TestS9IfRangeDateOnIncompressiblePassKeeps206(t *testing.T) {
	body := s9Binary(40000)
	for name, cc := range map[string]string{"no-store": "no-store", "too-large": "max-age=600"} {
		t.Run(name, func(t *testing.T) {
			var gotRange atomic.Value
			gotRange.Store("")
			h, _ := handlerProxy(t, func(w http.ResponseWriter, r *http.Request) {
				gotRange.Store(r.Header.Get("Range") + "|" + r.Header.Get("If-Range"))
				w.Header().Set("Cache-Control", cc)
				w.Header().Set("Content-Type", "application/zip")
				lm, _ := http.ParseTime(s8rLastMod)
				http.ServeContent(w, r, "", lm, strings.NewReader(body))
			}, func(c *Config) {
				withCompression(c)
				if name == "too-large" {
					c.MaxObjectBytes = 4096
					c.SliceBytes = 0
				}
			})
			for range 2 { // the second one is a remembered pass
				first := serve(h, "GET", "/big.zip", "Accept-Encoding", "gzip, deflate, br")
				if first.Code != 200 || first.Header().Get("Content-Encoding") != "" {
					t.Fatalf("setup: %d CE %q", first.Code, first.Header().Get("Content-Encoding"))
				}
			}
			resume := serve(h, "GET", "/big.zip", "Accept-Encoding", "gzip, deflate, br", "Range", "bytes=30000-", "If-Range", s8rLastMod)
			t.Logf("resume: %d CE %q CR %q len %d Cache-Status %q origin saw Range|If-Range %q", resume.Code,
				resume.Header().Get("Content-Encoding"), resume.Header().Get("Content-Range"), resume.Body.Len(),
				resume.Header().Get("Cache-Status"), gotRange.Load())
			if resume.Code != http.StatusPartialContent || resume.Body.Len() != 10000 {
				t.Errorf("resuming an application/zip pass (never encoded by the edge) with Range: bytes=30000- and If-Range: <its Last-Modified>: "+
					"got %d with %d bytes, want 206 with 10000: splicesCodings dropped Range/If-Range (origin saw %q) for a type the edge does not compress",
					resume.Code, resume.Body.Len(), gotRange.Load())
			}
		})
	}
}

// TestS9IfRangeDateHitPlainPagesKeep206: stored pages resume by date when
// no coding is involved: no compression configured, a client that takes
// only identity, a client that sends no Accept-Encoding, an incompressible
// type with compression on.
func TestS9IfRangeDateHitPlainPagesKeep206(t *testing.T) {
	cases := []struct {
		name, ctype, ae string
		compress        bool
	}{
		{"no-compression", "text/html", "gzip, br", false},
		{"ae-identity", "text/html", "identity", true},
		{"no-ae", "text/html", "", true},
		{"zip-with-gzip-ae", "application/zip", "gzip, br", true},
		{"gzip-q0", "text/html", "gzip;q=0, br;q=0, zstd;q=0, identity", true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			body := page(20000)
			h, _ := handlerProxy(t, func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Cache-Control", "max-age=600")
				w.Header().Set("Content-Type", c.ctype)
				w.Header().Set("Last-Modified", s8rLastMod)
				_, _ = w.Write([]byte(body))
			}, func(cfg *Config) {
				if c.compress {
					withCompression(cfg)
				}
			})
			hdr := []string{}
			if c.ae != "" {
				hdr = append(hdr, "Accept-Encoding", c.ae)
			}
			serve(h, "GET", "/p", hdr...)
			resume := serve(h, "GET", "/p", append(hdr, "Range", "bytes=100-", "If-Range", s8rLastMod)...)
			if resume.Code != http.StatusPartialContent || resume.Body.Len() != 19900 || resume.Header().Get("Content-Encoding") != "" {
				t.Errorf("%s: resume by date of an identity page: %d CE %q len %d, want 206 identity 19900 bytes",
					c.name, resume.Code, resume.Header().Get("Content-Encoding"), resume.Body.Len())
			}
		})
	}
}
