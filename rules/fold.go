package rules

import (
	"regexp"
	"regexp/syntax"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Reading a path in every case: IIS, ASP.NET Core and Express serve one
// resource for every case spelling of its path, so a rule that names the
// resource in one case must be found for the others (Set.pick). A prefix
// or glob is compared folded (foldPath on both sides). A regular
// expression is compiled a second time case-closed (caseClosed): every
// literal and every character class made to accept each letter's other
// cases, after any negation and whatever inline flags the pattern sets,
// so it matches a path exactly when the original matches some case
// spelling of it. (?i) alone does not: it folds a class before negating
// it ([^A-Z] becomes "no letter") and gives way to a (?-i) inside the
// pattern (reviews' tests).

// foldPath maps every rune of s to one member of its case-folding orbit
// (unicode.SimpleFold): the ASCII letter in lower case when the orbit has
// one (so ſ and the Kelvin sign are s and k), else the orbit's smallest
// rune (Σ, σ and ς alike). Two spellings a case-insensitive origin reads
// as one fold to the same string; an ASCII path without capitals is
// itself (no allocation).
func foldPath(s string) string {
	if !hasUpper(s) {
		return s
	}
	var b strings.Builder
	b.Grow(len(s))
	for _, r := range s {
		b.WriteRune(foldRune(r))
	}
	return b.String()
}

func foldRune(r rune) rune {
	if r < utf8.RuneSelf {
		if 'A' <= r && r <= 'Z' {
			return r + 'a' - 'A'
		}
		return r
	}
	least := r
	for f := unicode.SimpleFold(r); f != r; f = unicode.SimpleFold(f) {
		if f < utf8.RuneSelf {
			return unicode.ToLower(f)
		}
		least = min(least, f)
	}
	return least
}

// hasUpper reports whether s has a byte case folding could change: an
// ASCII capital, or any non-ASCII byte.
func hasUpper(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; ('A' <= c && c <= 'Z') || c >= 0x80 {
			return true
		}
	}
	return false
}

// hasLetter reports whether s has an ASCII letter or any non-ASCII byte.
func hasLetter(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i] | 0x20; ('a' <= c && c <= 'z') || s[i] >= 0x80 {
			return true
		}
	}
	return false
}

// caseClosed compiles pattern so that it matches a string when the
// original matches some case spelling of it, and reports whether the
// original may reject a lower-case string some other spelling of which
// it accepts (a capital in a literal, a class with a capital but not its
// lower case, or the other way round): only then can a lower-case path
// match it folded and not as written.
func caseClosed(pattern string) (*regexp.Regexp, bool, error) {
	re, err := syntax.Parse(pattern, syntax.Perl)
	if err != nil {
		return nil, false, err
	}
	sensitive := closeCase(re)
	c, err := regexp.Compile(re.String())
	return c, sensitive, err
}

// closeCase makes re (in place) accept every case of what it accepts and
// reports whether that made it accept a folded rune (foldRune's form,
// such as a lower-case ASCII letter) it did not: a capital in a
// case-sensitive literal, or a class holding a capital but not its
// lower case ([A-Z], [^a-z]).
func closeCase(re *syntax.Regexp) bool {
	sensitive := false
	switch re.Op {
	case syntax.OpLiteral:
		if re.Flags&syntax.FoldCase == 0 {
			for _, r := range re.Rune {
				if foldRune(r) != r {
					sensitive = true
				}
			}
			re.Flags |= syntax.FoldCase
		}
	case syntax.OpCharClass:
		closed := closeClass(re.Rune)
		for i := 0; i+1 < len(closed) && !sensitive; i += 2 {
			for r := closed[i]; r <= min(closed[i+1], 0x1fff) && !sensitive; r++ {
				if foldRune(r) == r && !inRanges(re.Rune, r) {
					sensitive = true
				}
			}
		}
		re.Rune = closed
	}
	for _, sub := range re.Sub {
		if closeCase(sub) {
			sensitive = true
		}
	}
	return sensitive
}

// inRanges reports whether r is in a class's lo, hi pairs.
func inRanges(ranges []rune, r rune) bool {
	for i := 0; i+1 < len(ranges); i += 2 {
		if ranges[i] <= r && r <= ranges[i+1] {
			return true
		}
	}
	return false
}

// closeClass returns a class's ranges (lo, hi pairs) with each rune's
// case-folding orbit added. Wide ranges are closed by their letters
// below U+2000 and their ends (where the other cases of the scripts a
// path uses live); a class spanning more than that already holds most of
// what folding would add.
func closeClass(ranges []rune) []rune {
	var add []rune
	for i := 0; i+1 < len(ranges); i += 2 {
		lo, hi := ranges[i], ranges[i+1]
		for r := lo; r <= min(hi, 0x1fff); r++ {
			for f := unicode.SimpleFold(r); f != r; f = unicode.SimpleFold(f) {
				add = append(add, f)
			}
		}
		for _, r := range []rune{lo, hi} {
			for f := unicode.SimpleFold(r); f != r; f = unicode.SimpleFold(f) {
				add = append(add, f)
			}
		}
	}
	if len(add) == 0 {
		return ranges
	}
	out := slices.Clone(ranges)
	for _, r := range add {
		out = append(out, r, r)
	}
	return mergeRanges(out)
}

// mergeRanges sorts and merges lo, hi pairs.
func mergeRanges(rs []rune) []rune {
	type span struct{ lo, hi rune }
	spans := make([]span, 0, len(rs)/2)
	for i := 0; i+1 < len(rs); i += 2 {
		spans = append(spans, span{rs[i], rs[i+1]})
	}
	slices.SortFunc(spans, func(a, b span) int { return int(a.lo - b.lo) })
	out := make([]rune, 0, len(rs))
	for _, s := range spans {
		if n := len(out); n > 0 && s.lo <= out[n-1]+1 {
			out[n-1] = max(out[n-1], s.hi)
			continue
		}
		out = append(out, s.lo, s.hi)
	}
	return out
}
