package proxy

import (
	"net/http"
	"strings"
	"testing"
)

// TestS64PrivateAfterAQuotedValueIsNotIgnored: junkDirective (review s61)
// reads the words private, no-store and no-cache in a directive that is
// no token ("max-age=60; private", "private no-store"), as Varnish and
// nginx find them anywhere in the field. It is never called for a
// directive whose value nextDirective reports as "\x00": a quoted value
// followed by junk before the next comma (`ext="v" private`), or an
// unterminated quote, which swallows everything after it
// (`ext="v, private`). The word private there is lost exactly as it was
// in "max-age=60; private" before the fix: max-age=60 is left, and one
// user's page is stored and served to the next user.
func TestS64PrivateAfterAQuotedValueIsNotIgnored(t *testing.T) {
	for _, tc := range []struct {
		name string
		cc   string
	}{
		{"junk-after-quote", `max-age=60, ext="v" private`},
		{"semicolon-after-quote", `max-age=60, ext="v"; no-store`},
		{"unterminated-quote", `max-age=60, ext="v, private`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h, _ := handlerProxy(t, func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Cache-Control", tc.cc)
				_, _ = w.Write([]byte("inbox of " + r.Header.Get("Cookie")))
			}, nil)
			a := serve(h, "GET", "/inbox", "Cookie", "sid=alice")
			if !strings.Contains(a.Body.String(), "alice") {
				t.Fatalf("alice: %q", a.Body.String())
			}
			b := serve(h, "GET", "/inbox", "Cookie", "sid=bob")
			if strings.Contains(b.Body.String(), "alice") {
				t.Errorf("Cache-Control %q: bob was served alice's page %q (Cache-Status %q)", tc.cc, b.Body.String(), b.Header().Get("Cache-Status"))
			}
		})
	}
}
