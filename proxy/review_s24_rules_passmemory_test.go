package proxy

import (
	"net/http"
	"strings"
	"testing"
)

// A review found (cache denial, no leak; now mended): a parameter that key.ignore_params drops
// still reaches the origin, which may answer it uncacheably: here it sets an
// attribution cookie for ?utm_source=… (Set-Cookie: utm_source=…), as many
// sites do. notStored then remembers m.passKey, which is the shaped key
// ("/p", the utm_ parameter dropped), as hit-for-pass: every visitor of /p
// passes the cache for cache.pass_ttl, and a revalidation made by such a
// request removes the stored /p (fillFrom/revalidated: m.aboutTheURL). One
// campaign visitor (or an attacker, repeatedly) turns the page's caching off
// for everyone: the docs' WordPress example (ignore_params [utm_*, fbclid,
// gclid]) is exactly this. A cookie request is already exempt for that reason
// (aboutTheURL: !m.hasCookie; passKey gets "\x00cookie"). Fix: when the key
// rule dropped parameters from the request's query, treat an uncacheable
// answer as about the request: mark passKey (e.g. append the dropped
// parameters, or "\x00dropped") and do not remove the stored variant.
func TestS24IgnoredParamAnswerDoesNotTurnTheCacheOffForEveryone(t *testing.T) {
	site := ruleSite(t, `[{name: pages, default_ttl: 5m, key: {ignore_params: [utm_*, fbclid, gclid]}}]`)
	p := newRuleProxy(t, site, func(w http.ResponseWriter, r *http.Request) {
		if v := r.URL.Query().Get("utm_source"); v != "" {
			w.Header().Set("Set-Cookie", "utm_source="+v+"; Path=/")
		}
		_, _ = writeString(w, "page")
	}, nil)
	p.get("/p?utm_source=newsletter") // the first visitor after the page expired came from a campaign
	p.get("/p")
	before := p.calls.Load()
	w := p.get("/p")
	if !strings.Contains(w.Header().Get("Cache-Status"), "hit") {
		t.Errorf("GET /p after one ?utm_source= visit: Cache-Status %q, %d origin calls for 3 requests (%d before it): the ignored parameter's uncacheable answer made /p hit-for-pass for everyone",
			w.Header().Get("Cache-Status"), p.calls.Load(), before)
	}
}
