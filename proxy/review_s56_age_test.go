package proxy

import (
	"net/http"
	"strings"
	"testing"
)

// TestS56BrowserTTLMaxAgeDoesNotOverflowOnAHugeAge: an answer the edge
// passes on (here: to a request with Authorization) carries the Age the
// origin sent; browser_ttl plus an Age near 2^63 wrapped to a negative
// max-age. RFC 9111 §1.2.2: a delta-seconds past what a cache can
// represent, or a calculation that overflows, is taken as 2^31.
func TestS56BrowserTTLMaxAgeDoesNotOverflowOnAHugeAge(t *testing.T) {
	p := newRuleProxy(t, ruleSite(t, `[{name: pages, browser_ttl: 10m}]`), func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Age", "9223372036854775807")
		w.Header().Set("Cache-Control", "max-age=60")
		_, _ = w.Write([]byte("x"))
	}, nil)
	w := p.get("/a", "Authorization", "Bearer x")
	if cc := w.Header().Get("Cache-Control"); strings.Contains(cc, "max-age=-") {
		t.Errorf("Cache-Control %q (Age %q): browser_ttl plus Age overflowed", cc, w.Header().Get("Age"))
	}
}
