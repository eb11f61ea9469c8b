package proxy

import (
	"net/http"
	"testing"
)

// TestS54ReloadThatDropsAHeadRuleServesItsFillToGets: under rules with a
// HEAD-only rule ahead of one that sets the origin's token, a GET's
// variant is keyed on the token (setsUniformly is false) and a HEAD's
// fill, made without it, sits in the plain variant, never a GET's. A
// reload that only removes the HEAD rule (no request_headers changed)
// makes the token uniform, so GETs read the plain variant: the HEAD's
// fill, made without the token, is every GET's until it expires.
// docs/rules.md asks for a purge after a change of what a rule sends the
// origin; this reload changed no rule's request edits. (Interpretation:
// a minor, documented-adjacent case.)
func TestS54ReloadThatDropsAHeadRuleServesItsFillToGets(t *testing.T) {
	before := ruleSite(t, `
- {name: probes, match: {methods: [HEAD]}, default_ttl: 5m}
- {name: pages, default_ttl: 5m, request_headers: {set: {X-Origin-Token: s3cret}}}
`)
	p := newRuleProxy(t, before, func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Origin-Token") != "s3cret" {
			_, _ = writeString(w, "direct access: use the CDN")
			return
		}
		_, _ = writeString(w, "the page")
	}, nil)
	p.s54Head("/page")
	if g := p.get("/page"); g.Body.String() != "the page" {
		t.Fatalf("GET /page before the reload: %q; the control is broken", g.Body.String())
	}
	// The reload: the same site, the HEAD rule gone.
	p.site = ruleSite(t, `
- {name: pages, default_ttl: 5m, request_headers: {set: {X-Origin-Token: s3cret}}}
`)
	if g := p.get("/page"); g.Body.String() != "the page" {
		t.Errorf("GET /page after a reload that removed only the HEAD rule got %q (Cache-Status %q): the HEAD's fill, made without the rule's X-Origin-Token, which no GET was served before the reload",
			g.Body.String(), g.Header().Get("Cache-Status"))
	}
}
