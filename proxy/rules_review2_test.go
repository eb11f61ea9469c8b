package proxy

import (
	"net/http"
	"path"
	"strings"
	"testing"
	"time"
)

// TestRuleStaleWindowDoesNotShareACookieAnswerTheOriginKeptToRevalidation:
// an origin answers a request with a session cookie with a personal page
// marked max-age=0 (with a validator): a shared cache may keep it, but
// must revalidate it before every use, which gives the next user their
// own page. A plain "pages" rule with stale_while_revalidate (the
// WordPress example's) must not turn that forced revalidation into a
// stale window in which Alice's page is served to Bob: docs/rules.md
// promises that a rule never lengthens what the origin kept short for a
// request that carried a cookie.
func TestRuleStaleWindowDoesNotShareACookieAnswerTheOriginKeptToRevalidation(t *testing.T) {
	for name, src := range map[string]string{
		"swr":       `[{name: pages, stale_while_revalidate: 1m}]`,
		"wordpress": `[{name: pages, default_ttl: 5m, stale_while_revalidate: 1m, stale_if_error: 1h}]`,
	} {
		t.Run(name, func(t *testing.T) {
			p := newRuleProxy(t, ruleSite(t, src), func(w http.ResponseWriter, r *http.Request) {
				user := "anonymous"
				if c, err := r.Cookie("sid"); err == nil {
					user = c.Value
				}
				w.Header().Set("Cache-Control", "max-age=0")
				w.Header().Set("ETag", `"`+user+`"`)
				_, _ = writeString(w, "account page of "+user)
			}, nil)
			alice := p.get("/account", "Cookie", "sid=alice")
			if !strings.Contains(alice.Body.String(), "alice") {
				t.Fatalf("alice: %q", alice.Body.String())
			}
			p.advance(2 * time.Second)
			bob := p.get("/account")
			if strings.Contains(bob.Body.String(), "alice") {
				t.Fatalf("an anonymous user got alice's page %q (Cache-Status %q): the rule's stale_while_revalidate served an answer to a cookie that the origin marked max-age=0", bob.Body.String(), bob.Header().Get("Cache-Status"))
			}
		})
	}
}

// TestBypassRuleCoversEverySpellingOfItsPath: an operator bypasses /api/
// because the API's answers are per user although it sends a browser
// max-age (the origin's headers are "wrong for a CDN", the case rules are
// for). Most origins (nginx, Apache, Tomcat, IIS) serve /api/me for
// //api/me, /./api/me and /x/../api/me. A victim who follows a link to
// one of those spellings must not have their answer stored for the next
// user: docs/rules.md promises that no spelling of a path slips past a
// rule that names it (it handles only percent-encoding).
func TestBypassRuleCoversEverySpellingOfItsPath(t *testing.T) {
	// As nginx routes it: dot segments resolved, slashes merged.
	apiBypassCovers(t, func(p string) string { return path.Clean("/" + p) },
		"/api/me", "//api/me", "/./api/me", "/x/../api/me", "/%2e/api/me", "/static/%2e%2e/api/me")
}

// personalOrigin answers a path routes names with the sid cookie's own
// page, marked for the browser's cache (max-age) as such pages often are,
// and every other path with "page".
func personalOrigin(routes func(path string) bool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if !routes(r.URL.Path) {
			_, _ = writeString(w, "page")
			return
		}
		user := "anonymous"
		if c, err := r.Cookie("sid"); err == nil {
			user = c.Value
		}
		w.Header().Set("Cache-Control", "max-age=60") // meant for the browser
		_, _ = writeString(w, "account data of "+user)
	}
}

// apiBypassCovers runs a site with a bypass of /api/ and a rule caching
// pages, in front of an origin that reads a path through readPath (as the
// kind of origin under test does) and answers /api/ with a per-user page
// marked for the browser's cache; for each target, another user must
// never get alice's answer.
func apiBypassCovers(t *testing.T, readPath func(string) string, targets ...string) {
	t.Helper()
	site := ruleSite(t, `
- {name: api, match: {path: /api/}, bypass: true}
- {name: pages, default_ttl: 5m}
`)
	p := newRuleProxy(t, site, personalOrigin(func(path string) bool { return strings.HasPrefix(readPath(path), "/api/") }), nil)
	for _, target := range targets {
		alice := p.get(target, "Cookie", "sid=alice")
		if !strings.Contains(alice.Body.String(), "alice") {
			t.Fatalf("%s: alice got %q", target, alice.Body.String())
		}
		mallory := p.get(target)
		if strings.Contains(mallory.Body.String(), "alice") {
			t.Errorf("%s: another user got alice's answer %q (Cache-Status %q): the bypass rule for /api/ did not cover this spelling of /api/me", target, mallory.Body.String(), mallory.Header().Get("Cache-Status"))
		}
	}
}

