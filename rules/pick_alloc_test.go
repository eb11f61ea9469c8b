package rules

import "testing"

// TestForKeyAllocatesNothingOnALowerCasePath: the hit path asks ForKey on
// every hit of a site with rules, and a hit allocates nothing.
func TestForKeyAllocatesNothingOnALowerCasePath(t *testing.T) {
	s, err := parseSrc(t, `[{name: api, match: {path: /api/}, bypass: true}, {name: static, match: {path: "*.css"}, ttl: 1h}, {name: pages, default_ttl: 5m}]`)
	if err != nil {
		t.Fatal(err)
	}
	if n := testing.AllocsPerRun(100, func() {
		_ = s.ForKey("/blog/post-7", "")
		_ = s.ForRequest("HEAD", "/blog/post-7", nil)
	}); n != 0 {
		t.Errorf("%v allocations per look-up", n)
	}
}
