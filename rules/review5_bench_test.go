package rules

import "testing"

// BenchmarkMatch50Capital is BenchmarkMatch50 on a path with one
// capital: pick's folded scan runs every regular expression in full (no
// literal prefilter, unlike matchPath).
func BenchmarkMatch50Capital(b *testing.B) {
	s := worst50(b)
	b.ReportAllocs()
	for b.Loop() {
		if r := s.ForRequest("GET", "/some/page/path/Index.html", nil); r == nil || r.Name != "last" {
			b.Fatal(r)
		}
	}
}

// TestForKeyOnACapitalisedPathAllocatesOnlyItsFoldedSpelling: the hit
// path asks ForKey on every hit; a path with a capital on a site whose
// rules keep answers apart is read folded as well (pick), which costs one
// string, the folded path (a review measured 2 allocations before; a
// lower-case path costs none: pick_alloc_test.go).
func TestForKeyOnACapitalisedPathAllocatesOnlyItsFoldedSpelling(t *testing.T) {
	s, err := parseSrc(t, `[{name: api, match: {path: /api/}, bypass: true}, {name: static, match: {path: "*.css"}, ttl: 1h}, {name: pages, default_ttl: 5m}]`)
	if err != nil {
		t.Fatal(err)
	}
	if n := testing.AllocsPerRun(100, func() { _ = s.ForKey("/wp-content/uploads/IMG_1234.JPG", "") }); n > 1 {
		t.Errorf("%v allocations per look-up, want at most 1", n)
	}
}

// TestFoldPathReadsEveryCaseSpellingAlike: two spellings a case-insensitive
// origin reads as one fold to one string; a lower-case ASCII path is
// itself.
func TestFoldPathReadsEveryCaseSpellingAlike(t *testing.T) {
	for _, same := range [][]string{
		{"/users/me", "/USERS/ME", "/u\u017fers/me", "/Users/Me"},
		{"/kelvin", "/\u212aelvin", "/KELVIN"},
		{"/\u03a3\u03c3\u03c2", "/\u03c3\u03c3\u03c3", "/\u03a3\u03a3\u03a3"},
		{"/\u00fcber", "/\u00dcBER"},
	} {
		for _, p := range same[1:] {
			if foldPath(p) != foldPath(same[0]) {
				t.Errorf("foldPath(%q) = %q, foldPath(%q) = %q", p, foldPath(p), same[0], foldPath(same[0]))
			}
		}
	}
	if foldPath("/users/me") != "/users/me" || foldPath("/a/b?c") != "/a/b?c" {
		t.Error("a lower-case ASCII path is not itself")
	}
	if foldPath("/a") == foldPath("/b") {
		t.Error("different letters fold alike")
	}
}
