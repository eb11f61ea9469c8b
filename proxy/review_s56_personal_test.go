package proxy

import (
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestS56BrowserTTLDeclaresACookieUsersUnsharedAnswerFresh: an answer the
// edge itself judged personal and would not store (a request with a
// Cookie, an answer whose freshness is only heuristic, or that has none
// at all: reason personal-heuristic / no-freshness) is sent to its client
// with max-age=600, an explicit freshness any cache after the edge (a
// corporate proxy, a second CDN) may store and hand to other users. The
// feature's promise (docs/rules.md) is that a rule "never makes a
// personal answer cacheable"; the edge's own reason for not storing it
// is that heuristic freshness "is not a declaration that a response to a
// request with credentials or cookies is the same for everyone".
func TestS56BrowserTTLDeclaresACookieUsersUnsharedAnswerFresh(t *testing.T) {
	p := newRuleProxy(t, ruleSite(t, `[{name: pages, browser_ttl: 10m}]`), func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/account/lm" {
			// Heuristic freshness only (a PHP page with Last-Modified).
			w.Header().Set("Last-Modified", t0.Add(-24*time.Hour).UTC().Format(http.TimeFormat))
		}
		// /account/plain: no caching field at all.
		_, _ = w.Write([]byte("account of " + r.Header.Get("Cookie")))
	}, nil)
	for _, path := range []string{"/account/lm", "/account/plain"} {
		w := p.get(path, "Cookie", "sid=alice")
		if !strings.Contains(w.Body.String(), "alice") {
			t.Fatalf("%s: %q", path, w.Body.String())
		}
		// The edge did not store it: bob gets his own.
		if b := p.get(path, "Cookie", "sid=bob"); strings.Contains(b.Body.String(), "alice") {
			t.Fatalf("%s: the edge itself served alice's page to bob", path)
		}
		if cc := w.Header().Get("Cache-Control"); strings.Contains(cc, "max-age") {
			t.Errorf("%s for a Cookie holder, not stored by the edge (Cache-Status %q): Cache-Control %q; a cache after the edge may now keep alice's page for everyone",
				path, w.Header().Get("Cache-Status"), cc)
		}
	}
}

// TestS56BrowserTTLLetsSharedCachesReuseAnAuthorizedAnswerUnchecked: an
// answer to a request with Authorization that the origin marks
// "max-age=0, must-revalidate" may be stored by a shared cache (RFC 9111
// §3.5: must-revalidate), but every reuse goes back to the origin with
// the new requester's credentials. Rewritten to "must-revalidate,
// max-age=600", a shared cache after the edge reuses alice's answer for
// anyone for ten minutes without asking the origin.
func TestS56BrowserTTLLetsSharedCachesReuseAnAuthorizedAnswerUnchecked(t *testing.T) {
	p := newRuleProxy(t, ruleSite(t, `[{name: pages, browser_ttl: 10m}]`), func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=0, must-revalidate")
		w.Header().Set("ETag", `"`+r.Header.Get("Authorization")[len("Bearer "):]+`"`)
		_, _ = w.Write([]byte("profile of " + r.Header.Get("Authorization")))
	}, nil)
	w := p.get("/api/me", "Authorization", "Bearer alice")
	if !strings.Contains(w.Body.String(), "alice") {
		t.Fatalf("%q", w.Body.String())
	}
	cc := ParseCacheControl(w.Header(), "Cache-Control")
	if cc.MustReval && cc.MaxAge > 0 && !cc.Public {
		t.Errorf("an answer to Authorization sent with Cache-Control %q (Cache-Status %q): a shared cache may now serve it to other users for %d s without the origin's check",
			w.Header().Get("Cache-Control"), w.Header().Get("Cache-Status"), cc.MaxAge)
	}
}
