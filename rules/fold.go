package rules

import (
	"regexp"
	"regexp/syntax"
	"slices"
	"strconv"
	"strings"
	"sync"
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
	var b strings.Builder
	writeRegexp(&b, re)
	c, err := regexp.Compile(b.String())
	return c, sensitive, err
}

// writeRegexp writes re as a pattern regexp.Compile reads back to the
// same program. syntax.Regexp.String would do, but it checks every class
// for case closure rune by rune (about 2 ms for [^/], a review's test),
// and every class here is closed. Every rune is written escaped, every
// operand of a repetition and every alternation grouped.
func writeRegexp(b *strings.Builder, re *syntax.Regexp) {
	switch re.Op {
	case syntax.OpNoMatch:
		b.WriteString(`[^\x00-\x{10FFFF}]`)
	case syntax.OpEmptyMatch:
		b.WriteString(`(?:)`)
	case syntax.OpLiteral:
		if re.Flags&syntax.FoldCase != 0 {
			b.WriteString(`(?i:`)
		} else {
			b.WriteString(`(?-i:`)
		}
		for _, r := range re.Rune {
			writeRune(b, r)
		}
		b.WriteString(`)`)
	case syntax.OpCharClass:
		if len(re.Rune) == 0 {
			b.WriteString(`[^\x00-\x{10FFFF}]`)
			return
		}
		b.WriteString(`[`)
		for i := 0; i+1 < len(re.Rune); i += 2 {
			writeRune(b, re.Rune[i])
			if re.Rune[i+1] > re.Rune[i] {
				b.WriteString(`-`)
				writeRune(b, re.Rune[i+1])
			}
		}
		b.WriteString(`]`)
	case syntax.OpAnyCharNotNL:
		b.WriteString(`(?-s:.)`)
	case syntax.OpAnyChar:
		b.WriteString(`(?s:.)`)
	case syntax.OpBeginLine:
		b.WriteString(`(?m:^)`)
	case syntax.OpEndLine:
		b.WriteString(`(?m:$)`)
	case syntax.OpBeginText:
		b.WriteString(`\A`)
	case syntax.OpEndText:
		b.WriteString(`\z`)
	case syntax.OpWordBoundary:
		b.WriteString(`\b`)
	case syntax.OpNoWordBoundary:
		b.WriteString(`\B`)
	case syntax.OpCapture:
		b.WriteString(`(`)
		writeRegexp(b, re.Sub[0])
		b.WriteString(`)`)
	case syntax.OpStar, syntax.OpPlus, syntax.OpQuest, syntax.OpRepeat:
		b.WriteString(`(?:`)
		writeRegexp(b, re.Sub[0])
		b.WriteString(`)`)
		switch re.Op {
		case syntax.OpStar:
			b.WriteString(`*`)
		case syntax.OpPlus:
			b.WriteString(`+`)
		case syntax.OpQuest:
			b.WriteString(`?`)
		default:
			b.WriteString(`{` + strconv.Itoa(re.Min))
			switch {
			case re.Max < 0:
				b.WriteString(`,`)
			case re.Max != re.Min:
				b.WriteString(`,` + strconv.Itoa(re.Max))
			}
			b.WriteString(`}`)
		}
		if re.Flags&syntax.NonGreedy != 0 {
			b.WriteString(`?`)
		}
	case syntax.OpConcat:
		for _, sub := range re.Sub {
			b.WriteString(`(?:`)
			writeRegexp(b, sub)
			b.WriteString(`)`)
		}
	case syntax.OpAlternate:
		b.WriteString(`(?:`)
		for i, sub := range re.Sub {
			if i > 0 {
				b.WriteString(`|`)
			}
			writeRegexp(b, sub)
		}
		b.WriteString(`)`)
	default:
		b.WriteString(re.String()) // an operator not above: syntax's own spelling
	}
}

// writeRune writes r escaped, as it reads in a literal and in a class.
func writeRune(b *strings.Builder, r rune) {
	b.WriteString(`\x{`)
	b.WriteString(strconv.FormatInt(int64(r), 16))
	b.WriteString(`}`)
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
		re.Rune, sensitive = closeClass(re.Rune)
	case syntax.OpWordBoundary, syntax.OpNoWordBoundary:
		// \b and \B count only ASCII [0-9A-Za-z_] as word runes, and ſ
		// and the Kelvin sign are spellings of s and k: a boundary flips
		// with the spelling (/\bsettings and /ſettings). The closed form
		// drops the assertion, a superset: it can only answer "some
		// spelling matches" more often (a review's test).
		re.Op = syntax.OpEmptyMatch
		sensitive = true
	}
	for _, sub := range re.Sub {
		if closeCase(sub) {
			sensitive = true
		}
	}
	return sensitive
}

// inRanges reports whether r is in a class's sorted lo, hi pairs.
func inRanges(ranges []rune, r rune) bool {
	i, j := 0, len(ranges)/2
	for i < j {
		m := (i + j) / 2
		switch {
		case r < ranges[2*m]:
			j = m
		case r > ranges[2*m+1]:
			i = m + 1
		default:
			return true
		}
	}
	return false
}

// closeClass returns a class's ranges (lo, hi pairs, sorted) with the
// other cases of every rune it holds added, looking only at the runes
// that have another case (foldable): a few thousand, whatever the width
// of the class (a walk of every rune in [^/] cost 2 ms a class: a
// review's test; one that stopped at U+2000 missed fullwidth and Deseret
// letters: another's).
// sensitive: a rune added is in folded form (foldRune), so the class
// accepts a lower-case letter it did not.
func closeClass(ranges []rune) (closed []rune, sensitive bool) {
	var add []rune
	for _, r := range foldable() {
		if !inRanges(ranges, r) {
			continue
		}
		for f := unicode.SimpleFold(r); f != r; f = unicode.SimpleFold(f) {
			if !inRanges(ranges, f) {
				add = append(add, f)
				sensitive = sensitive || foldRune(f) == f
			}
		}
	}
	if len(add) == 0 {
		return ranges, false
	}
	out := slices.Clone(ranges)
	for _, r := range add {
		out = append(out, r, r)
	}
	return mergeRanges(out), sensitive
}

// foldable lists, in order, every rune with another case
// (unicode.SimpleFold(r) != r), found by trying every rune once, when a
// rule first needs it (about 20 ms): unicode.CaseRanges misses some (ß,
// whose other case ẞ lives in unicode's orbit table: a review's test).
var foldable = sync.OnceValue(func() []rune {
	var out []rune
	for r := rune(0); r <= unicode.MaxRune; r++ {
		if unicode.SimpleFold(r) != r {
			out = append(out, r)
		}
	}
	return out
})

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
