package proxy

import (
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestS13CodingFormsNeverOutliveTheirBody: with br, zstd and gzip forms
// made of version 1 of a page, each way the stored body changes — a hard
// purge by URL, by prefix and by tag, a soft purge answered 200 with a new
// body, an expiry answered 200 with a new body, and an expiry answered 304
// with new fields — is followed in every coding (and in HEAD's fields) by
// the new body and tag, never a form of the old one. HOLDS.
func TestS13CodingFormsNeverOutliveTheirBody(t *testing.T) {
	var ver atomic.Int64
	var xver atomic.Int64
	ver.Store(1)
	var mu sync.Mutex
	bodyOf := func(v int64) string { return fmt.Sprintf("<h1>version %d</h1>", v) + page(9000) }
	p := newTestProxy(t, withCompression)
	p.origin.srv.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		v := ver.Load()
		tag := fmt.Sprintf(`"v%d"`, v)
		w.Header().Set("Date", p.clk.Now().Format(http.TimeFormat))
		w.Header().Set("Cache-Control", "max-age=10")
		w.Header().Set("Content-Type", "text/html")
		w.Header().Set("Surrogate-Key", "t1")
		w.Header().Set("X-Ver", fmt.Sprint(xver.Load()))
		w.Header().Set("ETag", tag)
		if r.Header.Get("If-None-Match") == tag {
			w.WriteHeader(http.StatusNotModified)
			return
		}
		_, _ = w.Write([]byte(bodyOf(v)))
	})
	codings := []string{"br", "zstd", "gzip", ""}
	warm := func() {
		for _, ae := range codings {
			for range 3 {
				p.do("GET", "/s13/a", map[string]string{"Accept-Encoding": ae})
			}
		}
	}
	expect := func(step string, v, x int64) {
		t.Helper()
		for _, ae := range codings {
			for i := range 3 {
				w := p.do("GET", "/s13/a", map[string]string{"Accept-Encoding": ae})
				if got := decoded(t, w); !strings.HasPrefix(got, fmt.Sprintf("<h1>version %d</h1>", v)) || len(got) != len(bodyOf(v)) {
					t.Errorf("%s: AE %q #%d: got %.22q (Cache-Status %q), want version %d", step, ae, i, got, w.Header().Get("Cache-Status"), v)
				}
				if tag := strings.TrimPrefix(w.Header().Get("Etag"), "W/"); !strings.HasPrefix(tag, fmt.Sprintf(`"v%d`, v)) {
					t.Errorf("%s: AE %q #%d: ETag %s for version %d", step, ae, i, tag, v)
				}
				if xv := w.Header().Get("X-Ver"); xv != fmt.Sprint(x) {
					t.Errorf("%s: AE %q #%d: X-Ver %q, want %d (a form kept the old fields)", step, ae, i, xv, x)
				}
				hd := p.do("HEAD", "/s13/a", map[string]string{"Accept-Encoding": ae})
				if strings.TrimPrefix(hd.Header().Get("Etag"), "W/") != strings.TrimPrefix(w.Header().Get("Etag"), "W/") {
					t.Errorf("%s: AE %q: HEAD ETag %q, GET %q", step, ae, hd.Header().Get("Etag"), w.Header().Get("Etag"))
				}
			}
		}
	}
	warm()
	expect("start", 1, 0)
	next := func() { ver.Add(1) }
	for _, purge := range []PurgeRequest{{URL: "http://example.com/s13/a"}, {Prefix: "/s13/"}, {Tag: "t1"}} {
		next()
		if n, err := p.h.Purge(purge); err != nil || n == 0 {
			t.Fatalf("purge %+v: %d %v", purge, n, err)
		}
		expect(fmt.Sprintf("after purge %+v", purge), ver.Load(), 0)
	}
	next()
	p.h.Purge(PurgeRequest{URL: "http://example.com/s13/a", Soft: true})
	expect("after a soft purge answered 200", ver.Load(), 0)
	next()
	p.clk.Set(p.clk.Now().Add(20 * time.Second))
	expect("after expiry answered 200", ver.Load(), 0)
	xver.Store(7)
	p.clk.Set(p.clk.Now().Add(20 * time.Second))
	expect("after expiry answered 304", ver.Load(), 7)
}
