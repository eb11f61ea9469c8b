package rules

import (
	"regexp"
	"strings"
	"testing"
)

// review8: closeClass closes a range above U+2000 only at its two ends,
// so a class spanning a whole case block there (fullwidth Latin, Glagolitic,
// Deseret, Cherokee small letters, …, as \p{Ll}, \p{Lu}, \P{Lu} or an
// explicit [ａ-ｚ] hold them) gets the other case of its first and last
// letter only. The case-closed form then misses spellings the original
// accepts: ＢＯＢ is ｂｏｂ to IIS / ASP.NET Core / Express, and the
// original matches ｂｏｂ.
func TestCaseClosedCoversRangesAboveU2000(t *testing.T) {
	for _, c := range []struct{ pattern, spelling, path string }{
		{`^/u/[ａ-ｚ]+$`, "/u/ｂｏｂ", "/u/ＢＯＢ"},
		{`^/u/\p{Ll}+$`, "/u/ｂｏｂ", "/u/ＢＯＢ"},
		{`^/u/\P{Lu}+$`, "/u/ｂｏｂ", "/u/ＢＯＢ"},
		{`^/u/\p{Lu}+$`, "/u/ＢＯＢ", "/u/ｂｏｂ"},
		{`^/u/\p{Ll}+$`, "/u/ⰱ", "/u/Ⰱ"},                                  // Glagolitic
		{`^/u/[^\x{10400}-\x{10427}]$`, "/u/\U00010429", "/u/\U00010401"}, // Deseret
	} {
		re := regexp.MustCompile(c.pattern)
		if !re.MatchString(c.spelling) || strings.EqualFold(c.path, c.spelling) == false {
			t.Fatalf("control: %q on %q", c.pattern, c.spelling)
		}
		closed, _, err := caseClosed(c.pattern)
		if err != nil {
			t.Fatal(err)
		}
		if !closed.MatchString(c.path) {
			t.Errorf("%q matches %q, a case spelling of %q, but its case-closed form does not match %q", c.pattern, c.spelling, c.path, c.path)
		}
	}
}

// The same through Set.pick: a bypass whose regular expression names the
// lower-case spelling is not found for the capitalised one, which the
// catch-all then caches (the origin serves both as one resource).
func TestFullwidthSpellingKeepsTheBypass(t *testing.T) {
	s, err := parseSrc(t, `[{name: profile, match: {path_regex: '^/user/\p{Ll}+$'}, bypass: true}, {name: pages, default_ttl: 5m}]`)
	if err != nil {
		t.Fatal(err)
	}
	const lower = "/user/%EF%BD%82%EF%BD%8F%EF%BD%82" // /user/ｂｏｂ
	const upper = "/user/%EF%BC%A2%EF%BC%AF%EF%BC%A2" // /user/ＢＯＢ
	if r := s.ForRequest("GET", lower, nil); r.Name != "profile" {
		t.Fatalf("control: %s is %s", lower, r.Name)
	}
	if r := s.ForRequest("GET", upper, nil); r.Name != AmbiguousPathRule {
		t.Errorf("ForRequest(GET /user/ＢＯＢ) = %s; its spelling /user/ｂｏｂ is bypassed", r.Name)
	}
	if r := s.ForKey(upper, ""); r.Name != AmbiguousPathRule {
		t.Errorf("ForKey(/user/ＢＯＢ) = %s", r.Name)
	}
}

// BenchmarkCaseClosedLongPattern: reading a 1 KiB pattern of [^/] in
// every case, which a review measured at 0.5 s a pattern when the closed
// form was written by syntax.Regexp.String (100 s for MaxRules of them);
// speed is measured here, not asserted.
func BenchmarkCaseClosedLongPattern(b *testing.B) {
	p := strings.Repeat(`[^/]`, 256)
	for b.Loop() {
		if _, _, err := caseClosed(p); err != nil {
			b.Fatal(err)
		}
	}
}
