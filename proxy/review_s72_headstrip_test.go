package proxy

import (
	"net/http"
	"strings"
	"testing"
)

// TestS72HeadRuleForwardsTheCookiesTheGetRuleStrips: strip_cookies is the
// operator's promise that on its paths "the origin never sees a cookie, so
// its answer cannot be personal" (docs/rules.md), and it is what lets an
// answer to a cookie holder be stored and shared. A HEAD-only rule ahead
// of it (uptime probes whose no-cache the edge ignores: client_no_cache
// alone, which config check accepts without a warning) sends a HEAD's
// cookies to the origin. editsApart reads only request_headers, not
// strip_cookies, so the HEAD's fill is the plain variant, and GETs (whose
// rule strips every cookie) are served the page the origin made for the
// HEAD's session.
func TestS72HeadRuleForwardsTheCookiesTheGetRuleStrips(t *testing.T) {
	site := ruleSite(t, `
- {name: probes, match: {methods: [HEAD]}, client_no_cache: ignore}
- {name: assets, strip_cookies: true, default_ttl: 5m}
`)
	if w := site.Rules.Warnings(); len(w) != 0 {
		t.Logf("warnings: %q", w)
	}
	p := newRuleProxy(t, site, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=300")
		who := "guest"
		if c, err := r.Cookie("sid"); err == nil {
			who = c.Value
		}
		_, _ = writeString(w, "hello "+who)
	}, nil)
	p.s54Head("/account.js", "Cookie", "sid=alice")
	g := p.get("/account.js")
	if strings.Contains(g.Body.String(), "alice") {
		t.Errorf("anonymous GET /account.js after alice's HEAD got %q (Cache-Status %q): the page the origin made for alice's cookie, on a path whose GET rule strips every cookie",
			g.Body.String(), g.Header().Get("Cache-Status"))
	}
	// A GET with a cookie is never sent it: the control.
	if g := p.get("/other.js", "Cookie", "sid=bob"); strings.Contains(g.Body.String(), "bob") {
		t.Fatalf("control: a GET's cookie reached the origin: %q", g.Body.String())
	}
}

// TestS72CookieRuleForwardsTheCookiesTheKeyRuleStrips: the same root by a
// cookie condition. A rule for visitors who accepted the consent banner
// that only adds a response field sits ahead of the strip_cookies rule;
// such a visitor's request is under it, keeps every cookie (sid too), and
// the page the origin makes for that session fills the plain variant
// (editsApart: neither rule has request_headers), which the stripped
// requests of everyone else are served.
func TestS72CookieRuleForwardsTheCookiesTheKeyRuleStrips(t *testing.T) {
	site := ruleSite(t, `
- {name: consented, match: {cookie: consent}, response_headers: {set: {X-Consent: "1"}}}
- {name: assets, strip_cookies: true, default_ttl: 5m}
`)
	p := newRuleProxy(t, site, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=300")
		who := "guest"
		if c, err := r.Cookie("sid"); err == nil {
			who = c.Value
		}
		_, _ = writeString(w, "hello "+who)
	}, nil)
	p.get("/account.js", "Cookie", "consent=1; sid=alice")
	if g := p.get("/account.js", "Cookie", "sid=bob"); strings.Contains(g.Body.String(), "alice") {
		t.Errorf("bob's GET /account.js (cookies stripped by its rule) got %q (Cache-Status %q): alice's page, filled under the consent rule that kept her cookies",
			g.Body.String(), g.Header().Get("Cache-Status"))
	}
}
