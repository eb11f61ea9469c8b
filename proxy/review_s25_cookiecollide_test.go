package proxy

import (
	"net/http"
	"strings"
	"testing"
)

// A review found (now mended): key.cookies keys a folded-only match as "name=value" in the same
// slot where the exact name's value is keyed bare (rules.cookieValues:
// `out = append(out, v)` for n == pattern, `n+"="+v` for cookieNameMatch),
// so "Cookie: lang=LANG=de" (exact name, value "LANG=de") and "Cookie:
// LANG=de" (folded name, value "de") hash alike in Rule.KeyExtra. An
// ASP.NET-style origin (names without case, first wins) reads lang as
// "LANG=de" for the first (an unknown language: the English page) and "de"
// for the second. One request with the first cookie stores the English
// page under the key of every visitor whose cookie is LANG=de.
// Fix: tag folded-only matches apart from exact ones in KeyExtra (e.g. a
// \x01 byte before "n=v", which no cookie value holds), or key every match
// as "n=v" (a key version bump).
func TestS25FoldedCookieKeyCollidesWithAnExactValue(t *testing.T) {
	site := ruleSite(t, `[{name: i18n, key: {cookies: [lang]}}]`)
	p := newRuleProxy(t, site, func(w http.ResponseWriter, r *http.Request) {
		lang := ""
		for _, c := range r.Cookies() {
			if strings.EqualFold(c.Name, "lang") {
				lang = c.Value
				break
			}
		}
		if lang != "de" {
			lang = "en"
		}
		w.Header().Set("Cache-Control", "max-age=3600")
		_, _ = writeString(w, "home page in "+lang)
	}, nil)
	if a := p.get("/", "Cookie", "lang=LANG=de"); !strings.Contains(a.Body.String(), "in en") {
		t.Fatalf("attacker: %q", a.Body.String())
	}
	v := p.get("/", "Cookie", "LANG=de")
	if !strings.Contains(v.Body.String(), "in de") {
		t.Errorf("visitor with Cookie LANG=de got %q (Cache-Status %q, %d origin calls): the answer to Cookie lang=LANG=de was stored under the same key",
			v.Body.String(), v.Header().Get("Cache-Status"), p.calls.Load())
	}
}
