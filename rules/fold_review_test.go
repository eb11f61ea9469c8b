package rules

import (
	"regexp"
	"testing"
	"unicode"
)

func TestCaseClosedWordBoundaries(t *testing.T) {
	for _, c := range []struct{ pat, orig, spelling string }{
		{`/\bsettings`, "/settings", "/\u017fettings"},
		{`/\bkey`, "/key", "/\u212aey"},
		{`^/me\b`, "/mes", "/me\u017f"}, // \b: orig doesn't match "/mes"; skip
		{`^/x\Bs`, "/xs", "/x\u017f"},
	} {
		re := regexp.MustCompile(c.pat)
		closed, _, err := caseClosed(c.pat)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%q orig(%q)=%v closed(%q)=%v form %s", c.pat, c.orig, re.MatchString(c.orig), c.spelling, closed.MatchString(c.spelling), closed)
		if re.MatchString(c.orig) && !closed.MatchString(c.spelling) {
			t.Errorf("false no: %q matches %q but closed form misses its spelling %q", c.pat, c.orig, c.spelling)
		}
	}
}

func TestFoldableHoldsEveryRuneWithAnotherCase(t *testing.T) {
	n := 0
	for r := rune(0); r <= unicode.MaxRune; r++ {
		if unicode.SimpleFold(r) != r {
			if !contains(foldable(), r) {
				t.Errorf("missing %U", r)
			}
			n++
		}
	}
	if n != len(foldable()) {
		t.Errorf("n=%d foldable=%d", n, len(foldable()))
	}
}

func contains(l []rune, r rune) bool {
	for _, x := range l {
		if x == r {
			return true
		}
	}
	return false
}
