package proxy

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"

	"github.com/edgecache/edge/rules"
)

// s14Site is a named site with key rules: a cookie rule ahead of the key
// rule (it must not shape the key), utm_ parameters ignored and the rest
// sorted under /, and /raw/ keyed as sent.
func s14Site(t *testing.T) *Site {
	t.Helper()
	set, err := rules.Parse("rules", []any{
		map[string]any{"name": "members", "match": map[string]any{"path": "/", "cookie": "sid"}, "bypass": true},
		map[string]any{"name": "raw", "match": map[string]any{"path": "/raw/"}},
		map[string]any{"name": "pages", "match": map[string]any{"path": "/"}, "key": map[string]any{"ignore_params": []any{"utm_*", "fbclid"}, "sort_params": true}},
	})
	if err != nil {
		t.Fatal(err)
	}
	s := NewSite("shop", false, nil)
	s.Rules = set
	return s
}

// TestS14PurgeURLKeyMatchesTheRequestsKey: a page is requested as a front
// hands it over (canonical Host, the site resolved) and then purged by
// other spellings of its URL: the host in upper case, with a port, with a
// trailing dot, an IPv6 literal spelled another way; ignored and
// reordered parameters; https for http (key_scheme off); a cookie rule
// ahead of the key rule. Each purge removes the one entry the request
// stored (purged 1) and the next request goes to the origin; with
// cache.sort_query on too. The route explorer's odd URLs (no host, a
// zone, a bad port, an opaque URL, a huge port) give a key without a
// panic. HOLDS (the empty-path spelling is
// TestS14PurgeOfAURLWithoutAPathMissesTheRootPage in node).
func TestS14PurgeURLKeyMatchesTheRequestsKey(t *testing.T) {
	for _, sortQuery := range []bool{false, true} {
		site := s14Site(t)
		h, calls := handlerProxy(t, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Cache-Control", "max-age=600")
			_, _ = w.Write([]byte("page " + r.URL.RequestURI()))
		}, func(c *Config) {
			c.SortQuery = sortQuery
			c.SiteOf = func(string) string { return "shop" }
			c.SiteFor = func(string) *Site { return site }
		})
		get := func(host, target string, hdr ...string) {
			t.Helper()
			r := httptest.NewRequest("GET", "http://"+host+target, nil)
			canon, ok := CanonicalHost(r.Host)
			if !ok {
				t.Fatalf("%q is not a host", r.Host)
			}
			r.Host = canon
			for i := 0; i+1 < len(hdr); i += 2 {
				r.Header.Add(hdr[i], hdr[i+1])
			}
			w := httptest.NewRecorder()
			h.ServeInbound(w, r, Inbound{Site: site})
			h.Wait()
			if w.Code != 200 {
				t.Fatalf("GET %s%s: %d", host, target, w.Code)
			}
		}
		for _, c := range []struct{ host, target, purge string }{
			{"shop.test", "/p?id=7&utm_source=mail", "http://shop.test/p?id=7&utm_source=news"},
			{"shop.test", "/p?b=2&a=1", "http://shop.test/p?a=1&b=2&fbclid=x"},
			{"Shop.Test", "/p?id=8", "https://SHOP.TEST:8443/p?id=8"},
			{"shop.test.", "/q", "http://shop.test/q"},
			{"shop.test", "/q2", "http://shop.test.:80/q2#frag"},
			{"[2001:db8:0:0::1]:8080", "/v6?x=1", "http://[2001:DB8::1]/v6?x=1&utm_term=z"},
			{"shop.test", "/caf%C3%A9?id=1", "http://shop.test/caf%C3%A9?id=1"},
			{"shop.test", "/raw/x?b=2&a=1", "http://shop.test/raw/x?b=2&a=1"},
		} {
			get(c.host, c.target)
			before := calls.Load()
			n, err := h.Purge(PurgeRequest{URL: c.purge})
			get(c.host, c.target)
			if err != nil || n != 1 || calls.Load() != before+1 {
				t.Errorf("sort_query=%v: GET %s%s then purge %s: purged %d (%v); the page was %s", sortQuery, c.host, c.target, c.purge, n, err,
					map[bool]string{true: "fetched again", false: "still served from the cache"}[calls.Load() == before+1])
			}
			// A member (the cookie rule) is passed, and must not change the key.
			get(c.host, c.target, "Cookie", "sid=1")
		}
		for _, raw := range []string{"http://[::1%25eth0]/x", "http://h:99999999999/x", "http:opaque", "http://%41/x", "http://a..b/x", "http://[::1]:x/", "http://h/a/../b?c=%zz", "http:///nohost", "http://h/a;b?x=1"} {
			u, err := url.Parse(raw)
			if err != nil {
				continue
			}
			func() {
				defer func() {
					if p := recover(); p != nil {
						t.Errorf("URLKey(%q) panicked: %v", raw, p)
					}
				}()
				_ = h.URLKey(u)
			}()
		}
	}
}
