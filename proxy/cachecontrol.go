package proxy

import (
	"net/http"
	"net/textproto"
	"strconv"
	"strings"
	"time"

	"golang.org/x/net/http/httpguts"
)

// maxDeltaSeconds is the largest delta-seconds value we represent. RFC 9111
// §1.2.2 says a cache that receives a larger value must treat it as 2^31.
const maxDeltaSeconds = 1<<31 - 1

// unset marks a delta-seconds directive that was absent.
const unset = -1

// CacheControl holds the directives of one or more Cache-Control (or targeted
// CDN-Cache-Control) field lines. Durations are in whole seconds; unset ones
// are -1. Directives that the cache does not act on are ignored, as RFC 9111
// §5.2.3 requires.
type CacheControl struct {
	MaxAge        int // max-age; -1 if absent
	SMaxAge       int // s-maxage; -1 if absent
	MaxStale      int // request max-stale; -1 if absent, maxDeltaSeconds if given without a value
	MinFresh      int // request min-fresh; -1 if absent
	StaleWhile    int // stale-while-revalidate (RFC 5861); -1 if absent
	StaleIfError  int // stale-if-error (RFC 5861); -1 if absent
	NoStore       bool
	NoCache       bool // unqualified no-cache: every use must be revalidated
	NoCacheFields bool // qualified no-cache="field": the named fields must not be served without revalidation
	Private       bool // unqualified private: a shared cache must not store
	PrivateFields bool // qualified private="field"
	// Fields are the field names a qualified no-cache or private lists
	// (canonical form): one user's, never stored in the shared copy.
	// FieldsUnread is set when such a list could not be read (an
	// unterminated quote, a name that is no field name, an empty list):
	// which fields are one user's is then unknown.
	Fields         []string
	FieldsUnread   bool
	Public         bool
	MustReval      bool // must-revalidate
	ProxyReval     bool // proxy-revalidate
	OnlyIfCached   bool // request only-if-cached
	NoTransform    bool
	Immutable      bool
	MustUnderstand bool // must-understand: store only status codes whose caching rules we know
	// Invalid is set when a directive the cache relies on had a malformed
	// value (for example max-age=abc). RFC 9111 §4.2.1 says to treat such a
	// response as stale, so freshness code consults it.
	Invalid bool
	// Present is true if any field line with at least one directive was seen.
	Present bool
}

// ParseCacheControl parses every field line of the named header in h.
// Duplicate directives resolve to the first occurrence, except that a
// duplicate with a conflicting value for a freshness directive marks the
// whole field invalid (stale), the conservative reading of RFC 9111 §4.2.1.
func ParseCacheControl(h http.Header, name string) CacheControl {
	cc := CacheControl{MaxAge: unset, SMaxAge: unset, MaxStale: unset, MinFresh: unset, StaleWhile: unset, StaleIfError: unset}
	for _, line := range h.Values(name) {
		cc.parseLine(line)
	}
	if cc.Invalid {
		// A field read as stale (conflicting or malformed values) gives
		// no stale window either: its stale-while-revalidate served the
		// copy on the very next request (a review, 2026-12-07).
		cc.StaleWhile, cc.StaleIfError = unset, unset
	}
	return cc
}

// parseLine adds the directives of one field line to cc.
func (cc *CacheControl) parseLine(s string) {
	for len(s) > 0 {
		var name, value string
		var hasValue bool
		before := s
		name, value, hasValue, s = nextDirective(s)
		if name == "" {
			continue
		}
		cc.Present = true
		switch {
		case value == "\x00":
			// A quoted value with junk after it, or never closed: what
			// nextDirective skipped is read whole (`ext="v" private`,
			// `ext="v, private`; a review's
			// TestS64PrivateAfterAQuotedValueIsNotIgnored).
			cc.junkDirective(before[:len(before)-len(s)])
		case !httpguts.ValidHeaderFieldName(name) || (hasValue && value != "" && value[0] != '"' && !httpguts.ValidHeaderFieldName(value)):
			cc.junkDirective(name + " " + value)
		}
		switch strings.ToLower(name) {
		case "max-age":
			cc.setDelta(&cc.MaxAge, value, hasValue)
		case "s-maxage":
			cc.setDelta(&cc.SMaxAge, value, hasValue)
		case "min-fresh":
			cc.setDelta(&cc.MinFresh, value, hasValue)
		case "stale-while-revalidate":
			cc.setDelta(&cc.StaleWhile, value, hasValue)
		case "stale-if-error":
			cc.setDelta(&cc.StaleIfError, value, hasValue)
		case "max-stale":
			if !hasValue {
				cc.MaxStale = maxDeltaSeconds
			} else {
				cc.setDelta(&cc.MaxStale, value, true)
			}
		case "no-cache", "private":
			qualified := hasValue && strings.TrimSpace(value) != ""
			cc.setQualifiable(strings.ToLower(name), qualified)
			if qualified {
				cc.addFields(value)
			}
		default:
			cc.setFlag(strings.ToLower(name))
		}
	}
}

