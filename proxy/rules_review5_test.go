package proxy

import (
	"net/http"
	"strings"
	"testing"
	"time"
)

// A fifth review. pick sends a case-ambiguous path to the built-in
// bypass, but only the request's rule (ForRequest) makes a request pass;
// the key rule (ForKey) skips cookie-conditional rules, so a request that
// carries such a rule's cookie gets that rule (no bypass) while its key
// rule is _ambiguous-path, which keys nothing of the request. The
// account rule's key.cookies [sid] is dropped for /account/… on an
// ASP.NET-style case-insensitive origin: alice's page, which the origin
// marked public because the edge keys it by sid, is served to bob.
func TestAmbiguousKeyRulePassesTheRequestUnderACookieRule(t *testing.T) {
	src := `
- {name: preview, match: {cookie: preview}, client_no_cache: honour}
- {name: account, match: {path: /Account/}, key: {cookies: [sid]}}
- {name: pages, default_ttl: 5m}
`
	p := newRuleProxy(t, ruleSite(t, src), func(w http.ResponseWriter, r *http.Request) {
		if !strings.HasPrefix(strings.ToLower(r.URL.Path), "/account/") {
			_, _ = writeString(w, "page")
			return
		}
		user := "anonymous"
		if c, err := r.Cookie("sid"); err == nil {
			user = c.Value
		}
		// Shared because the edge keys it by sid (the operator's key.cookies).
		w.Header().Set("Cache-Control", "public, max-age=60")
		_, _ = writeString(w, "account of "+user)
	}, nil)
	// Control: the spelling the rule names keeps alice and bob apart.
	for _, target := range []string{"/Account/manage", "/account/manage"} {
		alice := p.get(target, "Cookie", "preview=1; sid=alice")
		if !strings.Contains(alice.Body.String(), "alice") {
			t.Fatalf("%s: alice got %q", target, alice.Body.String())
		}
		bob := p.get(target, "Cookie", "preview=1; sid=bob")
		if strings.Contains(bob.Body.String(), "alice") {
			t.Errorf("%s: bob got %q (Cache-Status %q): the key rule was %s, the request's rule did not pass it",
				target, bob.Body.String(), bob.Header().Get("Cache-Status"), p.site.Rules.ForKey(target, "").Name)
		}
	}
}

// keepsApart counts a bypass and a key on the request's fields, but not a
// rule's query key: a site that keys pages without their query (tracking
// parameters) and carves /api/ out of that, so that the API's query (a
// token, an id) stays in the key, has /API/orders?token=… keyed as a page
// (exact match: the catch-all), and a case-insensitive origin answers it
// as /api/orders for the token's owner: stored under /API/orders, it is
// served to anyone who asks for /API/orders with any token or none.
func TestCaseAmbiguityCountsTheQueryKey(t *testing.T) {
	src := `
- {name: api, match: {path: /api/}}
- {name: pages, key: {ignore_params: ["*"]}}
`
	p := newRuleProxy(t, ruleSite(t, src), func(w http.ResponseWriter, r *http.Request) {
		if !strings.HasPrefix(strings.ToLower(r.URL.Path), "/api/") {
			w.Header().Set("Cache-Control", "public, max-age=300")
			_, _ = writeString(w, "page")
			return
		}
		// The API answers by the query's token, cacheable by URL.
		w.Header().Set("Cache-Control", "public, max-age=60")
		_, _ = writeString(w, "orders of "+r.URL.Query().Get("token"))
	}, nil)
	for _, path := range []string{"/api/orders", "/API/orders"} {
		alice := p.get(path + "?token=alice-secret")
		if !strings.Contains(alice.Body.String(), "alice") {
			t.Fatalf("%s: alice got %q", path, alice.Body.String())
		}
		m := p.get(path + "?token=mallory")
		if strings.Contains(m.Body.String(), "alice") {
			t.Errorf("%s?token=mallory got %q (Cache-Status %q): exact rule %q dropped the query the folded rule %q keys",
				path, m.Body.String(), m.Header().Get("Cache-Status"), p.site.Rules.ForKey(path, "token=mallory").Name, "api")
		}
	}
}

// caseLeak serves target as alice, then as nobody, on a site whose origin
// answers personally where routesAPI(path), and says how the second
// answer was alice's ("": it was not).
func caseLeak(t *testing.T, src string, routesAPI func(path string) bool, target string) string {
	t.Helper()
	p := newRuleProxy(t, ruleSite(t, src), personalOrigin(routesAPI), nil)
	alice := p.get(target, "Cookie", "sid=alice")
	if !strings.Contains(alice.Body.String(), "alice") {
		t.Fatalf("%s: alice got %q", target, alice.Body.String())
	}
	next := p.get(target)
	if strings.Contains(next.Body.String(), "alice") {
		return "the next user got " + next.Body.String() + " (Cache-Status " + next.Header().Get("Cache-Status") + ")"
	}
	return ""
}

