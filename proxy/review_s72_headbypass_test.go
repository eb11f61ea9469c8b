package proxy

import (
	"net/http"
	"testing"
)

// TestS72HeadRuleFillsAPathTheGetRuleBypasses: a HEAD-only rule ahead of
// a bypass for account pages. The bypass is the operator's guard for
// pages the origin marks fresh for the browser's sake (max-age=60) while
// making them per session. A HEAD's rule is the probes rule, which does
// not pass, so alice's HEAD (her cookie sent on) fills the key the GET
// rule keeps out of the store, and bob's HEAD is answered alice's fields.
// (ServeHTTP passes a request whose key rule is the ambiguous-path bypass
// whatever its own rule says, rulingOf; a key rule the operator wrote
// that bypasses does not get the same.)
func TestS72HeadRuleFillsAPathTheGetRuleBypasses(t *testing.T) {
	site := ruleSite(t, `
- {name: probes, match: {methods: [HEAD]}, client_no_cache: ignore}
- {name: account, match: {path: /account/}, bypass: true}
- {name: pages, default_ttl: 5m}
`)
	p := newRuleProxy(t, site, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=60")
		who := "guest"
		if c, err := r.Cookie("sid"); err == nil {
			who = c.Value
		}
		w.Header().Set("X-Account", who)
		_, _ = writeString(w, "account of "+who)
	}, nil)
	p.s54Head("/account/", "Cookie", "sid=alice")
	bob := p.s54Head("/account/", "Cookie", "sid=bob")
	if v := bob.Header().Get("X-Account"); v == "alice" {
		t.Errorf("bob's HEAD /account/ was answered X-Account %q (Cache-Status %q): alice's answer, stored under a key whose GET rule bypasses the store",
			v, bob.Header().Get("Cache-Status"))
	}
}

// TestS72CookieRuleFillsAPathTheKeyRuleBypasses: the same by a cookie
// condition, with GETs. A rule for visitors who accepted the consent
// banner (a response field, nothing else) sits ahead of the account
// bypass. Every consenting visitor's GET of /account/ is under the
// consent rule, which does not pass: alice's account page is stored
// (the origin's max-age=60 is explicit) under the URL's key, and bob,
// who consented too, is served it.
func TestS72CookieRuleFillsAPathTheKeyRuleBypasses(t *testing.T) {
	site := ruleSite(t, `
- {name: consented, match: {cookie: consent}, response_headers: {set: {X-Consent: "1"}}}
- {name: account, match: {path: /account/}, bypass: true}
- {name: pages, default_ttl: 5m}
`)
	p := newRuleProxy(t, site, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=60")
		who := "guest"
		if c, err := r.Cookie("sid"); err == nil {
			who = c.Value
		}
		_, _ = writeString(w, "account of "+who)
	}, nil)
	p.get("/account/", "Cookie", "consent=1; sid=alice")
	if g := p.get("/account/", "Cookie", "consent=1; sid=bob"); g.Body.String() != "account of bob" {
		t.Errorf("bob's GET /account/ got %q (Cache-Status %q): alice's account page, stored under a key whose rule bypasses",
			g.Body.String(), g.Header().Get("Cache-Status"))
	}
}