// junkDirective reads a directive that is no token (name) or whose
// unquoted value is none ("private; no-store", "no-store;", "private
// no-store", "max-age=60; private"): the other directives it names are
// ignored as unknown, as RFC 9111 §5.2.3 reads any unknown one, but the
// words private, no-store and no-cache in it count as those directives.
// An origin that wrote them meant them, and read as junk, one user's
// page sent so was stored for everyone (a review's
// TestS61MalformedPrivateDirectiveIsNotIgnored); Varnish's built-in VCL
// and nginx find those words anywhere in the field.
func (cc *CacheControl) junkDirective(s string) {
	for word := range strings.FieldsFuncSeq(s, func(r rune) bool {
		return r >= 0x80 || !httpguts.IsTokenRune(r)
	}) {
		switch strings.ToLower(word) {
		case "private", "no-cache":
			cc.setQualifiable(strings.ToLower(word), false)
		case "no-store":
			cc.NoStore = true
		}
	}
}

// setFlag sets a directive that takes no value and reports whether name
// is one (both Cache-Control's syntax and the targeted fields' use it).
func (cc *CacheControl) setFlag(name string) bool {
	switch name {
	case "no-store":
		cc.NoStore = true
	case "public":
		cc.Public = true
	case "must-revalidate":
		cc.MustReval = true
	case "proxy-revalidate":
		cc.ProxyReval = true
	case "only-if-cached":
		cc.OnlyIfCached = true
	case "no-transform":
		cc.NoTransform = true
	case "immutable":
		cc.Immutable = true
	case "must-understand":
		cc.MustUnderstand = true
	default:
		return false
	}
	return true
}

// setQualifiable sets no-cache or private, unqualified or naming fields.
func (cc *CacheControl) setQualifiable(name string, qualified bool) {
	switch {
	case name == "no-cache" && qualified:
		cc.NoCacheFields = true
	case name == "no-cache":
		cc.NoCache = true
	case qualified:
		cc.PrivateFields = true
	default:
		cc.Private = true
	}
}

// addFields records the field names of a qualified no-cache or private
// (value as nextDirective gives it: quoted, a token, or "\x00" when
// malformed).
func (cc *CacheControl) addFields(value string) {
	if value == "\x00" {
		cc.FieldsUnread = true
		return
	}
	if len(value) >= 2 && value[0] == '"' && value[len(value)-1] == '"' {
		value = value[1 : len(value)-1]
	}
	named := 0
	for name := range strings.SplitSeq(value, ",") {
		name = strings.TrimSpace(name)
		if name == "" {
			continue
		}
		if !httpguts.ValidHeaderFieldName(name) {
			cc.FieldsUnread = true
			continue
		}
		cc.Fields = append(cc.Fields, textproto.CanonicalMIMEHeaderKey(name))
		named++
	}
	if named == 0 {
		cc.FieldsUnread = true
	}
}

// parseSurrogateControl parses Surrogate-Control, keeping the directives
// that carry no ";device" target or that target device. no-store-remote
// is no-store here: it tells a surrogate far from the client, as a CDN's
// edge is, not to store. The field is Present (and so stands in for
// Cache-Control) only when it says something about caching: content="
// ESI/1.0", which frameworks add to any page with ESI tags, is about
// processing, and read as the field that governs it set Cache-Control's
// private aside (a review's
// TestS61SurrogateControlWithoutCachingDirectivesDoesNotOverridePrivate).
func parseSurrogateControl(h http.Header, device string) CacheControl {
	cc := CacheControl{MaxAge: unset, SMaxAge: unset, MaxStale: unset, MinFresh: unset, StaleWhile: unset, StaleIfError: unset}
	for _, line := range h.Values("Surrogate-Control") {
		var kept []string
		for d := range strings.SplitSeq(line, ",") {
			d = strings.TrimSpace(d)
			if body, target, ok := strings.Cut(d, ";"); ok {
				if !strings.EqualFold(strings.TrimSpace(target), device) {
					continue
				}
				d = strings.TrimSpace(body)
			}
			if strings.EqualFold(d, "no-store-remote") {
				d = "no-store"
			}
			kept = append(kept, d)
		}
		cc.parseLine(strings.Join(kept, ","))
	}
	cc.Present = cc.Present && cc.saysCaching()
	return cc
}

