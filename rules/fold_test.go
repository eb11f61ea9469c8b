package rules

import (
	"regexp"
	"strings"
	"testing"
	"unicode"
)

// FuzzCaseClosed: every pattern that compiles is read in every case
// (caseClosed never refuses it), and the case-closed form matches a
// string whenever the original matches it or its upper-case or
// lower-case spelling.
func FuzzCaseClosed(f *testing.F) {
	for _, p := range []string{`^/api/[^A-Z]+$`, `(?-i)^/Account/`, `^/(?-i:Account)/`, `\.(css|js)$`, `[[:upper:]]`, `\p{Lu}+`, `(?i)x`, `[^\x{10400}-\x{1044F}]`, `\Q.A\E`} {
		f.Add(p, "/api/ME")
	}
	f.Fuzz(func(t *testing.T, pattern, s string) {
		re, err := regexp.Compile(pattern)
		if err != nil || len(pattern) > 200 {
			return
		}
		closed, _, err := caseClosed(pattern)
		if err != nil {
			t.Fatalf("%q compiles but is not read in every case: %v", pattern, err)
		}
		// Without a cased letter every spelling is s itself: the closed
		// form reads exactly as the original (writeRegexp's round trip),
		// but for \b and \B, which it drops (a superset, see closeCase).
		wordBoundary := strings.Contains(pattern, `\b`) || strings.Contains(pattern, `\B`)
		if !wordBoundary && !strings.ContainsFunc(s, func(r rune) bool { return unicode.SimpleFold(r) != r }) && re.MatchString(s) != closed.MatchString(s) {
			t.Fatalf("%q and its case-closed form %q disagree on %q, which has no cased letter", pattern, closed, s)
		}
		for _, spelling := range []string{s, strings.ToUpper(s), strings.ToLower(s)} {
			if re.MatchString(spelling) && !closed.MatchString(s) {
				t.Fatalf("%q matches %q, a spelling of %q, which its case-closed form %q does not match", pattern, spelling, s, closed)
			}
		}
	})
}
