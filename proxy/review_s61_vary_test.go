package proxy

import (
	"net/http"
	"strings"
	"testing"
)

// TestS61MalformedVaryDoesNotMergeUsers: an origin that personalises a
// page on the Cookie says so in a Vary it spells wrongly, as origins do:
// space- or semicolon-separated names, or a quoted name. VaryNames keeps
// each element as one name ("accept-encoding cookie"), VaryKey looks it up
// in the request (http.Header.Values leaves a name with a space or a quote
// uncanonicalised and finds nothing), so every request reads "absent":
// one variant, whoever asks. Alice's page is stored and served to Bob.
// A Vary element that is no field-name cannot be honoured; such a
// response must not be shared (Varnish: "Illegal 'Vary' header from
// backend, making this a pass").
func TestS61MalformedVaryDoesNotMergeUsers(t *testing.T) {
	for _, vary := range []string{
		"Accept-Encoding Cookie",
		"Accept-Encoding; Cookie",
		`"Cookie"`,
		"Cookie;q=1",
	} {
		t.Run(vary, func(t *testing.T) {
			h, _ := handlerProxy(t, func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Cache-Control", "public, max-age=600")
				w.Header().Set("Vary", vary)
				_, _ = w.Write([]byte("account page of " + r.Header.Get("Cookie")))
			}, nil)
			a := serve(h, "GET", "/account", "Cookie", "sid=alice")
			if !strings.Contains(a.Body.String(), "alice") {
				t.Fatalf("alice: %q", a.Body.String())
			}
			b := serve(h, "GET", "/account", "Cookie", "sid=bob")
			if strings.Contains(b.Body.String(), "alice") {
				t.Errorf("Vary %q: bob (Cookie sid=bob) was served alice's page %q (Cache-Status %q)", vary, b.Body.String(), b.Header().Get("Cache-Status"))
			}
		})
	}
}
