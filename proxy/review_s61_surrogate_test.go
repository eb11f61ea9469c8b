package proxy

import (
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestS61SurrogateControlWithoutCachingDirectivesDoesNotOverridePrivate:
// effectiveCC lets a targeted field govern as soon as it holds any
// directive (tc.Present), and for Surrogate-Control that includes
// directives that say nothing a cache obeys here: content="ESI/1.0" (a
// processing directive of the W3C Edge Architecture, which Symfony and
// others add to pages with ESI tags) or no-store-remote (the Edge
// Architecture's "surrogates not near the client must not store": a CDN
// edge is such a surrogate, and the parser does not know it). Cache-Control
// is then ignored whole, its private with it; with no freshness in the
// governing field, a Last-Modified gives the page a heuristic lifetime
// (freshness: targeted, status 200), and alice's private page is stored
// and served to bob. (A Cookie or Authorization request is held back by
// the personal-heuristic check; X-User is the harness's stand-in for
// whatever else an origin personalises on, an address, a header a
// front sets.)
func TestS61SurrogateControlWithoutCachingDirectivesDoesNotOverridePrivate(t *testing.T) {
	for _, sc := range []string{`content="ESI/1.0"`, "no-store-remote"} {
		t.Run(sc, func(t *testing.T) {
			clk := &clock{now: t0}
			h, _ := handlerProxy(t, func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Date", clk.Now().Format(http.TimeFormat))
				w.Header().Set("Cache-Control", "private")
				w.Header().Set("Surrogate-Control", sc)
				w.Header().Set("Last-Modified", clk.Now().Add(-24*time.Hour).Format(http.TimeFormat))
				_, _ = w.Write([]byte("account of " + r.Header.Get("X-User")))
			}, func(c *Config) { c.Now = clk.Now })
			if a := serve(h, "GET", "/account", "X-User", "alice"); !strings.Contains(a.Body.String(), "alice") {
				t.Fatalf("alice: %q", a.Body.String())
			}
			b := serve(h, "GET", "/account", "X-User", "bob")
			if strings.Contains(b.Body.String(), "alice") {
				t.Errorf("Cache-Control: private with Surrogate-Control: %s: bob was served alice's page %q (Cache-Status %q)", sc, b.Body.String(), b.Header().Get("Cache-Status"))
			}
		})
	}
}