// saysCaching reports whether cc holds a directive about storing or
// reusing a response, or one the cache could not read (Invalid, FieldsUnread).
func (cc *CacheControl) saysCaching() bool {
	return cc.MaxAge != unset || cc.SMaxAge != unset || cc.StaleWhile != unset || cc.StaleIfError != unset ||
		cc.NoStore || cc.NoCache || cc.NoCacheFields || cc.Private || cc.PrivateFields || cc.FieldsUnread ||
		cc.Public || cc.MustReval || cc.ProxyReval || cc.Immutable || cc.MustUnderstand || cc.Invalid
}

// setDelta records a delta-seconds value. A missing or malformed value marks
// the field invalid; a second, different value for the same directive does too.
func (cc *CacheControl) setDelta(dst *int, value string, hasValue bool) {
	if !hasValue {
		cc.Invalid = true
		return
	}
	n, ok := parseDeltaSeconds(value)
	if !ok {
		cc.Invalid = true
		return
	}
	if *dst != unset {
		if *dst != n {
			cc.Invalid = true
		}
		return
	}
	*dst = n
}

// parseDeltaSeconds parses 1*DIGIT, saturating at 2^31-1. Quoted values are
// accepted (RFC 9111 §5.2: recipients should accept the quoted-string form).
func parseDeltaSeconds(v string) (int, bool) {
	if len(v) >= 2 && v[0] == '"' && v[len(v)-1] == '"' {
		v = v[1 : len(v)-1]
	}
	if v == "" {
		return 0, false
	}
	n := 0
	for i := 0; i < len(v); i++ {
		c := v[i]
		if c < '0' || c > '9' {
			return 0, false
		}
		if n < maxDeltaSeconds {
			n = n*10 + int(c-'0')
			if n > maxDeltaSeconds {
				n = maxDeltaSeconds
			}
		}
	}
	return n, true
}

// nextDirective splits the first directive off s. It understands
// quoted-string values containing commas and backslash escapes.
func nextDirective(s string) (name, value string, hasValue bool, rest string) {
	s = strings.TrimLeft(s, " \t,")
	i := 0
	for i < len(s) && s[i] != '=' && s[i] != ',' {
		i++
	}
	name = strings.TrimSpace(s[:i])
	if i == len(s) || s[i] == ',' {
		return name, "", false, s[i:]
	}
	// s[i] == '='
	s = strings.TrimLeft(s[i+1:], " \t")
	if len(s) > 0 && s[0] == '"' {
		var b strings.Builder
		j := 1
		closed := false
		for j < len(s) {
			c := s[j]
			if c == '\\' && j+1 < len(s) {
				b.WriteByte(s[j+1])
				j += 2
				continue
			}
			if c == '"' {
				closed = true
				j++
				break
			}
			b.WriteByte(c)
			j++
		}
		if !closed {
			// An unterminated quote: treat the value as malformed.
			return name, "\x00", true, ""
		}
		rest = s[j:]
		// Anything between the closing quote and the next comma is junk
		// that makes the value malformed.
		k := strings.IndexByte(rest, ',')
		tail := rest
		if k >= 0 {
			tail = rest[:k]
		}
		if strings.TrimSpace(tail) != "" {
			return name, "\x00", true, skipToComma(rest)
		}
		return name, `"` + b.String() + `"`, true, skipToComma(rest)
	}
	j := strings.IndexByte(s, ',')
	if j < 0 {
		return name, strings.TrimSpace(s), true, ""
	}
	return name, strings.TrimSpace(s[:j]), true, s[j:]
}

func skipToComma(s string) string {
	if k := strings.IndexByte(s, ','); k >= 0 {
		return s[k:]
	}
	return ""
}

// seconds converts a delta-seconds directive value to a Duration.
func seconds(n int) time.Duration { return time.Duration(n) * time.Second }

// ParseAge parses the Age field as RFC 9111 §5.1 says: Age is one
// delta-seconds value, but when it arrives repeated or as a list the
// recipient uses the first value, and an Age that is not a non-negative
// integer is ignored (ok is false, as when the field is absent): it does
// not make the response stale.
// The cluster reads a peer's page's age with it too (cluster/purgehold.go).
func ParseAge(h http.Header) (age time.Duration, ok bool) {
	vs := h.Values("Age")
	if len(vs) == 0 {
		return 0, false
	}
	v := vs[0]
	if i := strings.IndexByte(v, ','); i >= 0 {
		v = v[:i]
	}
	v = strings.TrimSpace(v)
	if !allDigits(v) {
		return 0, false
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n > maxDeltaSeconds {
		n = maxDeltaSeconds // overflowing digits saturate (RFC 9111 §1.2.2)
	}
	return seconds(int(n)), true
}

func allDigits(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}
