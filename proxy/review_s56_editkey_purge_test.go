package proxy

import (
	"net/http"
	"strings"
	"testing"
)

// TestS56EditKeyVariantsGoWithEveryPurgeOfTheirURL: the variant editKey
// makes for a cookie rule's request edits lives under the URL's key, so a
// URL purge, a tag purge and a path-prefix purge each reach it as they
// reach the plain variant (a purged German page must not come back to
// its visitors).
func TestS56EditKeyVariantsGoWithEveryPurgeOfTheirURL(t *testing.T) {
	site := ruleSite(t, `
- {name: german, match: {cookie: lang_de}, request_headers: {set: {Accept-Language: de}}}
- {name: pages, default_ttl: 5m}
`)
	version := "v1"
	p := newRuleProxy(t, site, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=300")
		w.Header().Set("Surrogate-Key", "home")
		if strings.HasPrefix(r.Header.Get("Accept-Language"), "de") {
			_, _ = writeString(w, "Willkommen "+version)
			return
		}
		_, _ = writeString(w, "Welcome "+version)
	}, func(c *Config) { c.SiteFor = func(string) *Site { return site } })
	for _, purge := range []PurgeRequest{
		{URL: "http://shop.test/home"},
		{Tag: "home"},
		{Prefix: "/ho"},
		{URL: "http://shop.test/home", Soft: true},
	} {
		p.get("/home", "Cookie", "lang_de=1")
		p.get("/home")
		if g := p.get("/home", "Cookie", "lang_de=1"); !strings.Contains(g.Header().Get("Cache-Status"), "hit") {
			t.Fatalf("%+v: the German variant is not a hit before the purge: %q", purge, g.Header().Get("Cache-Status"))
		}
		if _, err := p.h.Purge(purge); err != nil {
			t.Fatal(err)
		}
		old := version
		version += "+"
		if g := p.get("/home", "Cookie", "lang_de=1"); g.Body.String() == "Willkommen "+old {
			t.Errorf("%+v: the German variant outlived the purge: %q (Cache-Status %q)", purge, g.Body.String(), g.Header().Get("Cache-Status"))
		}
		if g := p.get("/home"); g.Body.String() == "Welcome "+old {
			t.Errorf("%+v: the plain variant outlived the purge: %q (Cache-Status %q)", purge, g.Body.String(), g.Header().Get("Cache-Status"))
		}
	}
}
