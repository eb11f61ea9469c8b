package proxy

import (
	"net/http"
	"slices"
	"strings"
	"testing"
)

// s8Elements is an independent reading of a list field line (RFC 9110
// §5.6.1, §5.6.4): commas outside quoted strings split it, a quoted pair
// takes the byte after the backslash if there is one, blanks around
// elements go, empty elements go.
func s8Elements(v string) []string {
	var out []string
	var cur strings.Builder
	quoted := false
	flush := func() {
		if p := strings.Trim(cur.String(), " \t"); p != "" {
			out = append(out, p)
		}
		cur.Reset()
	}
	for i := 0; i < len(v); i++ {
		c := v[i]
		switch {
		case quoted && c == '\\':
			cur.WriteByte(c)
			if i+1 < len(v) {
				i++
				cur.WriteByte(v[i])
			}
		case c == '"':
			quoted = !quoted
			cur.WriteByte(c)
		case c == ',' && !quoted:
			flush()
		default:
			cur.WriteByte(c)
		}
	}
	flush()
	return out
}

// s8SingleLine keeps FuzzS8VaryKey to one line per request (set it false
// to also find the ambiguity of elements joined with ',' across lines:
// TestS8VaryKeyLinesSplitInsideAQuotedString).
var s8SingleLine = true

// FuzzS8VaryKey: two requests select the same variant exactly when their
// values are equal as the field's grammar reads them: list fields as
// lists (over every line), other fields line by line trimmed.
func FuzzS8VaryKey(f *testing.F) {
	f.Add("accept", "a, b", "", "a,b", "")
	f.Add("origin", "x,", "", "x", "")
	f.Add("accept-language", `en;x="\`, "", "en", "")
	f.Fuzz(func(t *testing.T, name, a1, a2, b1, b2 string) {
		if name != "accept" && name != "accept-language" && name != "origin" && name != "x-v" {
			name = "accept"
		}
		if s8SingleLine {
			a2, b2 = "", ""
		}
		for _, v := range []string{a1, a2, b1, b2} {
			if strings.ContainsAny(v, "\r\n\x00") {
				return // never in a field value
			}
		}
		for _, v := range []string{a1, a2, b1, b2} {
			if s8KnownBugsSkipped && s8EndsInQuotedBackslash(v) {
				return // TestS8VaryKeyKeepsAnElementEndingInAQuotedBackslash
			}
		}
		mk := func(l1, l2 string) (http.Header, []string) {
			lines := []string{l1}
			if l2 != "" {
				lines = append(lines, l2)
			}
			return http.Header{http.CanonicalHeaderKey(name): lines}, lines
		}
		ha, la := mk(a1, a2)
		hb, lb := mk(b1, b2)
		names := []string{name}
		ka, kb := VaryKey(names, ha), VaryKey(names, hb)
		var same bool
		if listFields[name] {
			var ea, eb []string
			for _, l := range la {
				ea = append(ea, s8Elements(l)...)
			}
			for _, l := range lb {
				eb = append(eb, s8Elements(l)...)
			}
			same = slices.Equal(ea, eb)
		} else {
			trim := func(ls []string) []string {
				out := make([]string, len(ls))
				for i, l := range ls {
					out[i] = strings.Trim(l, " \t")
				}
				return out
			}
			same = slices.Equal(trim(la), trim(lb))
		}
		if same != (ka == kb) {
			t.Fatalf("%s: %q vs %q: keys %q and %q (same by grammar: %v)", name, la, lb, ka, kb, same)
		}
		if VaryKey(names, http.Header{}) == ka {
			t.Fatalf("absent selects the variant of %q", la)
		}
	})
}

// TestS8VaryKeyLinesSplitInsideAQuotedString: the elements of a list
// field are joined with ',' in the key, and an element can hold a comma
// inside a quoted string; two lines `a;x="1` and `2"` (combined by RFC
// 9110 §5.3 as `a;x="1, 2"`, one element) select the variant of the one
// element `a;x="1,2"`. Low impact (a victim must send a quoted comma),
// but the key is not injective.
//
// Failed before 2026-12-06; fixed: list elements are kept apart by a newline.
func TestS8VaryKeyLinesSplitInsideAQuotedString(t *testing.T) {
	names := []string{"accept"}
	a := VaryKey(names, http.Header{"Accept": {`a;x="1,2"`}})
	b := VaryKey(names, http.Header{"Accept": {`a;x="1`, `2"`}})
	if a == b {
		t.Errorf("Accept %q and the two lines %q select the same variant %q", `a;x="1,2"`, []string{`a;x="1`, `2"`}, a)
	}
}

// s8KnownBugsSkipped lets the fuzzer look past the bug it finds first.
var s8KnownBugsSkipped = true

// s8EndsInQuotedBackslash: v ends with a backslash inside a quoted string.
func s8EndsInQuotedBackslash(v string) bool {
	quoted := false
	for i := 0; i < len(v); i++ {
		switch {
		case quoted && v[i] == '\\':
			if i+1 == len(v) {
				return true
			}
			i++
		case v[i] == '"':
			quoted = !quoted
		}
	}
	return false
}