// TestKeyCookiePatternKeysOnTheCookiesItNames: rules accepts a trailing *
// in key.cookies (its error for a bad name says "a trailing * makes a
// prefix; * alone is every name", and `edge config explain` prints "key
// adds cookie values [SSESS*]"), as for ignore_params and allow_params. An
// operator who keys pages on Drupal's session cookie (SSESS<site hash>)
// to give each session its own entry must get that: Bob must never get
// the entry made for Alice's session.
func TestKeyCookiePatternKeysOnTheCookiesItNames(t *testing.T) {
	for name, src := range map[string]string{
		"prefix": `[{name: pages, key: {cookies: ["SSESS*"]}}]`,
		"every":  `[{name: pages, key: {cookies: ["*"]}}]`,
	} {
		t.Run(name, func(t *testing.T) {
			p := newRuleProxy(t, ruleSite(t, src), func(w http.ResponseWriter, r *http.Request) {
				user := "anonymous"
				for _, c := range r.Cookies() {
					if strings.HasPrefix(c.Name, "SSESS") {
						user = c.Value
					}
				}
				w.Header().Set("Cache-Control", "max-age=60")
				_, _ = writeString(w, "dashboard of "+user)
			}, nil)
			alice := p.get("/dashboard", "Cookie", "SSESS9f3a=alice")
			if !strings.Contains(alice.Body.String(), "alice") {
				t.Fatalf("alice got %q", alice.Body.String())
			}
			bob := p.get("/dashboard", "Cookie", "SSESS9f3a=bob")
			if strings.Contains(bob.Body.String(), "alice") {
				t.Fatalf("bob got alice's page %q (Cache-Status %q): key.cookies %s was accepted but keyed on no cookie", bob.Body.String(), bob.Header().Get("Cache-Status"), src)
			}
		})
	}
}

// TestRequestHeaderSetDoesNotMakeEveryRequestAVariant: an operator adds a
// shared secret the origin checks (request_headers: {set: {X-Origin-Token:
// …}}), as CDNs advise to keep direct traffic off the origin. The field
// is the edge's, the same on every request: it must not turn every
// request into a keyed variant of its own (proxy.fieldKey), which is
// never sliced (every object above cache.max_object_bytes then passes
// through to the origin on every request) and never answered by the hit
// path.
func TestRequestHeaderSetDoesNotMakeEveryRequestAVariant(t *testing.T) {
	for name, src := range map[string]string{
		"control": `[{name: media, default_ttl: 1h}]`,
		"token":   `[{name: media, default_ttl: 1h, request_headers: {set: {X-Origin-Token: s3cret}}}]`,
	} {
		t.Run(name, func(t *testing.T) {
			o := newSliceOrigin(8 << 20)
			site := ruleSite(t, src)
			p := newRuleProxy(t, site, o.serve, func(c *Config) { c.SliceBytes = 1 << 20; c.MaxObjectBytes = 1 << 20 })
			for range 3 {
				if w := p.get("/movie.mp4", "Range", "bytes=0-99"); w.Code != http.StatusPartialContent {
					t.Fatalf("range: %d", w.Code)
				}
			}
			if n := o.whole.Load() + o.ranged.Load(); n != 1 {
				t.Errorf("three requests for the first 100 bytes of an 8 MiB file made %d origin requests (want 1: the first slice, then hits)", n)
			}
			// A small page, stored whole: the hit path must answer it.
			q := newRuleProxy(t, site, plainPage, nil)
			q.get("/page")
			if w := q.get("/page"); !strings.Contains(w.Header().Get("Cache-Status"), "hit") {
				t.Fatalf("second request: %q", w.Header().Get("Cache-Status"))
			}
			var a HitAnswer
			if !q.h.AppendHit(nil, &HitRequest{Host: "shop.test", Path: "/page", Site: site}, []byte("Date: x\r\n"), &a) {
				t.Errorf("the hit path declined a stored page under the rule (the page is stored as a keyed variant)")
			} else {
				q.h.ReleaseHit(a.Pinned, a.ClientIP)
			}
		})
	}
}

// rack2Query reads a query as Rack 2 (Rails up to Rack 3.0) and Python's
// parse_qs before 3.9.2 read it: '&' and ';' both separate parameters,
// and the last of two parameters of one name wins.
func rack2Query(raw string) map[string]string {
	out := map[string]string{}
	for _, p := range strings.FieldsFunc(raw, func(r rune) bool { return r == '&' || r == ';' }) {
		k, v, _ := strings.Cut(p, "=")
		out[k] = v
	}
	return out
}

// TestIgnoredParamCannotCloakAKeyedOne: with the documented
// ignore_params: [utm_*, fbclid, gclid], a parameter the key ignores
// still reaches the origin. An origin that also separates parameters by
// ';' (Rack 2, Python < 3.9.2) reads id=2 out of "utm_source=x;id=2",
// while the key keeps id=1: the page of product 2 is stored as product
// 1's, for everyone (parameter cloaking).
func TestIgnoredParamCannotCloakAKeyedOne(t *testing.T) {
	site := ruleSite(t, `[{name: pages, default_ttl: 5m, key: {ignore_params: [utm_*, fbclid, gclid]}}]`)
	p := newRuleProxy(t, site, func(w http.ResponseWriter, r *http.Request) {
		_, _ = writeString(w, "product "+rack2Query(r.URL.RawQuery)["id"])
	}, nil)
	p.get("/product?id=1&utm_source=x;id=2")
	if w := p.get("/product?id=1"); w.Body.String() != "product 1" {
		t.Fatalf("GET /product?id=1 got %q (Cache-Status %q): a parameter the key ignores carried another id to the origin", w.Body.String(), w.Header().Get("Cache-Status"))
	}
}
