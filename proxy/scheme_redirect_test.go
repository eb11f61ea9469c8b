package proxy_test

import (
	"context"
	"crypto/tls"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/edgecache/edge/proxy"
)

// An origin that forces https answers plain requests with a cacheable
// redirect to the same URL on https (by X-Forwarded-Proto). With the
// scheme out of the key (the default) that redirect, stored, would answer
// the page's https users with a redirect to the page itself: a loop for
// everyone after one plain-http visitor. It is not stored, and it does not
// make the page pass the cache; with the scheme in the key, or a Vary on
// X-Forwarded-Proto, it is stored as before.
func TestRedirectToTheOtherSchemeIsNotSharedAcrossSchemes(t *testing.T) {
	for _, tc := range []struct {
		name      string
		keyScheme bool
		vary      bool
		location  string
		stored    bool // the plain request's redirect is stored
	}{
		{name: "forced https, scheme out of the key", location: "https://shop.test/p"},
		{name: "forced https to another path", location: "https://SHOP.test./login"},
		{name: "scheme in the key", keyScheme: true, location: "https://shop.test/p", stored: true},
		{name: "varies on the scheme", vary: true, location: "https://shop.test/p", stored: true},
		{name: "another host", location: "https://www.shop.test/p", stored: true},
		{name: "same scheme", location: "http://shop.test/q", stored: true},
		{name: "relative", location: "/q", stored: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var fetches atomic.Int32
			of := proxy.FetcherFunc(func(ctx context.Context, req *http.Request) (*http.Response, error) {
				fetches.Add(1)
				rec := httptest.NewRecorder()
				rec.Header().Set("Cache-Control", "max-age=3600")
				if tc.vary {
					rec.Header().Set("Vary", "X-Forwarded-Proto")
				}
				if req.Header.Get("X-Forwarded-Proto") != "https" {
					rec.Header().Set("Location", tc.location)
					rec.WriteHeader(http.StatusMovedPermanently)
					return rec.Result(), nil
				}
				_, _ = io.WriteString(rec, "the page")
				return rec.Result(), nil
			})
			store := proxy.NewStore(1<<20, 4)
			pc := proxy.DefaultConfig()
			pc.KeyScheme = tc.keyScheme
			h := proxy.New(pc, store, of, proxy.NewMetrics(prometheus.NewRegistry(), store), nil)
			ask := func(https bool) *httptest.ResponseRecorder {
				r := httptest.NewRequest("GET", "http://shop.test/p", nil)
				if https {
					r.TLS = &tls.ConnectionState{}
				}
				w := httptest.NewRecorder()
				h.ServeHTTP(w, r)
				h.Wait()
				return w
			}
			for range 2 {
				if w := ask(false); w.Code != http.StatusMovedPermanently {
					t.Fatalf("plain request: %d, want the origin's 301", w.Code)
				}
			}
			if stored := fetches.Load() == 1; stored != tc.stored {
				t.Fatalf("two plain requests: %d fetches; the redirect stored %v, want %v", fetches.Load(), stored, tc.stored)
			}
			before := fetches.Load()
			w := ask(true)
			if tc.stored && !tc.keyScheme && !tc.vary {
				// A redirect that loops nobody: shared as any response.
				if w.Code != http.StatusMovedPermanently || fetches.Load() != before {
					t.Fatalf("https after plain: %d after %d fetches, want the stored 301", w.Code, fetches.Load())
				}
				return
			}
			if w.Code != http.StatusOK || w.Body.String() != "the page" {
				t.Fatalf("https after plain: %d %q (%s), want the page", w.Code, w.Body.String(), w.Header().Get("Cache-Status"))
			}
			if w := ask(true); w.Code != http.StatusOK || fetches.Load() != before+1 {
				t.Fatalf("https again: %d after %d fetches, want a hit on the page (the URL not passed by)", w.Code, fetches.Load())
			}
		})
	}
}
