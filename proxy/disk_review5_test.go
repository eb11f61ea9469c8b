package proxy

import (
	"net/http"
	"testing"
)

// lifetimeShared refuses promotion on every site with a cookie-conditional
// rule, whatever that rule does. The commonest such rule is a bypass for
// logged-in users (WordPress's wordpress_logged_in_*, Drupal's SESS*),
// whose lifetime no cached answer ever carries: a bypassed request never
// looks the store up. On such a site an object the RAM LRU once let go
// is read from the disk on every hit from then on (never promoted
// again), a hot page included.
func TestLoggedInBypassStillLetsDiskHitsBePromoted(t *testing.T) {
	for _, tc := range []struct{ name, rules string }{
		{"no-cookie-rule", "- {name: pages, default_ttl: 5m}\n"},
		{"logged-in-bypass", "- {name: logged-in, match: {cookie: wordpress_logged_in_*}, bypass: true}\n- {name: pages, default_ttl: 5m}\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := newRuleProxy(t, ruleSite(t, tc.rules), func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Cache-Control", "public, max-age=3600")
				_, _ = writeString(w, "home page")
			}, nil)
			tier := attachDiskPromote(t, p.h)
			p.get("/")
			rvFlush(t, tier)
			evictRAM(p.h)
			for range 5 {
				if w := p.get("/"); w.Body.String() != "home page" {
					t.Fatalf("got %q", w.Body.String())
				}
			}
			if n := p.h.store.Promoted(); n == 0 {
				t.Errorf("%s: 5 anonymous hits of an evicted page read the disk each time and never promoted it (promoted %d, disk %+v)", tc.name, n, tier.Stats())
			}
		})
	}
}