// The regex fold is the pattern under (?i), matched against the
// lower-cased path. For a negated class that names capitals, (?i) turns
// "not a capital" into "not a letter": (?i)^/api/[^A-Z]+$ matches no
// path with a letter after /api/, so /API/me (which a case-insensitive
// origin reads as /api/me, which the bypass names: [^A-Z]+ matches "me")
// is neither matched as written nor folded: cached under pages, served
// to the next user. The reading a case-insensitive origin makes is "some
// spelling of the path matches", which the exact pattern on the
// lower-cased path gives and (?i) does not.
func TestRegexFoldKeepsNegatedClasses(t *testing.T) {
	src := `
- {name: api, match: {path_regex: '^/api/[^A-Z]+$'}, bypass: true}
- {name: pages, default_ttl: 5m}
`
	routes := func(p string) bool { return strings.HasPrefix(strings.ToLower(p), "/api/") }
	if got := caseLeak(t, src, routes, "/api/me"); got != "" {
		t.Fatalf("control /api/me: %s", got)
	}
	if got := caseLeak(t, src, routes, "/API/me"); got != "" {
		t.Errorf("/API/me past a bypass of ^/api/[^A-Z]+$: %s", got)
	}
}

// The fold differs by pattern kind: a regex is folded by (?i), which
// reads ſ (U+017F) as s (as Go's EqualFold, Python's re.IGNORECASE and
// JavaScript's /iu do), a prefix or a glob by strings.ToLower, which
// leaves ſ as it is. /uſers/me ("/u%C5%BFers/me") is covered by a regex
// bypass of ^/users/ and not by the same bypass written as a prefix: an
// origin that folds case so routes it to /users/me, and the prefix site
// stores alice's answer for the next user.
func TestPrefixFoldMatchesRegexFold(t *testing.T) {
	// An origin that compares paths with Unicode simple case folding
	// (Go's strings.EqualFold; Python's re.IGNORECASE).
	routes := func(p string) bool {
		return len(p) >= len("/uſers/") && strings.EqualFold(p[:len("/uſers/")], "/users/") || strings.HasPrefix(strings.ToLower(p), "/users/")
	}
	for _, src := range []string{
		"- {name: users, match: {path_regex: '^/users/'}, bypass: true}\n- {name: pages, default_ttl: 5m}\n",
		"- {name: users, match: {path: /users/}, bypass: true}\n- {name: pages, default_ttl: 5m}\n",
		"- {name: users, match: {path: '/users/*'}, bypass: true}\n- {name: pages, default_ttl: 5m}\n",
	} {
		if got := caseLeak(t, src, routes, "/u%C5%BFers/me"); got != "" {
			t.Errorf("rules %q: /uſers/me: %s", strings.SplitN(src, "\n", 2)[0], got)
		}
	}
}

// ForResponse runs pick over the response-only rules too, so a rule that
// matches on status and is written with capitals makes a path ambiguous
// for the response alone: the request's rule (pages, keyed on the
// device) stands, the request is not passed, and the response is
// stored under _ambiguous-path's lifetime, which is none: pages' max_ttl
// 1m is dropped and /shop/x is served for the origin's hour.
func TestResponseOnlyRuleDoesNotDropTheRequestRulesLifetime(t *testing.T) {
	src := `
- {name: shop-ok, match: {path: /Shop/, status: [200]}, response_headers: {set: {X-Section: shop}}}
- {name: pages, key: {device: true}, max_ttl: 1m}
`
	for _, path := range []string{"/blog/x", "/shop/x"} {
		p := newRuleProxy(t, ruleSite(t, src), func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Cache-Control", "public, max-age=3600")
			_, _ = writeString(w, "page")
		}, nil)
		p.get(path)
		p.advance(2 * time.Minute)
		before := p.calls.Load()
		w := p.get(path)
		if p.calls.Load() == before {
			t.Errorf("%s: served 2 minutes after its fill under max_ttl 1m without the origin (Cache-Status %q, Age %q; request rule %s, response rule %s)",
				path, w.Header().Get("Cache-Status"), w.Header().Get("Age"),
				p.site.Rules.ForRequest("GET", path, nil).Name, p.site.Rules.ForResponse("GET", path, nil, 200).Name)
		}
	}
}
