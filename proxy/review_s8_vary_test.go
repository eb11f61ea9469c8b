package proxy

import (
	"io"
	"net/http"
	"strings"
	"testing"
)

// TestS8VaryKeyKeepsAnElementEndingInAQuotedBackslash: listElements skips
// the byte after a backslash inside a quoted string with i++; when the
// backslash is the value's last byte the loop ends past len(v) and the
// last element is never yielded. "*/*, application/json;x=\"\\" then
// selects the variant of "*/*".
//
// Failed before 2026-12-06; fixed: listElements keeps a trailing quoted backslash.
func TestS8VaryKeyKeepsAnElementEndingInAQuotedBackslash(t *testing.T) {
	names := []string{"accept"}
	a := VaryKey(names, http.Header{"Accept": {`*/*, application/json;x="\`}})
	b := VaryKey(names, http.Header{"Accept": {`*/*`}})
	if a == b {
		t.Errorf("VaryKey(%q) = VaryKey(%q) = %q: an element was dropped from the variant key", `*/*, application/json;x="\`, `*/*`, a)
	}
	c := VaryKey(names, http.Header{"Accept": {`application/json;x="\`}})
	d := VaryKey(names, http.Header{"Accept": {``}})
	if c == d {
		t.Errorf("VaryKey(%q) = VaryKey(\"\") = %q: the whole value was dropped", `application/json;x="\`, c)
	}
}

// TestS8VaryAcceptNotPoisonedByATrailingQuotedBackslash: the same through the
// handler: an attacker's Accept that ends in an open quoted string and a
// backslash is stored as the variant of the victim's plain Accept.
//
// Failed before 2026-12-06; fixed: listElements keeps a trailing quoted backslash.
func TestS8VaryAcceptNotPoisonedByATrailingQuotedBackslash(t *testing.T) {
	h, _ := handlerProxy(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=600")
		w.Header().Set("Vary", "Accept")
		if strings.Contains(r.Header.Get("Accept"), "application/json") {
			w.Header().Set("Content-Type", "application/json")
			_, _ = io.WriteString(w, `{"json":true}`)
			return
		}
		w.Header().Set("Content-Type", "text/html")
		_, _ = io.WriteString(w, "<html>")
	}, nil)
	serve(h, "GET", "/p", "Accept", `*/*, application/json;x="\`)
	got := serve(h, "GET", "/p", "Accept", "*/*")
	if got.Body.String() != "<html>" {
		t.Errorf("a client sending Accept: */* got %q (%s), the answer made for the attacker's Accept: */*, application/json;x=\"\\, want <html>", got.Body.String(), got.Header().Get("Cache-Status"))
	}
}
