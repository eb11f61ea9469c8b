package proxy

import (
	"net/http"
	"net/http/httptest"
	"testing"
)

// TestPurgeScopeSpellings: every spelling of a URL that Purge maps to a
// request's key is named by PurgeScope (host case, port, trailing dot,
// https under the shared scheme, sort_query, a named site's prefix).
func TestPurgeScopeSpellings(t *testing.T) {
	h, _ := handlerProxy(t, func(w http.ResponseWriter, r *http.Request) {}, func(c *Config) {
		c.SortQuery = true
		c.SiteOf = func(host string) string { // as node.siteName: canonical look-up
			if c, ok := CanonicalHost(host); ok && c == "shop.test" {
				return "shop"
			}
			return ""
		}
	})
	reqKey := func(target string) string {
		r := httptest.NewRequest("GET", target, nil)
		if h.cfg.SortQuery && r.URL.RawQuery != "" {
			r.URL.RawQuery = h.keyQuery(r.URL.RawQuery)
		}
		return h.requestKey(r)
	}
	for _, c := range []struct{ purge, request string }{
		{"HTTPS://Shop.TEST.:443/a?b=1&a=2", "http://shop.test/a?a=2&b=1"},
		{"http://shop.test/%7Ex", "http://shop.test/%7Ex"},
		{"http://example.com:8080/p", "http://example.com/p"},
	} {
		p := PurgeRequest{URL: c.purge}
		k := reqKey(c.request)
		scope := h.PurgeScope(p)
		t.Logf("purge %q → request key %q: named %v", c.purge, k, scope != nil && scope(k, nil))
		if scope == nil || !scope(k, nil) || !scope(sliceKey(k, 0), nil) {
			t.Errorf("%q does not name %q", c.purge, k)
		}
	}
}
