package proxy

import (
	"strings"
	"testing"
)

// TestS60BrowserTTLSkipsACookieHoldersHitOfADefaultTTLPage: a page the
// origin sends without Cache-Control, kept for an hour by the rule's
// default_ttl and served as a hit to everyone, cookie or not. Anonymous
// clients get browser_ttl; a Cookie holder's hit of the same copy got no
// Cache-Control at all: sharedFresh read the origin's header alone, where
// the lifetime is the rule's, and called it heuristic. Mended: a fresh hit
// is the shared copy.
func TestS60BrowserTTLSkipsACookieHoldersHitOfADefaultTTLPage(t *testing.T) {
	p := newRuleProxy(t, ruleSite(t, `[{name: pages, default_ttl: 1h, browser_ttl: 10m}]`), plainPage, nil)
	p.get("/x")
	anon := p.get("/x")
	cookie := p.get("/x", "Cookie", "sid=alice")
	if !strings.Contains(cookie.Header().Get("Cache-Status"), "hit") || p.calls.Load() != 1 {
		t.Fatalf("not a shared hit: %q, %d origin calls", cookie.Header().Get("Cache-Status"), p.calls.Load())
	}
	if got, want := cookie.Header().Get("Cache-Control"), anon.Header().Get("Cache-Control"); got != want {
		t.Errorf("a Cookie holder's hit of the shared copy: Cache-Control %q (Cache-Status %q); everyone else gets %q",
			got, cookie.Header().Get("Cache-Status"), want)
	}
}
