package proxy

import (
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// A HEAD and a GET share one entry, and a rule may name HEAD alone
// (docs/rules.md). The fix of node/review_s52_* (08908c5) covers a GET
// rule that sets a field the cache keys (reqfield.Keyed: X-Origin-Token):
// the GET's variant is keyed on it, so a HEAD's fill made under a rule
// of its own is never a GET's. The tests below take the same HEAD-only
// rule ahead of a GET rule and change what the GET rule does.

// s54Head sends a HEAD of path with the given fields through ServeHTTP.
func (p *ruleProxy) s54Head(path string, hdr ...string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(http.MethodHead, "http://shop.test"+path, nil)
	for i := 0; i+1 < len(hdr); i += 2 {
		r.Header.Add(hdr[i], hdr[i+1])
	}
	w := httptest.NewRecorder()
	p.h.ServeInbound(w, r, Inbound{Site: p.site})
	p.h.Wait()
	return w
}

// TestS54HeadRuleFillIsServedToAGetWhoseRuleSetsAStandardField: the GET
// rule sets User-Agent (an operator normalising it, so that an origin
// that renders per device without Vary is cached as one page). The field
// is a standard one (reqfield.Neutral), which fieldKey never keys, so
// setsUniformly's premise ("ServeHTTP keys a request by the fields its
// rule set") does not hold: the GET's variant is the plain one, and the
// mobile page anyone's HEAD filled under the HEAD rule (the client's own
// User-Agent sent on) is every GET's.
func TestS54HeadRuleFillIsServedToAGetWhoseRuleSetsAStandardField(t *testing.T) {
	site := ruleSite(t, `
- {name: probes, match: {methods: [HEAD]}, default_ttl: 5m}
- {name: pages, default_ttl: 5m, request_headers: {set: {User-Agent: edge-normalised}}}
`)
	p := newRuleProxy(t, site, func(w http.ResponseWriter, r *http.Request) {
		if strings.Contains(r.Header.Get("User-Agent"), "iPhone") {
			_, _ = writeString(w, "mobile page")
			return
		}
		_, _ = writeString(w, "desktop page")
	}, nil)
	p.s54Head("/page", "User-Agent", "Mozilla/5.0 (iPhone; CPU iPhone OS 17_0)")
	if g := p.get("/page", "User-Agent", "Mozilla/5.0 (X11; Linux x86_64)"); g.Body.String() != "desktop page" {
		t.Errorf("GET /page after anyone's HEAD got %q (Cache-Status %q): the answer the origin made for the HEAD's own User-Agent, which the GET's rule replaces (the GET rule's edit ignored)",
			g.Body.String(), g.Header().Get("Cache-Status"))
	}
}

// TestS54HeadRuleFillIsServedToAGetWithoutItsRulesResponseEdits: the GET
// rule removes a field the origin writes about the requester (a debug
// field naming the client) and sets a security policy. A HEAD under a rule
// of its own fills the entry with the origin's fields unedited, and GETs
// are served them: one requester's address reaches every later visitor,
// and the page goes out without the policy the GET rule sets.
// (Interpretation: docs/rules.md has a response's edits come from the
// rule of its request; a HEAD's fill answers GETs, so the GET rule's
// edits are skipped for every GET it answers.)
func TestS54HeadRuleFillIsServedToAGetWithoutItsRulesResponseEdits(t *testing.T) {
	site := ruleSite(t, `
- {name: probes, match: {methods: [HEAD]}, default_ttl: 5m}
- name: pages
  default_ttl: 5m
  response_headers: {set: {Content-Security-Policy: "default-src 'self'"}, remove: [X-Debug-Client]}
`)
	p := newRuleProxy(t, site, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Debug-Client", r.Header.Get("X-Forwarded-For"))
		_, _ = writeString(w, "the page")
	}, nil)
	p.s54Head("/page")
	g := p.get("/page")
	if g.Body.String() != "the page" {
		t.Fatalf("GET /page: %q; the control is broken", g.Body.String())
	}
	if v := g.Header().Get("X-Debug-Client"); v != "" {
		t.Errorf("GET /page after anyone's HEAD carries X-Debug-Client %q (Cache-Status %q): the HEAD requester's field, which the GET's rule removes", v, g.Header().Get("Cache-Status"))
	}
	if v := g.Header().Get("Content-Security-Policy"); v == "" {
		t.Errorf("GET /page after anyone's HEAD has no Content-Security-Policy (Cache-Status %q): the GET rule's response edit skipped", g.Header().Get("Cache-Status"))
	}
}

