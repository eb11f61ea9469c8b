package proxy

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestS13CodingVariantsKeepTheirOwnForms: a page that varies on
// Accept-Language, Origin and Cookie (each user's marker in the body) is
// asked concurrently by users in every coding while its fills, its live
// encodings and its background forms are under way, then again from the
// forms, then after a stale-while-revalidate refresh: every answer decodes
// to its own variant's body. HOLDS.
func TestS13CodingVariantsKeepTheirOwnForms(t *testing.T) {
	p := newTestProxy(t, withCompression)
	var gen sync.Map
	p.origin.srv.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(20 * time.Millisecond) // long enough for requests to collapse onto the fill
		w.Header().Set("Date", p.clk.Now().Format(http.TimeFormat))
		w.Header().Set("Cache-Control", "max-age=10, stale-while-revalidate=60")
		w.Header().Set("Content-Type", "text/html")
		w.Header().Set("Vary", "Accept-Encoding, Accept-Language, Origin, Cookie")
		w.Header().Set("ETag", `"same-for-all"`) // an origin that reuses one tag: the variants must still stay apart
		id := r.Header.Get("Accept-Language") + "|" + r.Header.Get("Origin") + "|" + r.Header.Get("Cookie")
		gen.Store(id, true)
		_, _ = w.Write([]byte("<p>" + id + "</p>" + page(6000)))
	})
	type user struct{ lang, origin, cookie string }
	users := []user{{"en", "https://a.example", "s=alice"}, {"fr", "https://a.example", "s=alice"}, {"en", "https://b.example", "s=alice"}, {"en", "https://a.example", "s=bob"}}
	aes := []string{"br", "zstd", "gzip", "", "gzip, deflate, br, zstd"}
	round := func(name string) {
		var wg sync.WaitGroup
		for _, u := range users {
			for _, ae := range aes {
				for _, method := range []string{"GET", "GET", "HEAD"} {
					wg.Add(1)
					go func() {
						defer wg.Done()
						r := httptest.NewRequest(method, "http://example.com/v", nil)
						r.Header.Set("Accept-Language", u.lang)
						r.Header.Set("Origin", u.origin)
						r.Header.Set("Cookie", u.cookie)
						if ae != "" {
							r.Header.Set("Accept-Encoding", ae)
						}
						w := httptest.NewRecorder()
						p.h.ServeHTTP(w, r)
						if method == "HEAD" || w.Code != 200 {
							if w.Code != 200 {
								t.Errorf("%s %v AE %q: %d", name, u, ae, w.Code)
							}
							return
						}
						want := "<p>" + u.lang + "|" + u.origin + "|" + u.cookie + "</p>"
						if got := decoded(t, w); !strings.HasPrefix(got, want) {
							t.Errorf("%s: %v AE %q got %.50q (Content-Encoding %q, Cache-Status %q)", name, u, ae, got, w.Header().Get("Content-Encoding"), w.Header().Get("Cache-Status"))
						}
					}()
				}
			}
		}
		wg.Wait()
		p.h.Wait()
	}
	round("fills")
	round("live and forms")
	round("forms")
	p.clk.Set(p.clk.Now().Add(30 * time.Second)) // stale: served while refreshed
	round("stale")
	round("refreshed")
}
