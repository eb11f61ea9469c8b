package proxy

// Regression tests from the hostile review of the cache rules (each
// failed before its fix): leaks through lifetimes a rule lengthened, key
// confusion, rule evasion, and places where behaviour differed from
// docs/rules.md.

import (
	"bytes"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// 1. ttl turns "must-revalidate, max-age=0" (shareable only because every
// reuse is checked with the origin) into a fresh entry, and alice's
// authorised answer reaches an anonymous client without a check.
func TestReviewTTLOverridesMustRevalidateOnAuthorizedAnswer(t *testing.T) {
	for _, cc := range []string{"must-revalidate, max-age=0", "s-maxage=0", "public, max-age=0", "max-age=0"} {
		t.Run(cc, func(t *testing.T) {
			p := newRuleProxy(t, ruleSite(t, `[{name: api, ttl: 1h}]`), func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Cache-Control", cc)
				w.Header().Set("ETag", `"`+r.Header.Get("Authorization")+`"`)
				_, _ = writeString(w, "secret of "+r.Header.Get("Authorization"))
			}, nil)
			p.get("/me", "Authorization", "Bearer alice")
			p.advance(time.Second)
			anon := p.get("/me")
			bob := p.get("/me", "Authorization", "Bearer bob")
			for who, w := range map[string]string{"anonymous": anon.Body.String(), "bob": bob.Body.String()} {
				if strings.Contains(w, "alice") {
					t.Errorf("%s got %q (origin calls %d)", who, w, p.calls.Load())
				}
			}
		})
	}
}

// 2. A cookie-conditioned rule that strips cookies never gives its own
// lifetime: the response rule is looked up on the request after the strip.
func TestReviewStripCookieRuleLosesItsOwnLifetime(t *testing.T) {
	site := ruleSite(t, `
- {name: tracked, match: {cookie: "_ga*"}, strip_cookies: true, ttl: 10s}
- {name: rest, ttl: 1h}
`)
	p := newRuleProxy(t, site, func(w http.ResponseWriter, r *http.Request) {
		_, _ = writeString(w, "page")
	}, nil)
	p.get("/a", "Cookie", "_ga=1")
	if got := p.h.store; got == nil {
		t.Fatal()
	}
	e, _ := p.h.store.Lookup("shop http://shop.test/a", nil)
	if e == nil {
		t.Fatal("not stored")
	}
	if e.lifetime != 10*time.Second {
		t.Errorf("lifetime %v, want the matching rule's 10s (rule tracked)", e.lifetime)
	}
}

// 3. Stale windows of a rule without a status match apply to every status,
// though "lifetimes apply to status [200 203 204 300 301 308]".
func TestReviewStaleWindowsReachOtherStatuses(t *testing.T) {
	var fail atomic.Bool
	p := newRuleProxy(t, ruleSite(t, `[{name: pages, default_ttl: 1m, stale_if_error: 20h}]`), func(w http.ResponseWriter, r *http.Request) {
		if fail.Load() {
			w.WriteHeader(http.StatusBadGateway)
			return
		}
		w.Header().Set("Cache-Control", "max-age=1")
		w.WriteHeader(http.StatusNotFound)
		_, _ = writeString(w, "not found")
	}, func(c *Config) { c.Policy.StaleIfErrorDefault = 0 })
	p.get("/gone")
	fail.Store(true)
	p.advance(10 * time.Hour)
	if w := p.get("/gone"); w.Code == http.StatusNotFound {
		t.Errorf("a 404 10h stale served on error (%q): the rule's stale_if_error applied to a status its lifetimes do not", w.Header().Get("Cache-Status"))
	}
}

// 4. sort_params sorts the key but not the forwarded query: an origin
// that reads the first of duplicated parameters answers ?a=2&a=1 and
// ?a=1&a=2 differently, and both share one entry.
func TestReviewSortParamsKeyNotForwarded(t *testing.T) {
	p := newRuleProxy(t, ruleSite(t, `[{name: r, key: {sort_params: true}}]`), func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=600")
		_, _ = writeString(w, "a="+r.URL.Query().Get("a")) // first value wins
	}, nil)
	p.get("/p?a=evil&a=1")
	w := p.get("/p?a=1&a=evil")
	if w.Body.String() != "a=1" {
		t.Errorf("?a=1&a=evil got %q (cached from ?a=evil&a=1)", w.Body.String())
	}
}

// 6. A bypass glob evaded with a literal '*' in the path (%2A), and an
// answer the origin marked max-age=0 kept by a ttl rule.
func TestReviewGlobBypassEvadedEndToEnd(t *testing.T) {
	site := ruleSite(t, `[{name: acct, match: {path: "/account/*"}, bypass: true}, {name: rest, ttl: 1h}]`)
	p := newRuleProxy(t, site, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=0") // "not for reuse without a check"
		_, _ = fmt.Fprintf(w, "account of %s", r.Header.Get("Cookie"))
	}, nil)
	p.get("/account/%2Aprofile", "Cookie", "sid=alice")
	w := p.get("/account/%2Aprofile", "Cookie", "sid=bob")
	if strings.Contains(w.Body.String(), "alice") {
		t.Errorf("bob got %q", w.Body.String())
	}
}

