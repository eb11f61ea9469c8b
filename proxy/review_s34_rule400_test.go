package proxy

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
)

// A review found (now mended): a cache rule naming 400 (or 411/413/417/421/431) in its status
// match now stores such an answer whatever the origin or the request says
// against storing it. Policy.storable returns whyRequestError before it
// looks at no-store, private, the request's no-store, Authorization or
// Set-Cookie, and storableUnder turns whyRequestError into "store" when
// the rule's lifetime gives the status: every later check is skipped.
// Before 89736e3 a 400 under such a rule still went through them all (the
// rule only stands in for missing freshness: whyNoFreshness is the last
// check).
//
// Steps: site rule `{match: {status: [400]}, ttl: 10m}` (an operator
// caching the site's 400 pages, as the fix invites); the origin answers
// alice's request (X-User: alice, unkeyed) 400 with "Cache-Control:
// private, no-store" and her name in the body; then bob asks the URL.
// Expected: bob's request goes to the origin (the private 400 was never
// stored). Got: bob is served alice's private 400 from the store.
// Why it matters: a private/no-store answer is shared with every user of
// the URL for the rule's lifetime (a leak of one user's page); same with a
// request carrying Authorization or Cache-Control: no-store.
func TestS34RuleNaming400StoresAPrivateNoStoreAnswer(t *testing.T) {
	for _, tc := range []struct {
		name   string
		cc     string
		reqHdr []string
	}{
		{"private-no-store", "private, no-store", nil},
		{"private", "private, max-age=600", nil},
		{"request-no-store", "max-age=600", []string{"Cache-Control", "no-store"}},
		{"authorization", "max-age=600", []string{"Authorization", "Bearer alice-token"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			site := ruleSite(t, `[{name: bad, match: {status: [400]}, ttl: 10m}]`)
			p := newRuleProxy(t, site, func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Cache-Control", tc.cc)
				w.WriteHeader(http.StatusBadRequest)
				_, _ = fmt.Fprintf(w, "account of %s: bad form", r.Header.Get("X-User"))
			}, nil)
			hdr := append([]string{"X-User", "alice"}, tc.reqHdr...)
			if w := p.get("/account", hdr...); w.Code != 400 {
				t.Fatalf("alice: %d", w.Code)
			}
			w := p.get("/account", "X-User", "bob")
			if strings.Contains(w.Body.String(), "alice") || p.calls.Load() != 2 {
				t.Fatalf("bob got %d %q (%s) after %d origin calls: alice's %q 400 was stored and shared", w.Code, w.Body.String(), w.Header().Get("Cache-Status"), p.calls.Load(), tc.cc)
			}
		})
	}
}