// TestS54HeadRuleLifetimeOutlivesTheGetRulesCeiling: the GET rule caps a
// page's lifetime (max_ttl: 10s, prices), a rule for HEAD alone (uptime
// probes) gives a day. Anyone's HEAD fills the entry under the HEAD rule's
// lifetime, and GETs are served it for the day: the GET rule's ceiling
// is ignored. lifetimeShared (proxy/rules.go) already says a lifetime a
// HEAD's rule gives must not be kept for others (a disk hit rebuilt
// under it is not promoted); a fill is.
func TestS54HeadRuleLifetimeOutlivesTheGetRulesCeiling(t *testing.T) {
	site := ruleSite(t, `
- {name: probes, match: {methods: [HEAD]}, ttl: 1d}
- {name: prices, max_ttl: 10s}
`)
	var version atomic.Int64
	p := newRuleProxy(t, site, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=3600")
		_, _ = writeString(w, "price v"+strconv.FormatInt(version.Add(1), 10))
	}, nil)
	p.s54Head("/price")
	p.advance(time.Minute)
	if g := p.get("/price"); g.Body.String() == "price v1" {
		t.Errorf("GET /price a minute after anyone's HEAD got %q (Cache-Status %q, Age %q): the HEAD's fill, kept a day under the HEAD rule, past the GET rule's max_ttl of 10s",
			g.Body.String(), g.Header().Get("Cache-Status"), g.Header().Get("Age"))
	}
	// The control: without the HEAD, a GET's own fill lives 10 s.
	first := p.get("/other").Body.String()
	p.advance(time.Minute)
	if g := p.get("/other"); g.Body.String() == first {
		t.Fatalf("control: GET /other a minute after its fill got the fill again, %q (Cache-Status %q)", first, g.Header().Get("Cache-Status"))
	}
}

// TestS54CookieRuleEditOfAStandardFieldIsServedToEveryone: the same
// root as the HEAD case, by a cookie condition (setsUniformly is false
// for every rule of a set with one: NeedsHeader). A rule for visitors who
// chose German sets Accept-Language: de. The field is a standard one, so
// the variant is the plain one whatever the rule set, and the German page
// the origin made for that visitor (explicitly fresh: a cookie request's
// explicit lifetime is stored) is every visitor's, though the origin
// never reads the cookie: the rule made the answer that visitor's own.
func TestS54CookieRuleEditOfAStandardFieldIsServedToEveryone(t *testing.T) {
	site := ruleSite(t, `
- {name: german, match: {cookie: lang_de}, request_headers: {set: {Accept-Language: de}}}
- {name: pages, default_ttl: 5m}
`)
	p := newRuleProxy(t, site, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=300")
		if strings.HasPrefix(r.Header.Get("Accept-Language"), "de") {
			_, _ = writeString(w, "Willkommen")
			return
		}
		_, _ = writeString(w, "Welcome")
	}, nil)
	if g := p.get("/home", "Cookie", "lang_de=1"); g.Body.String() != "Willkommen" {
		t.Fatalf("the German visitor got %q; the control is broken", g.Body.String())
	}
	if g := p.get("/home", "Accept-Language", "en"); g.Body.String() != "Welcome" {
		t.Errorf("an English visitor after a German one got %q (Cache-Status %q): the answer the german rule's Accept-Language made, stored as every request's variant",
			g.Body.String(), g.Header().Get("Cache-Status"))
	}
}