// 5b. Slices fetched by Range are stored without the key rule's variant
// key and looked up by URL alone: one variant's slice is spliced into
// another variant's object.
func TestReviewSlicesCrossKeyRuleVariants(t *testing.T) {
	mk := func(lang string) []byte { return bytes.Repeat([]byte(lang+"-"), 3<<20/3) } // 3 MiB, same length per language
	site := ruleSite(t, `[{name: media, key: {headers: [Accept-Language]}}]`)
	p := newRuleProxy(t, site, func(w http.ResponseWriter, r *http.Request) {
		lang := r.Header.Get("Accept-Language")
		w.Header().Set("Content-Type", "video/mp4")
		w.Header().Set("Cache-Control", "max-age=3600")
		http.ServeContent(w, r, "x.mp4", time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC), bytes.NewReader(mk(lang)))
	}, func(c *Config) { c.SliceBytes = 1 << 20; c.MaxObjectBytes = 2 << 20; c.MaxBufferedBytes = 64 << 20 })
	rg := "bytes=1500000-1500011"
	en := p.get("/v.mp4", "Accept-Language", "en", "Range", rg)
	de := p.get("/v.mp4", "Accept-Language", "de", "Range", rg)
	t.Logf("en %q (%s), de %q (%s)", en.Body.String(), en.Header().Get("Cache-Status"), de.Body.String(), de.Header().Get("Cache-Status"))
	if strings.Contains(de.Body.String(), "en") {
		t.Errorf("X-Lang: de was served en's bytes: %q", de.Body.String())
	}
}

// 7. key: {cookies: [lang]} hashes the first lang cookie; an origin that
// reads the last one (Python's SimpleCookie, Django) renders the
// attacker's value into the entry every lang=en visitor gets.
func TestReviewKeyCookieDuplicateName(t *testing.T) {
	site := ruleSite(t, `[{name: i18n, key: {cookies: [lang]}}]`)
	p := newRuleProxy(t, site, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=600")
		lang := ""
		for _, c := range r.Cookies() {
			if c.Name == "lang" {
				lang = c.Value // last one wins
			}
		}
		_, _ = writeString(w, "page in "+lang)
	}, nil)
	p.get("/home", "Cookie", "lang=en; lang=evil")
	w := p.get("/home", "Cookie", "lang=en")
	if w.Body.String() != "page in en" {
		t.Errorf("lang=en visitor got %q (%s)", w.Body.String(), w.Header().Get("Cache-Status"))
	}
}

// 8. Web cache deception through a ttl rule: the victim's personal page,
// marked max-age=0 by the origin, is kept for the rule's ttl and served
// to anyone asking the same URL.
func TestReviewTTLOverMaxAge0WithCookie(t *testing.T) {
	site := ruleSite(t, `[{name: assets, match: {path_regex: '\.(css|js|png)$'}, ttl: 7d}]`)
	p := newRuleProxy(t, site, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=0")
		_, _ = fmt.Fprintf(w, "account page of %s", r.Header.Get("Cookie")) // PATH_INFO: /account.php/x.css is account.php
	}, nil)
	p.get("/account.php/x.css", "Cookie", "sid=victim")
	w := p.get("/account.php/x.css")
	if strings.Contains(w.Body.String(), "victim") {
		t.Errorf("anonymous got %q (%s)", w.Body.String(), w.Header().Get("Cache-Status"))
	}
}

// 9. A status-matched response edit is skipped for the 304 that
// revalidates the entry, and the 304's fields are merged into it.
func TestReviewStatusEditSkippedOn304(t *testing.T) {
	site := ruleSite(t, `[{name: ok, match: {status: [200]}, response_headers: {remove: [X-Debug-User]}}]`)
	p := newRuleProxy(t, site, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=1")
		w.Header().Set("ETag", `"1"`)
		w.Header().Set("X-Debug-User", r.Header.Get("X-User"))
		if r.Header.Get("If-None-Match") == `"1"` {
			w.WriteHeader(http.StatusNotModified)
			return
		}
		_, _ = writeString(w, "page")
	}, nil)
	p.get("/a", "X-User", "alice")
	p.advance(2 * time.Second)
	p.get("/a", "X-User", "bob")
	w := p.get("/a")
	if v := w.Header().Get("X-Debug-User"); v != "" {
		t.Errorf("the third user got X-Debug-User: %s, which the rule removes (%s)", v, w.Header().Get("Cache-Status"))
	}
}

// 10. The hit-for-pass memory is keyed without the key rule's fields: one
// variant's uncacheable answer makes every variant bypass the cache.
func TestReviewPassMemoryIgnoresKeyRuleFields(t *testing.T) {
	site := ruleSite(t, `[{name: i18n, key: {headers: [Accept-Language]}}]`)
	p := newRuleProxy(t, site, func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Accept-Language") == "xx" {
			w.Header().Set("Cache-Control", "no-store")
		} else {
			w.Header().Set("Cache-Control", "max-age=600")
		}
		_, _ = writeString(w, "page")
	}, nil)
	p.get("/home", "Accept-Language", "xx")
	before := p.calls.Load()
	for range 3 {
		p.get("/home", "Accept-Language", "en")
	}
	if n := p.calls.Load() - before; n > 1 {
		t.Errorf("Accept-Language: en made %d origin requests for 3 requests after one xx answer was no-store", n)
	}
}
