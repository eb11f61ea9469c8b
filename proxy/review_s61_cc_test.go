package proxy

import (
	"net/http"
	"strings"
	"testing"
)

// TestS61MalformedPrivateDirectiveIsNotIgnored: an origin marks a signed-in
// user's page private or no-store, but separates the directives with a
// semicolon (or a space), a common slip; the page also carries explicit
// freshness (its own max-age, or a default Cache-Control line an upstream
// layer adds). nextDirective reads a directive name up to '=' or ',', so
// "private; no-store" is one unknown name and is ignored (RFC 9111
// §5.2.3), as is "no-store;". What is left is max-age=60: stored and
// served to every user, Cookie holders included (explicit freshness is no
// heuristic). Varnish's built-in VCL (beresp.http.Cache-Control ~
// "no-cache|no-store|private") and nginx (a substring search) both honour
// these; a directive name that is no token cannot be read, and a cache
// that does not know what it says must not share the answer.
func TestS61MalformedPrivateDirectiveIsNotIgnored(t *testing.T) {
	for _, tc := range []struct {
		name  string
		lines []string
	}{
		{"one-line-semicolon", []string{"max-age=60, private; no-store"}},
		{"default-line-plus-app-line", []string{"public, max-age=60", "private; no-store"}},
		{"trailing-semicolon", []string{"max-age=60, no-store;"}},
		{"space-separated", []string{"max-age=60, private no-store"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h, _ := handlerProxy(t, func(w http.ResponseWriter, r *http.Request) {
				for _, l := range tc.lines {
					w.Header().Add("Cache-Control", l)
				}
				_, _ = w.Write([]byte("inbox of " + r.Header.Get("Cookie")))
			}, nil)
			a := serve(h, "GET", "/inbox", "Cookie", "sid=alice")
			if !strings.Contains(a.Body.String(), "alice") {
				t.Fatalf("alice: %q", a.Body.String())
			}
			b := serve(h, "GET", "/inbox", "Cookie", "sid=bob")
			if strings.Contains(b.Body.String(), "alice") {
				t.Errorf("Cache-Control %q: bob (Cookie sid=bob) was served alice's page %q (Cache-Status %q)", tc.lines, b.Body.String(), b.Header().Get("Cache-Status"))
			}
		})
	}
}
