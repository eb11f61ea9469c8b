package proxy

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// getAbsolute sends a request whose target is in absolute form without a
// path ("GET http://shop.test HTTP/1.1", RFC 9112 §3.2.2), which net/http
// parses to URL.Path "" (httptest.NewRequest reads the target as a server
// does).
func (p *ruleProxy) getAbsolute(target string, hdr ...string) *httptest.ResponseRecorder {
	r := httptest.NewRequest("GET", target, nil)
	for i := 0; i+1 < len(hdr); i += 2 {
		r.Header.Add(hdr[i], hdr[i+1])
	}
	w := httptest.NewRecorder()
	p.h.ServeInbound(w, r, Inbound{Site: p.site})
	p.h.Wait()
	return w
}

// A review found (now mended): a request target in absolute form without a path
// ("GET http://shop.test HTTP/1.1", or "http://shop.test?x=1") has
// URL.EscapedPath() == "". rulingOf hands "" to rules.ForRequest/ForKey,
// and almost no rule matches it: a rule without match has prefix "/", and
// strings.HasPrefix("", "/") is false; every path prefix, a glob that starts
// with '/' and a '^/' regex likewise (only a glob "*" or a regex that
// matches the empty string does). But the key is built as "/" (appendCacheKey: path "" is "/"),
// and the origin is sent "/" (Go's client writes "/" for an empty path).
// So the request for "/" is served with no rule at all: a bypass is
// skipped (the answer is stored and served from the store), and request
// edits the key rule makes are not made while the answer is stored in the
// variant every plain request for "/" reads (uniformEdits leaves the set
// field out of their key): one request poisons the home page for everyone.
// URLKey already reads "" as "/" (a review's purge fix), the request path
// does not. Fix: read an empty path as "/" in rulingOf (and wherever the
// request's path is taken: requestKey, the forwarded URL), or normalise
// r.URL.Path to "/" at the front before anything reads it.
func TestS24AbsoluteFormWithoutPathEscapesTheRules(t *testing.T) {
	t.Run("bypass", func(t *testing.T) {
		site := ruleSite(t, `
- {name: static, match: {path: /static/}, ttl: 1d, strip_cookies: true}
- {name: dynamic, bypass: true}
`)
		p := newRuleProxy(t, site, func(w http.ResponseWriter, r *http.Request) {
			// The home page of a logged-in user, which the origin (wrongly)
			// marks cacheable: the operator bypasses every dynamic page for
			// that reason.
			w.Header().Set("Cache-Control", "max-age=600")
			_, _ = writeString(w, "home of "+r.Header.Get("Cookie"))
		}, nil)
		p.getAbsolute("http://shop.test", "Cookie", "sid=alice")
		w := p.getAbsolute("http://shop.test", "Cookie", "sid=bob")
		if strings.Contains(w.Body.String(), "alice") || strings.Contains(w.Header().Get("Cache-Status"), "hit") {
			t.Errorf("a bypass rule for every dynamic page: bob got %q (Cache-Status %q); the request for / matched no rule", w.Body.String(), w.Header().Get("Cache-Status"))
		}
	})
	t.Run("uniform-edit-poisons-plain-requests", func(t *testing.T) {
		// A multi-tenant origin picks the tenant by a field the edge sets
		// (docs/rules.md: a field a rule sets for every request of a URL
		// is not keyed).
		site := ruleSite(t, `[{name: pages, request_headers: {set: {X-Tenant: shop}}}]`)
		p := newRuleProxy(t, site, func(w http.ResponseWriter, r *http.Request) {
			tenant := r.Header.Get("X-Tenant")
			if tenant == "" {
				tenant = "default-tenant"
			}
			w.Header().Set("Cache-Control", "max-age=600")
			_, _ = writeString(w, "home of "+tenant)
		}, nil)
		p.getAbsolute("http://shop.test")
		w := p.get("/")
		if w.Body.String() != "home of shop" {
			t.Errorf("a plain GET / got %q (Cache-Status %q): the answer to a request the rule never edited was stored in its variant", w.Body.String(), w.Header().Get("Cache-Status"))
		}
	})
}
