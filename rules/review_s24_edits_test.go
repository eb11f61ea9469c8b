package rules

import (
	"strings"
	"testing"
)

// TestS24ResponseEditsCannotTouchWhatThePrivacyChecksRead (holds): every
// response field the cache's storability and sharing checks read is refused
// as a response edit whatever its spelling (case) and whether set or
// removed, so no edit can add a Cache-Control: public, remove a private,
// a Set-Cookie or a Vary: *, or set a targeted field.
func TestS24ResponseEditsCannotTouchWhatThePrivacyChecksRead(t *testing.T) {
	for _, name := range []string{
		"cache-control", "CACHE-CONTROL", "Cache-control", "set-cookie", "SET-COOKIE", "vary", "VARY",
		"expires", "pragma", "cdn-cache-control", "EDGE-CACHE-CONTROL", "surrogate-control", "age", "date",
		"etag", "last-modified", "content-encoding",
	} {
		for _, src := range []string{
			`[{name: r, response_headers: {set: {"` + name + `": "x"}}}]`,
			`[{name: r, response_headers: {remove: ["` + name + `"]}}]`,
		} {
			if _, err := parseSrc(t, src); err == nil || !strings.Contains(err.Error(), "may not be edited") {
				t.Errorf("%s: accepted (err %v)", src, err)
			}
		}
	}
	// A name with a trailing space (or any non-token byte) is no field
	// name at all, and is refused too.
	if _, err := parseSrc(t, `[{name: r, response_headers: {remove: ["Set-Cookie "]}}]`); err == nil {
		t.Error(`"Set-Cookie " accepted as a response edit`)
	}
}
