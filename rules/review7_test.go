package rules

import "testing"

// review7: pick's stricter is !keepsApart(exact) && keepsApart(r): once
// the exact rule keys on anything of the request (a device class, a
// cookie the attacker sets himself), no candidate counts, not even a
// bypass or a key on another cookie.
func TestKeyedExactRuleStillPassesABypassSpelling(t *testing.T) {
	for _, src := range []string{
		// exact keyed on the device class (anyone can match a victim's)
		`[{name: account, match: {path: /Account/}, bypass: true}, {name: pages, default_ttl: 5m, key: {device: true}}]`,
		// exact keyed on a cookie the attacker controls, origin's resource keyed on the session
		`[{name: account, match: {path: /Account/}, key: {cookies: [sid]}}, {name: pages, default_ttl: 5m, key: {cookies: [lang]}}]`,
		// exact keyed on a header
		`[{name: account, match: {path: /Account/}, bypass: true}, {name: pages, default_ttl: 5m, key: {headers: [Accept-Language]}}]`,
	} {
		s, err := parseSrc(t, src)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range []string{"/account/me", "/ACCOUNT/me"} {
			if r := s.ForRequest("GET", p, nil); r.Name != AmbiguousPathRule {
				t.Errorf("%s\n  ForRequest(GET %s) = %s (its spelling /Account/me is %s)", src, p, r.Name, s.ForRequest("GET", "/Account/me", nil).Name)
			}
			if r := s.ForKey(p, ""); r.Name != AmbiguousPathRule {
				t.Errorf("%s\n  ForKey(%s) = %s", src, p, r.Name)
			}
		}
	}
}

// The same for the query key: review 5's /API/orders?token=… under a
// rule dropping every parameter, with the catch-all also keyed on the
// device class.
func TestKeyedExactRuleStillPassesAQueryKeySpelling(t *testing.T) {
	s, err := parseSrc(t, `[{name: api, match: {path: /api/}}, {name: pages, key: {ignore_params: ["*"], device: true}}]`)
	if err != nil {
		t.Fatal(err)
	}
	if r := s.ForKey("/API/orders", "token=alice"); r.Name != AmbiguousPathRule {
		t.Errorf("ForKey(/API/orders?token=alice) = %s: KeyQuery %q, /api/orders's rule keys %q",
			r.Name, r.KeyQuery("token=alice"), s.ForKey("/api/orders", "token=alice").KeyQuery("token=alice"))
	}
}

// A regex the (?i) prefix cannot fold: (?-i) inside it, or a capital
// literal beside a negated class of capitals. Only a mixed-case spelling
// (/Account/…, /Reports/q1) matches, and pick reads just three: as
// written under (?i), folded, upper case.
func TestRegexOnlyAMixedSpellingMatchesIsFound(t *testing.T) {
	for _, c := range []struct{ src, path, spelling string }{
		{`[{name: account, match: {path_regex: '(?-i)^/Account/'}, bypass: true}, {name: pages, default_ttl: 5m}]`, "/account/me", "/Account/me"},
		{`[{name: account, match: {path_regex: '^/(?-i:Account)/'}, bypass: true}, {name: pages, default_ttl: 5m}]`, "/ACCOUNT/me", "/Account/me"},
		{`[{name: reports, match: {path_regex: '^/Reports/[^A-Z]+$'}, bypass: true}, {name: pages, default_ttl: 5m}]`, "/reports/q1", "/Reports/q1"},
	} {
		s, err := parseSrc(t, c.src)
		if err != nil {
			t.Fatal(err)
		}
		if got := s.ForRequest("GET", c.spelling, nil).Name; got == "pages" {
			t.Fatalf("control: %s is %s", c.spelling, got)
		}
		for _, get := range []func() *Rule{
			func() *Rule { return s.ForRequest("GET", c.path, nil) },
			func() *Rule { return s.ForKey(c.path, "") },
		} {
			if r := get(); r.Name != AmbiguousPathRule {
				t.Errorf("%s\n  %s is %s, its spelling %s is %s", c.src, c.path, r.Name, c.spelling, s.ForRequest("GET", c.spelling, nil).Name)
			}
		}
	}
}
