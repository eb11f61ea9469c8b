package proxy

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestS13CodingPersonalAnswersNeverReachOthers: users ask concurrently,
// in every coding, for pages whose origin answers personally: Set-Cookie
// on a max-age page, private, an Authorization request without public,
// no-store, and s-maxage with Authorization but a per-user Set-Cookie.
// Fills collapse (the origin is slow), leaders stream encoded, waiters
// wait for whole bodies and stored forms: nobody's decoded body or
// Set-Cookie names another user. Then a stale-if-error window serves the
// shareable page's stored forms while the origin fails, Range and HEAD
// included. HOLDS.
func TestS13CodingPersonalAnswersNeverReachOthers(t *testing.T) {
	var failing atomic.Bool
	p := newTestProxy(t, func(c *Config) { withCompression(c); c.UnkeyedRequestHeaders = []string{"X-User"} })
	p.origin.srv.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if failing.Load() {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		time.Sleep(15 * time.Millisecond)
		user := r.Header.Get("X-User")
		if a := r.Header.Get("Authorization"); a != "" {
			user = a
		}
		w.Header().Set("Date", p.clk.Now().Format(http.TimeFormat))
		w.Header().Set("Content-Type", "text/html")
		w.Header().Set("ETag", `"shared-tag"`)
		switch r.URL.Path {
		case "/cookie":
			w.Header().Set("Cache-Control", "max-age=60")
			w.Header().Set("Set-Cookie", "sid="+user)
		case "/private":
			w.Header().Set("Cache-Control", "private, max-age=60")
		case "/auth":
			w.Header().Set("Cache-Control", "max-age=60")
		case "/nostore":
			w.Header().Set("Cache-Control", "no-store")
		case "/smaxage":
			w.Header().Set("Cache-Control", "s-maxage=60")
			w.Header().Set("Set-Cookie", "sid="+user)
		case "/shared":
			w.Header().Set("Cache-Control", "max-age=1, stale-if-error=600")
			user = "nobody"
		}
		_, _ = w.Write([]byte("<p>for " + user + "</p>" + page(5000)))
	})
	paths := []string{"/cookie", "/private", "/auth", "/nostore", "/smaxage", "/shared"}
	aes := []string{"br", "zstd", "gzip", "", "gzip, deflate, br, zstd"}
	users := []string{"alice", "bob", "carol"}
	for round := range 3 {
		var wg sync.WaitGroup
		for _, path := range paths {
			for _, ae := range aes {
				for _, u := range users {
					wg.Add(1)
					go func() {
						defer wg.Done()
						r := httptest.NewRequest("GET", "http://example.com"+path, nil)
						r.Header.Set("X-User", u)
						if path == "/auth" || path == "/smaxage" {
							r.Header.Set("Authorization", u)
						}
						if ae != "" {
							r.Header.Set("Accept-Encoding", ae)
						}
						w := httptest.NewRecorder()
						p.h.ServeHTTP(w, r)
						if w.Code != 200 {
							t.Errorf("round %d %s %s AE %q: %d", round, path, u, ae, w.Code)
							return
						}
						got := decoded(t, w)
						want := "<p>for " + u + "</p>"
						if path == "/shared" {
							want = "<p>for nobody</p>"
						}
						if !strings.HasPrefix(got, want) {
							t.Errorf("round %d %s: %s (AE %q) got %.20q (Content-Encoding %q, Cache-Status %q)", round, path, u, ae, got, w.Header().Get("Content-Encoding"), w.Header().Get("Cache-Status"))
						}
						if sc := w.Header().Get("Set-Cookie"); sc != "" && sc != "sid="+u {
							t.Errorf("round %d %s: %s got Set-Cookie %q", round, path, u, sc)
						}
					}()
				}
			}
		}
		wg.Wait()
		p.h.Wait()
	}
	// stale-if-error: the stored forms of /shared answer while the origin fails.
	p.do("GET", "/shared", map[string]string{"Accept-Encoding": "br"}) // makes the br form if the rounds did not
	full := p.do("GET", "/shared", map[string]string{"Accept-Encoding": "br"})
	p.clk.Set(p.clk.Now().Add(30 * time.Second))
	failing.Store(true)
	for _, ae := range aes {
		p.do("GET", "/shared", map[string]string{"Accept-Encoding": ae}) // may be encoded live while the form is made
		w := p.do("GET", "/shared", map[string]string{"Accept-Encoding": ae})
		if w.Code != 200 || !strings.HasPrefix(decoded(t, w), "<p>for nobody</p>") {
			t.Errorf("stale-if-error AE %q: %d %q", ae, w.Code, w.Header().Get("Cache-Status"))
		}
		hd := p.do("HEAD", "/shared", map[string]string{"Accept-Encoding": ae})
		if hd.Header().Get("Content-Encoding") != w.Header().Get("Content-Encoding") || hd.Header().Get("Content-Length") != w.Header().Get("Content-Length") {
			t.Errorf("stale-if-error AE %q: HEAD %q/%q, GET %q/%q (%q %q / %q %q)", ae, hd.Header().Get("Content-Encoding"), hd.Header().Get("Content-Length"), w.Header().Get("Content-Encoding"), w.Header().Get("Content-Length"),
				hd.Header().Get("Cache-Status"), hd.Header().Get("Etag"), w.Header().Get("Cache-Status"), w.Header().Get("Etag"))
		}
	}
	w := p.do("GET", "/shared", map[string]string{"Accept-Encoding": "br", "Range": "bytes=3-40"})
	if w.Code != 206 || w.Body.String() != full.Body.String()[3:41] || w.Header().Get("Content-Encoding") != "br" {
		t.Errorf("stale-if-error Range on the br form: %d %q %q; full %q %q %d bytes", w.Code, w.Header().Get("Content-Encoding"), w.Header().Get("Content-Range"), full.Header().Get("Cache-Status"), full.Header().Get("Etag"), full.Body.Len())
	}
}
