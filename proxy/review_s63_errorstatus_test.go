package proxy

import (
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestS63StaleIfErrorTakesEveryFiveHundredForAnOutage: RFC 5861 §4
// defines the error stale-if-error rides out as "any situation that would
// result in a 500, 502, 503, or 504 HTTP response status code being
// returned", and cache.stale_if_error is documented as "when the origin
// fails". fillFrom takes every status >= 500 as such a failure
// (resp.StatusCode >= 500), so an origin's definitive 501 Not Implemented
// (RFC 9110 §15.6.2; heuristically cacheable, here with an explicit
// max-age=60) or 505 is replaced by the old 200 for the whole stale
// window, and the origin's answer is never stored nor seen.
//
// Expected: the origin's 501 / 505 reaches the client (and the 501 is
// stored); only 500, 502, 503 and 504 fall back to the stale copy.
func TestS63StaleIfErrorTakesEveryFiveHundredForAnOutage(t *testing.T) {
	for _, tc := range []struct {
		status int
		cc     string
	}{
		{http.StatusNotImplemented, "max-age=60"},
		{http.StatusHTTPVersionNotSupported, ""},
	} {
		t.Run(strconv.Itoa(tc.status), func(t *testing.T) {
			p := newTestProxy(t, nil)
			p.origin.set(originResp{header: map[string]string{"Cache-Control": "max-age=10"}, body: "old page"})
			if w := p.do("GET", "/p", nil); w.Code != http.StatusOK {
				t.Fatalf("fill: %d", w.Code)
			}
			p.clk.Set(t0.Add(20 * time.Second)) // 10 s stale, inside the default 5 min
			hdr := map[string]string{}
			if tc.cc != "" {
				hdr["Cache-Control"] = tc.cc
			}
			p.origin.set(originResp{status: tc.status, header: hdr, body: "origin says " + strconv.Itoa(tc.status)})
			w := p.do("GET", "/p", nil)
			if w.Code != tc.status || strings.Contains(w.Body.String(), "old page") {
				t.Errorf("origin answered %d: client got %d %q (Cache-Status %q): a status RFC 5861 §4 does not count as an error was replaced by the stale copy",
					tc.status, w.Code, w.Body.String(), w.Header().Get("Cache-Status"))
			}
		})
	}
}
