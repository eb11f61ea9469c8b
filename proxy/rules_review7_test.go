package proxy

import (
	"strings"
	"testing"
)

// review7: pick counts a candidate as stricter only when the exact rule
// keeps nothing apart. A catch-all keyed on the device class (or a
// language cookie, or Accept-Language) is "keeping apart", so a bypass
// of /Account/ is never looked at for /account/me: an IIS origin answers
// it as /Account/me, for alice, and the next desktop user gets it.
func TestKeyedCatchAllStillPassesTheBypassSpelling(t *testing.T) {
	routes := func(p string) bool { return strings.HasPrefix(strings.ToLower(p), "/account/") }
	for _, src := range []string{
		"- {name: account, match: {path: /Account/}, bypass: true}\n- {name: pages, default_ttl: 5m, key: {device: true}}\n",
		"- {name: account, match: {path: /Account/}, bypass: true}\n- {name: pages, default_ttl: 5m, key: {cookies: [lang]}}\n",
		"- {name: account, match: {path: /Account/}, key: {cookies: [sid]}}\n- {name: pages, default_ttl: 5m, key: {cookies: [lang]}}\n",
	} {
		if got := caseLeak(t, src, routes, "/Account/me"); got != "" {
			t.Fatalf("control /Account/me: %s", got)
		}
		if got := caseLeak(t, src, routes, "/account/me"); got != "" {
			t.Errorf("rules %q\n  /account/me: %s", src, got)
		}
	}
}

// A regex bypass only a mixed-case spelling matches: (?-i) inside the
// pattern survives the (?i) prefix, and the lower- and upper-case
// spellings miss the capital literal; so does a capital literal beside a
// negated class of capitals.
func TestRegexMixedSpellingBypassHolds(t *testing.T) {
	for _, c := range []struct{ src, spelling, target string }{
		{"- {name: account, match: {path_regex: '(?-i)^/Account/'}, bypass: true}\n- {name: pages, default_ttl: 5m}\n", "/Account/me", "/account/me"},
		{"- {name: reports, match: {path_regex: '^/Reports/[^A-Z]+$'}, bypass: true}\n- {name: pages, default_ttl: 5m}\n", "/Reports/q1", "/reports/q1"},
	} {
		prefix := strings.ToLower(c.spelling[:strings.LastIndexByte(c.spelling, '/')+1])
		routes := func(p string) bool { return strings.HasPrefix(strings.ToLower(p), prefix) }
		if got := caseLeak(t, c.src, routes, c.spelling); got != "" {
			t.Fatalf("control %s: %s", c.spelling, got)
		}
		if got := caseLeak(t, c.src, routes, c.target); got != "" {
			t.Errorf("rules %q\n  %s: %s", c.src, c.target, got)
		}
	}
}
