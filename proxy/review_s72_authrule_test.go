package proxy

import (
	"net/http"
	"testing"
)

// TestS72RuleSetAuthorizationHitPathServesWhatServeHTTPPasses: config
// check accepts a rule that sets Authorization (the origin moved behind
// basic auth; nginx's proxy_set_header Authorization). ServeHTTP reads
// the request after the rule's edit: it carries credentials, and a stored
// answer that did not say it may be shared with them (public, s-maxage,
// must-revalidate: authAllowsShared) is not used; the request goes to the
// origin. The hit path reads the client's request as sent, with no
// Authorization, and serves the stored copy. A reload that adds the rule
// keeps the site's entries (same site, same keys), so the same request is
// answered the origin's credentialed page by ServeHTTP (HTTP/2, HTTP/3,
// any request the hit path declines) and the anonymous copy by the
// HTTP/1.1 hit path until it expires.
func TestS72RuleSetAuthorizationHitPathServesWhatServeHTTPPasses(t *testing.T) {
	before := ruleSite(t, `[{name: pages, key: {sort_params: true}}]`)
	p := newRuleProxy(t, before, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=600")
		if r.Header.Get("Authorization") != "" {
			_, _ = writeString(w, "members page")
			return
		}
		_, _ = writeString(w, "public page")
	}, nil)
	if g := p.get("/p"); g.Body.String() != "public page" {
		t.Fatalf("control: %q", g.Body.String())
	}
	// The reload: the same site with the rule that sets Authorization.
	after := ruleSite(t, `[{name: pages, key: {sort_params: true}, request_headers: {set: {Authorization: "Basic ZWRnZTpzZWNyZXQ="}}}]`)
	p.site = after
	viaServe := p.get("/p").Body.String()
	var a HitAnswer
	viaHit := ""
	if p.h.AppendHit(nil, &HitRequest{Host: "shop.test", Path: "/p", Site: after, Remote: nil}, []byte("Date: x\r\n"), &a) {
		b := a.Head
		viaHit = string(b[len(b)-len("public page"):])
		p.h.ReleaseHit(a.Pinned, a.ClientIP)
	}
	if viaHit != "" && viaHit != viaServe {
		t.Errorf("GET /p after the reload: ServeHTTP answered %q, the hit path %q", viaServe, viaHit)
	}
}
