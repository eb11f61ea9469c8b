package proxy

import (
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestS64JunkPrivateInATargetedFieldIsNotIgnored: review s61 made the
// words private and no-store count inside a directive that is no token
// ("max-age=60; private", "max-age=60 no-store"), because an origin that
// wrote them meant them. In Cache-Control they now count. In the fields
// that govern this cache instead of Cache-Control (Akamai's
// Edge-Cache-Control, which uses Cache-Control's syntax, and
// Surrogate-Control, targeted at this edge or not), the same value sets
// Private or NoStore and also Invalid (max-age's value "60; private" is
// no delta-seconds), and effectiveCC drops an Invalid targeted field
// whole (tc.Present && !tc.Invalid): Cache-Control's max-age=60, written
// for browsers, governs, and alice's page is stored and served to bob.
// The origin said private/no-store to exactly this cache.
//
// Expected: the restrictive words of a targeted field the cache cannot
// read are honoured as they are in Cache-Control (or an unreadable
// targeted field makes the response not shared), not discarded with it.
func TestS64JunkPrivateInATargetedFieldIsNotIgnored(t *testing.T) {
	for _, tc := range []struct{ field, value string }{
		{"Edge-Cache-Control", "max-age=60; private"},
		{"Edge-Cache-Control", "max-age=60 no-store"},
		{"Surrogate-Control", "max-age=60 no-store"},
		{"Surrogate-Control", "max-age=60 private;edge"},
	} {
		t.Run(tc.field+"/"+tc.value, func(t *testing.T) {
			clk := &clock{now: t0}
			h, calls := handlerProxy(t, func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Date", clk.Now().Format(http.TimeFormat))
				w.Header().Set("Cache-Control", "max-age=60") // for browsers
				w.Header().Set(tc.field, tc.value)
				_, _ = w.Write([]byte("account of " + r.Header.Get("X-User")))
			}, func(c *Config) { c.Now = clk.Now })
			if a := serve(h, "GET", "/account", "X-User", "alice"); !strings.Contains(a.Body.String(), "alice") {
				t.Fatalf("alice: %q", a.Body.String())
			}
			clk.Set(t0.Add(10 * time.Second))
			b := serve(h, "GET", "/account", "X-User", "bob")
			if strings.Contains(b.Body.String(), "alice") {
				t.Errorf("%s: %s (Cache-Control: max-age=60): bob was served alice's page %q (Cache-Status %q, %d origin requests)",
					tc.field, tc.value, b.Body.String(), b.Header().Get("Cache-Status"), calls.Load())
			}
		})
	}
}
