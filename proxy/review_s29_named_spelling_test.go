package proxy

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
)

// s29RawOrigin answers every request with the raw HTTP/1.1 header lines
// head (CRLF-separated, %[1]s replaced by the requester's X-User) and
// body: written on the hijacked connection, so that the lines reach the
// edge's client exactly as written (obs-fold, the same field in two
// cases, a list split across two field lines, trailers).
func s29RawOrigin(head, body string, chunkedTrailer string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		user := r.Header.Get("X-User")
		conn, buf, err := w.(http.Hijacker).Hijack()
		if err != nil {
			return
		}
		defer conn.Close()
		var b strings.Builder
		b.WriteString("HTTP/1.1 200 OK\r\n")
		b.WriteString(strings.ReplaceAll(head, "%[1]s", user))
		b.WriteString("Connection: close\r\n")
		if chunkedTrailer != "" {
			b.WriteString("Transfer-Encoding: chunked\r\n\r\n")
			fmt.Fprintf(&b, "%x\r\n%s\r\n0\r\n", len(body), body)
			b.WriteString(strings.ReplaceAll(chunkedTrailer, "%[1]s", user))
			b.WriteString("\r\n")
		} else {
			fmt.Fprintf(&b, "Content-Length: %d\r\n\r\n%s", len(body), body)
		}
		_, _ = buf.WriteString(b.String())
		_ = buf.Flush()
	}
}

// TestS29NamedSpellingsNeverLeak: whatever the spelling of the list
// (spaces around '=' and in the quotes, upper case, an escaped letter, a
// second Cache-Control line, obs-fold, a list cut across two lines, the
// token form, a targeted field's list) or of the named field (two field
// lines in two cases, a trailer), alice's X-Account never reaches bob or
// an anonymous request. Claim of 982f8ef: held.
func TestS29NamedSpellingsNeverLeak(t *testing.T) {
	type tc struct {
		name, head, trailer string
		mustStore           bool
	}
	cases := []tc{
		{name: "spaces", head: "Cache-Control: max-age=60, no-cache = \" x-account \"\r\nX-Account: %[1]s\r\n", mustStore: true},
		{name: "upper", head: "Cache-Control: MAX-AGE=60, NO-CACHE=\"X-ACCOUNT\"\r\nX-Account: %[1]s\r\n", mustStore: true},
		{name: "escaped letter", head: "Cache-Control: max-age=60, private=\"X-Acc\\ount\"\r\nX-Account: %[1]s\r\n", mustStore: true},
		{name: "second line", head: "Cache-Control: max-age=60\r\nCache-Control: no-cache=\"X-Account\"\r\nX-Account: %[1]s\r\n", mustStore: true},
		{name: "two cases of the field", head: "Cache-Control: max-age=60, no-cache=\"X-Account\"\r\nx-account: %[1]s\r\nX-ACCOUNT: %[1]s-2\r\n", mustStore: true},
		{name: "obs-fold", head: "Cache-Control: max-age=60, no-cache=\"X-Other,\r\n X-Account\"\r\nX-Account: %[1]s\r\n"},
		{name: "list cut across lines", head: "Cache-Control: max-age=60, no-cache=\"X-Other,\r\nCache-Control: X-Account\"\r\nX-Account: %[1]s\r\n"},
		{name: "comma in quotes then directives", head: "Cache-Control: no-cache=\"X-Other, X-Account\", max-age=60, ext=\"a,b\"\r\nX-Account: %[1]s\r\n", mustStore: true},
		{name: "token form", head: "Cache-Control: max-age=60, no-cache=x-account\r\nX-Account: %[1]s\r\n", mustStore: true},
		{name: "escaped quote", head: "Cache-Control: max-age=60, no-cache=\"X-Other\\\", X-Account\"\r\nX-Account: %[1]s\r\n"},
		{name: "CDN-Cache-Control", head: "Cache-Control: max-age=60\r\nCDN-Cache-Control: max-age=60, private=\"X-Account\"\r\nX-Account: %[1]s\r\n", mustStore: true},
		{name: "Surrogate-Control", head: "Surrogate-Control: max-age=60, no-cache=\"X-Account\"\r\nX-Account: %[1]s\r\n", mustStore: true},
		{name: "Edge-Cache-Control", head: "Cache-Control: max-age=60\r\nEdge-Cache-Control: max-age=60, no-cache=\"X-Account\"\r\nX-Account: %[1]s\r\n", mustStore: true},
		{name: "trailer", head: "Cache-Control: max-age=60, no-cache=\"X-Account\"\r\nTrailer: X-Account\r\n", trailer: "X-Account: %[1]s\r\n"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h, calls := handlerProxy(t, s29RawOrigin(c.head, "page for anyone", c.trailer), nil)
			a := serve(h, "GET", "/p", "X-User", "alice")
			if a.Code != 200 {
				t.Fatalf("alice: %d %q", a.Code, a.Body.String())
			}
			stored := false
			for _, who := range []string{"bob", ""} {
				w := serve(h, "GET", "/p", "X-User", who)
				for k, vs := range w.Header() {
					for _, v := range vs {
						if strings.Contains(v, "alice") {
							t.Errorf("%q got %s: %q (Cache-Status %q)", who, k, v, w.Header().Get("Cache-Status"))
						}
					}
				}
				stored = stored || w.Header().Get("Cache-Status") == "edge; hit"
			}
			if c.mustStore && !stored {
				t.Errorf("not stored (origin asked %d times): the list names X-Account alone", calls.Load())
			}
			t.Logf("alice X-Account %q; stored %v; origin asked %d times", a.Header().Values("X-Account"), stored, calls.Load())
		})
	}
}
