package rules

import "testing"

func TestWordBoundaryAndSharpSSpellingsKeepTheBypass(t *testing.T) {
	for _, c := range []struct{ src, path, spelling string }{
		{`[{name: settings, match: {path_regex: '/\bsettings'}, bypass: true}, {name: pages, default_ttl: 5m}]`, "/\u017fettings", "/settings"},
		{`[{name: settings, match: {path_regex: '/\bsettings'}, bypass: true}, {name: pages, default_ttl: 5m}]`, "/%C5%BFettings", "/settings"},
		{`[{name: keys, match: {path_regex: '^/\bkeys/'}, bypass: true}, {name: pages, default_ttl: 5m}]`, "/\u212aeys/me", "/keys/me"},
		{`[{name: lower, match: {path_regex: '^/u/\p{Ll}+$'}, bypass: true}, {name: pages, default_ttl: 5m}]`, "/u/\u1e9e", "/u/\u00df"},
		{`[{name: strasse, match: {path_regex: '^/stra[\x{df}s]e$'}, bypass: true}, {name: pages, default_ttl: 5m}]`, "/stra\u1e9ee", "/stra\u00dfe"},
	} {
		s, err := parseSrc(t, c.src)
		if err != nil {
			t.Fatal(err)
		}
		if got := s.ForRequest("GET", c.spelling, nil).Name; got == "pages" {
			t.Fatalf("control: %s is %s", c.spelling, got)
		}
		if r := s.ForRequest("GET", c.path, nil); r.Name != AmbiguousPathRule {
			t.Errorf("%s\n  %q is %s (cacheable), its spelling %q is %s", c.src, c.path, r.Name, c.spelling, s.ForRequest("GET", c.spelling, nil).Name)
		}
	}
}
