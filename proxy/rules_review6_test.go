package proxy

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// A sixth review. The case check compares a path's own rule with the
// rule of one spelling of it, the folded one (lower case), and reads a
// regular expression two ways: under (?i) against the path, and as
// written against the folded path. A pattern that names capitals by
// exclusion ([^a-z]: "not a lower-case letter") matches neither reading
// of a lower-case path: (?i)[^a-z] excludes every letter, and the
// folded path has no capital for [^a-z] to match. The docs' contract is
// "a path that, read in any case, matches another rule": /api/me read
// as /api/ME (IIS, ASP.NET Core, Express) is what the bypass names, yet
// /api/me is cached under pages and served to the next user. This is
// TestRegexFoldKeepsNegatedClasses with the classes' case swapped; the
// fold gate (no capital in the path or any pattern) skips the check
// altogether here, and so it does for [[:upper:]].
func TestRegexFoldKeepsNegatedLowerClasses(t *testing.T) {
	routes := func(p string) bool { return strings.HasPrefix(strings.ToLower(p), "/api/") }
	for _, tc := range []struct{ src, control, target string }{
		{"- {name: api, match: {path_regex: '^/api/[^a-z]+$'}, bypass: true}\n- {name: pages, default_ttl: 5m}\n", "/api/ME", "/api/me"},
		{"- {name: api, match: {path_regex: '^/api/[[:upper:]]+$'}, bypass: true}\n- {name: pages, default_ttl: 5m}\n", "/api/ME", "/api/me"},
	} {
		if got := caseLeak(t, tc.src, routes, tc.control); got != "" {
			t.Fatalf("%s: control %s: %s", tc.src, tc.control, got)
		}
		if got := caseLeak(t, tc.src, routes, tc.target); got != "" {
			t.Errorf("rules %q: %s (which a case-insensitive origin reads as %s, bypassed): %s",
				strings.SplitN(tc.src, "\n", 2)[0], tc.target, tc.control, got)
		}
	}
}

// With cache.sort_query, ServeHTTP decides the key rule on the query as
// sent (rulingOf: r.URL.RawQuery before sorting) and passes the request
// when the key rule is _ambiguous-path; AppendHit finds the same key rule
// but, for a HEAD, checks only the HEAD's request rule (ForRequest, whose
// "apart" does not count query keys) for bypass, and looks the key up
// with the query sorted. So HEAD /API/x?b=2&a=1, which ServeHTTP passes
// to the origin, is answered by the hit path from the entry of
// /API/x?a=1&b=2. (The same invariant as TestHeadRulesAgreeWithServeHTTP.)
func TestHeadHitHonoursAnAmbiguousKeyRule(t *testing.T) {
	site := ruleSite(t, `
- {name: api, match: {path: /api/}, key: {sort_params: true}}
- {name: pages, default_ttl: 5m}
`)
	p := newRuleProxy(t, site, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=600")
		_, _ = w.Write([]byte("page " + r.URL.RawQuery))
	}, func(c *Config) { c.SortQuery = true })
	p.get("/API/x?a=1&b=2") // stored
	if w := p.get("/API/x?a=1&b=2"); !strings.Contains(w.Header().Get("Cache-Status"), "hit") {
		t.Fatalf("control: the sorted spelling is not a hit: %q", w.Header().Get("Cache-Status"))
	}
	var a HitAnswer
	hit := p.h.AppendHit(nil, &HitRequest{Head: true, Host: "shop.test", Path: "/API/x", RawQuery: "b=2&a=1", Site: site}, []byte("Date: x\r\n"), &a)
	if hit {
		p.h.ReleaseHit(a.Pinned, a.ClientIP)
	}
	before := p.calls.Load()
	w := httptest.NewRecorder()
	p.h.ServeInbound(w, httptest.NewRequest("HEAD", "http://shop.test/API/x?b=2&a=1", nil), Inbound{Site: site})
	p.h.Wait()
	if viaServe := p.calls.Load() - before; viaServe == 1 && hit {
		t.Errorf("ServeHTTP passes HEAD /API/x?b=2&a=1 (key rule %s, Cache-Status %q); AppendHit answers it from the store:\n%s",
			site.Rules.ForKey("/API/x", "b=2&a=1").Name, w.Header().Get("Cache-Status"), a.Head)
	}
}

// The folded reading is one rule: the first rule any spelling of the path
// matches (the patterns folded). When a rule that does not keep answers
// apart comes first and its folded pattern covers the path, the folded
// reading stops there and never reaches a bypass that another spelling
// matches as written: /media/private/x is media's (as written and
// folded), while /Media/Private/x, which an ASP.NET origin serves as the
// same resource, is private's bypass (media's /media/ does not match it
// as written). The docs promise that a path that "read in any case
// matches another rule than its own letters do, when one of the two is
// a bypass" is passed; alice's private file is cached under media and
// served to the next user.
func TestFoldedReadingDoesNotStopAtAnEarlierCachingRule(t *testing.T) {
	src := `
- {name: media, match: {path: /media/}, default_ttl: 1h}
- {name: private, match: {path: /Media/Private/}, bypass: true}
- {name: pages, default_ttl: 5m}
`
	routes := func(p string) bool { return strings.HasPrefix(strings.ToLower(p), "/media/private/") }
	if got := caseLeak(t, src, routes, "/Media/Private/x"); got != "" {
		t.Fatalf("control /Media/Private/x: %s", got)
	}
	for _, target := range []string{"/media/private/x", "/MEDIA/PRIVATE/x"} {
		if got := caseLeak(t, src, routes, target); got != "" {
			t.Errorf("%s (rule %s; the origin's /Media/Private/x, bypassed): %s", target, ruleSite(t, src).Rules.ForRequest("GET", target, nil).Name, got)
		}
	}
}
