// Package rules is the cache policy an operator sets per site: an ordered
// list of rules, each matched on the request's path (a prefix, a glob or a
// regular expression), its method and, for the fields that act on a
// response, the response's status; the first rule that matches decides,
// as the first matching location does in nginx.
//
// A rule can set the lifetime the cache gives a response (a default when
// the origin gives none, an override, a floor and a ceiling, stale
// windows), bypass the cache, shape the cache key (drop, allow-list or
// sort query parameters; add a header, a cookie or the device class),
// edit request and response fields, strip cookies, and say how a
// client's no-cache or max-age=0 is treated.
//
// What no rule can do is make a response shared that RFC 9111 keeps
// private (private, no-store, a response to a request with Authorization
// not marked shareable): the proxy applies rules after those checks, and
// response edits may not touch the fields the checks read. The one
// explicit exception is strip_cookies, which removes Cookie from the
// request and Set-Cookie from the response for the paths it names.
//
// The package is hand-written: matching is a few string operations per
// rule, and no maintained library offers CDN cache rules as a value the
// proxy can consult per request.
package rules

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
	"unicode/utf8"
)

// ClientNoCache is how a client's request to skip the cache
// (Cache-Control: no-cache or max-age=0, Pragma: no-cache, min-fresh) is
// treated.
type ClientNoCache int

const (
	// Honour revalidates with the origin for every such request (RFC 9111
	// §5.2.1 as written: the client's preference is followed).
	Honour ClientNoCache = iota
	// Coalesce revalidates at most once per URL per interval: every other
	// such request within it is answered from the entry that was just
	// validated (or fetched).
	Coalesce
	// Ignore answers such requests from the cache as if they had no
	// directives (nginx's and Varnish's default). max-stale,
	// only-if-cached and no-store are still obeyed.
	Ignore
)

var clientNoCacheNames = [...]string{"honour", "coalesce", "ignore"}

func (c ClientNoCache) String() string {
	if int(c) < len(clientNoCacheNames) {
		return clientNoCacheNames[c]
	}
	return "ClientNoCache(" + strconv.Itoa(int(c)) + ")"
}

// ParseClientNoCache reads honour, coalesce or ignore.
func ParseClientNoCache(s string) (ClientNoCache, error) {
	if s == "honor" {
		return Honour, nil
	}
	for i, n := range clientNoCacheNames {
		if s == n {
			return ClientNoCache(i), nil
		}
	}
	return 0, fmt.Errorf("is not honour, coalesce or ignore")
}

// Unset marks a duration field a rule does not set.
const Unset time.Duration = -1

// Lifetime is what a rule says about how long a response stays fresh and
// may be served stale. Fields are Unset when the rule does not set them.
type Lifetime struct {
	Default time.Duration // when the origin gives no explicit freshness
	TTL     time.Duration // replaces the origin's lifetime
	Min     time.Duration // floor of the lifetime
	Max     time.Duration // ceiling of the lifetime
	SWR     time.Duration // stale-while-revalidate window
	SIE     time.Duration // stale-if-error window
	// statuses the rule's lifetime applies to: those the rule matched on,
	// else the usual successful ones.
	statuses []int
}

// NoLifetime is the Lifetime of no rule.
var NoLifetime = Lifetime{Default: Unset, TTL: Unset, Min: Unset, Max: Unset, SWR: Unset, SIE: Unset}

// defaultStatuses are what a rule's lifetime applies to when the rule
// does not match on status: successful answers and permanent redirects.
// An error page or a temporary redirect kept for a default TTL meant for
// pages would outlive the fault; a rule that means them names them.
var defaultStatuses = []int{200, 203, 204, 300, 301, 308}

// AppliesTo reports whether the lifetime is for responses of status.
func (l Lifetime) AppliesTo(status int) bool { return slices.Contains(l.statusesOr(), status) }

// statusesOr is the statuses l applies to.
func (l Lifetime) statusesOr() []int {
	if l.statuses != nil {
		return l.statuses
	}
	return defaultStatuses
}

// Sets reports whether the rule sets any lifetime field.
func (l Lifetime) Sets() bool {
	return l.Default != Unset || l.TTL != Unset || l.Min != Unset || l.Max != Unset || l.SWR != Unset || l.SIE != Unset
}

// Gives reports whether the lifetime makes a response of status fresh
// for a while even when the origin gave no freshness of its own.
func (l Lifetime) Gives(status int) bool {
	return l.AppliesTo(status) && (l.Default > 0 || l.TTL > 0 || l.Min > 0)
}

// Apply returns the lifetime of a response of status given the origin's
// (lifetime, and whether the origin gave it explicitly), and whether the
// result stands on the operator's word alone: the origin gave no
// freshness, or the rule made the response fresh for longer than the
// origin said. The proxy treats such a lifetime as it treats a heuristic
// one: never shared from a request with credentials or cookies, since
// the origin may have personalised the answer and relied on a short
// lifetime (max-age=0, must-revalidate) to keep it from others.
func (l Lifetime) Apply(status int, lifetime time.Duration, explicit bool) (time.Duration, bool) {
	if !l.AppliesTo(status) {
		return lifetime, !explicit
	}
	origin := lifetime
	switch {
	case l.TTL != Unset:
		lifetime = l.TTL
	case !explicit && l.Default != Unset:
		lifetime = l.Default
	}
	if l.Min != Unset && lifetime < l.Min {
		lifetime = l.Min
	}
	if l.Max != Unset && lifetime > l.Max {
		lifetime = l.Max
	}
	return lifetime, !explicit || lifetime > origin
}

// HeaderEdit sets and removes header fields.
type HeaderEdit struct {
	Set    [][2]string // canonical name, value
	Remove []string    // canonical names
}

// Empty reports whether the edit does nothing.
func (e HeaderEdit) Empty() bool { return len(e.Set) == 0 && len(e.Remove) == 0 }

// Value is the value the edit sets name (canonical) to, and whether it
// sets it.
func (e HeaderEdit) Value(name string) (string, bool) {
	for _, kv := range e.Set {
		if kv[0] == name {
			return kv[1], true
		}
	}
	return "", false
}

// ApplyTo edits h: removals first, then sets.
func (e HeaderEdit) ApplyTo(h http.Header) {
	for _, n := range e.Remove {
		delete(h, n)
	}
	for _, kv := range e.Set {
		h[kv[0]] = []string{kv[1]}
	}
}

// Query is how a rule shapes the query in the cache key. The query sent
// to the origin is the client's: a parameter the key ignores (utm_source)
// still reaches the origin on a miss.
type Query struct {
	Ignore []string // parameter names; a trailing * makes a prefix (utm_*)
	Allow  []string // only these names stay in the key (same patterns)
	Sort   bool     // sort the parameters
}

// Empty reports whether q leaves the query as it is.
func (q Query) Empty() bool { return len(q.Ignore) == 0 && len(q.Allow) == 0 && !q.Sort }

// Rule is one compiled rule.
type Rule struct {
	Name  string
	Index int

	// match
	prefix string
	glob   string
	re     *regexp.Regexp
	// The pattern as a case-insensitive origin reads it: prefix and
	// glob folded (foldPath), the regular expression with (?i). See
	// Set.pick.
	prefixFold, globFold, reLitFold string
	reFold                          *regexp.Regexp
	// caseFree: the pattern has no letter, so every spelling of a path
	// matches it or none does (pick's scan ends there).
	caseFree bool
	// reCaseSensitive: the regular expression may reject a lower-case
	// path some other spelling of which it accepts (caseClosed).
	reCaseSensitive bool
	// reLit is a literal every match of re holds: at the start of the
	// path when reAnchored, else somewhere in it. Checked first, it
	// keeps most paths from running the regular expression at all.
	reLit      string
	reAnchored bool
	methods    []string // upper case; HEAD matches where GET does
	statuses   []int
	cookie     string // the request carries a cookie of this name (trailing *: prefix)

	Bypass        bool
	Lifetime      Lifetime
	Query         Query
	KeyHeaders    []string // canonical names whose values join the key
	KeyCookies    []string // cookie names whose values join the key
	KeyDevice     bool     // the device class (mobile, tablet, desktop) joins the key
	Request       HeaderEdit
	Response      HeaderEdit
	StripCookies  bool
	ClientNoCache ClientNoCache
	// ClientNoCacheSet: the rule sets ClientNoCache (else the site's
	// default stands).
	ClientNoCacheSet bool
	// RevalidateInterval is Coalesce's interval (0: the site's default,
	// cache.revalidate_interval).
	RevalidateInterval time.Duration
	// BrowserTTL is how long clients (browsers and any cache after the
	// edge) may keep an answer, from when they receive it: the max-age of
	// the Cache-Control they are sent, for the statuses the rule's
	// lifetimes apply to (when BrowserTTLSet; else the origin's field goes
	// as it is). It changes nothing of the edge's own lifetime, nor what
	// peers are sent.
	BrowserTTL    time.Duration
	BrowserTTLSet bool
	// Slot is the one mutable part of a rule: a place for its user to
	// cache something per rule (the proxy keeps the rule's hit counter
	// there), which goes away with the rule set.
	Slot atomic.Value
}

// ResponseOnly reports whether the rule matches on status, so that only
// its response fields can act (the status is known after the origin
// answered).
func (r *Rule) ResponseOnly() bool { return len(r.statuses) > 0 }

// KeyedOnRequest reports whether the cache key takes fields of the
// request beyond its URL.
func (r *Rule) KeyedOnRequest() bool {
	return len(r.KeyHeaders) > 0 || len(r.KeyCookies) > 0 || r.KeyDevice
}

// matchPathFold reports whether the rule's pattern matches some case
// spelling of path (folded: foldPath(path)): the prefix or glob folded as
// the path is, a regular expression case-closed (fold.go), checked first
// against the folded literal every match holds, as matchPath does.
func (r *Rule) matchPathFold(path, folded string) bool {
	switch {
	case r.re != nil:
		if r.reAnchored && !strings.HasPrefix(folded, r.reLitFold) || !r.reAnchored && !strings.Contains(folded, r.reLitFold) {
			return false
		}
		return r.reFold.MatchString(path)
	case r.glob != "":
		return globMatch(r.globFold, folded)
	}
	return strings.HasPrefix(folded, r.prefixFold)
}

// matchPath reports whether the rule's path pattern matches path.
func (r *Rule) matchPath(path string) bool {
	switch {
	case r.re != nil:
		if r.reAnchored {
			if !strings.HasPrefix(path, r.reLit) {
				return false
			}
		} else if !strings.Contains(path, r.reLit) {
			return false
		}
		return r.re.MatchString(path)
	case r.glob != "":
		return globMatch(r.glob, path)
	}
	return strings.HasPrefix(path, r.prefix)
}

func (r *Rule) matchMethod(method string) bool {
	if len(r.methods) == 0 || slices.Contains(r.methods, method) {
		return true
	}
	// HEAD is GET without a body (they share entries): a rule for GET
	// matches HEAD too.
	return method == http.MethodHead && slices.Contains(r.methods, http.MethodGet)
}

func (r *Rule) matchCookie(h http.Header) bool {
	if r.cookie == "" {
		return true
	}
	for _, line := range h["Cookie"] {
		for part := range strings.SplitSeq(line, ";") {
			name, _, _ := strings.Cut(part, "=")
			if cookieNameMatch(r.cookie, strings.TrimSpace(name)) {
				return true
			}
		}
	}
	return false
}

// cookieNameMatch matches a cookie's name against a pattern (exact, or a
// prefix when it ends in *) as the most lenient origin reads names:
// ASP.NET Core compares them without case and PHP's $_COOKIE turns '.',
// ' ' and '[' into '_'. A bypass for auth_token that AUTH_TOKEN or
// auth.token dodged served a logged-in page to everyone, and a page keyed
// on lang was stored from LANG=de for visitors without it (a review's
// TestS24CookieConditionMatchesTheNameTheOriginReads and
// TestS24KeyCookieNameAsTheOriginReadsIt).
func cookieNameMatch(pattern, name string) bool {
	if p, ok := strings.CutSuffix(pattern, "*"); ok {
		return len(name) >= len(p) && foldedEqual(name[:len(p)], p)
	}
	return foldedEqual(name, pattern)
}

// foldedEqual compares two cookie names as cookieNameMatch reads them,
// without allocating.
func foldedEqual(a, b string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := 0; i < len(a); i++ {
		if foldNameByte(a[i]) != foldNameByte(b[i]) {
			return false
		}
	}
	return true
}

// foldNameByte is a name's byte as lenient origins read it: lower case
// (ASP.NET Core), and '.', ' ' and '[' as '_' (PHP), for cookie and query
// parameter names alike.
func foldNameByte(c byte) byte {
	switch {
	case 'A' <= c && c <= 'Z':
		return c + ('a' - 'A')
	case c == '.' || c == ' ' || c == '[':
		return '_'
	}
	return c
}

// Set is a site's rules, in order.
type Set struct {
	Rules []*Rule
	at    string // the configuration key the rules were read from (Parse's)
	// needsHeader: some request-side rule matches on a cookie, so that
	// finding one needs the request's fields.
	needsHeader bool
	// ambiguous is the rule of every request whose path is ambiguous
	// (AmbiguousPath): a bypass, named AmbiguousPathRule. One per set,
	// as its Slot is per set.
	ambiguous *Rule
	// hasUpperPattern: some rule's path pattern has a capital, so a
	// lower-case path may match it folded and not as written.
	hasUpperPattern bool
	// foldMatters: some rule keeps answers apart (a bypass, a key on the
	// request, a query key), so a path's case may matter (pick).
	foldMatters bool
	// cookieLifetimes: a rule that matches on a cookie sets a lifetime.
	cookieLifetimes bool
	// browserTTL: some rule sets BrowserTTL; browserTTLCookie: one that
	// matches on a cookie does.
	browserTTL, browserTTLCookie bool
	retired                      atomic.Bool // Retire
}

// AmbiguousPathRule names the bypass a site with rules gives a request
// whose path is ambiguous. A configured name cannot take it (names start
// with a letter or a digit).
const AmbiguousPathRule = "_ambiguous-path"

// IsAmbiguousPath reports whether r is the bypass of an ambiguous path.
func (r *Rule) IsAmbiguousPath() bool { return r != nil && r.Name == AmbiguousPathRule }

// AmbiguousPath reports whether a (percent-decoded) path has dot
// segments or empty segments ("/./", "/../", "//", a trailing "/." or
// "/.."). Rules match a path as it is written, and origins differ in
// what they do with such a path: nginx, Apache, Tomcat and IIS serve
// /api/me for //api/me, /./api/me and /x/../api/me, other servers route
// the path as written. Whatever a rule decides for one reading may be
// wrong for the other (a bypass of /api/ skipped, a ttl for /static/
// given to /static/../api/me), so under rules such a request is passed
// to the origin and never answered from nor stored in the cache.
// Browsers resolve dot segments before they send a request: only a
// crafted link or a client of its own sends one.
func AmbiguousPath(path string) bool {
	if strings.Contains(path, "//") || strings.HasSuffix(path, "/.") || strings.HasSuffix(path, "/..") {
		return true
	}
	// A backslash is a slash to IIS and some frameworks, and Tomcat and
	// Jetty drop a segment's ";parameters": /api\me and /api;x/me are
	// /api/me there.
	if strings.ContainsAny(path, "\\;") {
		return true
	}
	return strings.Contains(path, "/./") || strings.Contains(path, "/../")
}

// decodedPath is the path rules match on: percent-decoded, so that no
// spelling of a path (/%61dmin) escapes a rule that names it.
func decodedPath(path string) string {
	if strings.IndexByte(path, '%') < 0 {
		return path
	}
	if p, err := url.PathUnescape(path); err == nil {
		return p
	}
	return path
}

// ForRequest returns the first rule that is not response-only and
// matches method, the (escaped or decoded) path and the request's fields
// (h may be nil when no rule matches on them: see NeedsHeader), or nil.
// An ambiguous path gets the set's bypass (see pick).
func (s *Set) ForRequest(method, path string, h http.Header) *Rule {
	if s == nil || len(s.Rules) == 0 {
		return nil
	}
	return s.pick(path, func(r *Rule) bool {
		return !r.ResponseOnly() && r.matchMethod(method) && r.matchCookie(h)
	}, func(exact, r *Rule) bool {
		return !covers(exact, r)
	})
}

// pick returns the first rule that ok accepts for path (percent-decoded
// first; the path test is pick's), or the set's bypass when the path is
// ambiguous: spelled so that origins read it as another path
// (AmbiguousPath), or cased so that a case-insensitive origin (IIS,
// ASP.NET Core, Express by default) reads it as a path that another
// spelling would give a stricter rule (stricter(exact, r)): /API/me past
// a bypass of /api/, /account/ past one of /Account/, /MEDIA/PRIVATE/x
// past a bypass of /Media/Private/ behind a caching rule for /media/
// (reviews' leaks). A rule matching some spelling is a candidate until a
// rule that every spelling matches (a pattern without letters, such as
// "/") ends the scan: no later rule is any spelling's first. Rules that
// differ in lifetimes alone keep the exact match, so IMG_1234.JPG is
// still cached. stricter nil: case is not looked at.
func (s *Set) pick(path string, ok func(r *Rule) bool, stricter func(exact, r *Rule) bool) *Rule {
	path = decodedPath(path)
	if AmbiguousPath(path) {
		return s.ambiguous
	}
	var exact *Rule
	for _, r := range s.Rules {
		if r.matchPath(path) && ok(r) {
			exact = r
			break
		}
	}
	if stricter == nil || !s.foldMatters || (!s.hasUpperPattern && !hasUpper(path)) {
		return exact // no rule keeps answers apart, or every spelling reads alike
	}
	folded := foldPath(path)
	for _, r := range s.Rules {
		if !r.matchPathFold(path, folded) || !ok(r) {
			continue
		}
		if r != exact && stricter(exact, r) {
			return s.ambiguous
		}
		if r.caseFree {
			break
		}
	}
	return exact
}

// covers reports whether an answer kept under exact is kept at least as
// far apart as r would keep it: exact bypasses, or r neither bypasses nor
// keys on a field, cookie or device class exact does not key on. Keyed on
// a cookie an attacker sets (lang) is not keyed on the session (sid) a
// bypassed or sid-keyed spelling would need (a review's leak).
func covers(exact, r *Rule) bool {
	switch {
	case exact != nil && exact.Bypass, r == nil:
		return true
	case r.Bypass:
		return false
	}
	var headers, cookies []string
	device := false
	if exact != nil {
		headers, cookies, device = exact.KeyHeaders, exact.KeyCookies, exact.KeyDevice
	}
	for _, h := range r.KeyHeaders {
		if !slices.Contains(headers, h) {
			return false
		}
	}
	for _, c := range r.KeyCookies {
		if !slices.Contains(cookies, c) {
			return false
		}
	}
	return !r.KeyDevice || device
}

// queryCovers reports whether a key's query keeps every parameter
// another's keeps.
func queryCovers(exact, other string) bool {
	if exact == other || other == "" {
		return true
	}
	kept := strings.Split(exact, "&")
	for _, p := range strings.Split(other, "&") {
		if !slices.Contains(kept, p) {
			return false
		}
	}
	return true
}

// keepsApart reports whether a rule keeps answers from being shared as
// another rule would: a bypass, or a key on the request's own fields.
func keepsApart(r *Rule) bool { return r != nil && (r.Bypass || r.KeyedOnRequest()) }

// ForKey returns the rule that shapes the cache key of path with its
// query rawQuery: the first rule that is not response-only, has no
// cookie condition and matches a GET of path (nil: none). The key of a
// URL cannot depend on whether a request carries a cookie, or a purge of
// the URL could not find it. An ambiguous path gets the set's bypass
// (see pick), also where the two readings' rules key the query apart
// (a review's leak: /API/orders?token=… under a rule dropping every
// parameter).
func (s *Set) ForKey(path, rawQuery string) *Rule {
	if s == nil || len(s.Rules) == 0 {
		return nil
	}
	return s.pick(path, func(r *Rule) bool {
		return !r.ResponseOnly() && r.cookie == "" && r.matchMethod(http.MethodGet)
	}, func(exact, r *Rule) bool {
		switch {
		case !covers(exact, r):
			return true
		case exact != nil && exact.Bypass:
			return false // passed already: its query is no key
		}
		return !queryCovers(exact.KeyQuery(rawQuery), r.KeyQuery(rawQuery))
	})
}

// NeedsHeader reports whether finding a request's rule reads its fields.
// Warnings names each rule no request can reach: one after a rule that
// matches every request (no path or a path every path matches, no
// methods, statuses or cookie), since the first rule that matches decides.
// Such a configuration is valid, and most likely a mistake (a catch-all
// put first, where it belongs last); config check and a start print these.
func (s *Set) Warnings() []string {
	if s == nil {
		return nil
	}
	var out []string
	var all *Rule
	for _, r := range s.Rules {
		if all != nil {
			out = append(out, fmt.Sprintf("%s[%d] (%q) is never used: %s[%d] (%q) before it matches every request, and the first rule that matches decides",
				s.at, r.Index, r.Name, s.at, all.Index, all.Name))
			continue
		}
		if r.matchesAll() {
			all = r
		}
		if len(r.methods) > 0 && r.matchMethod(http.MethodHead) && !r.matchMethod(http.MethodGet) && r.setsResponseFields() {
			out = append(out, fmt.Sprintf("%s[%d] (%q) matches HEAD but not GET: its lifetimes, response_headers and browser_ttl never act, since a HEAD's answer is stored and sent under the GET's rule (they share entries)",
				s.at, r.Index, r.Name))
		}
	}
	return out
}

// setsResponseFields reports whether r sets anything that acts on the
// answer.
func (r *Rule) setsResponseFields() bool {
	return r.Lifetime.Sets() || !r.Response.Empty() || r.BrowserTTLSet
}

// matchesAll reports whether the rule matches every request and response:
// its only condition, if any, is a path every path matches.
func (r *Rule) matchesAll() bool {
	everyPath := r.re == nil && (r.glob == "" && (r.prefix == "" || r.prefix == "/") || r.glob == "*" || r.glob == "/*")
	return everyPath && len(r.methods) == 0 && len(r.statuses) == 0 && r.cookie == ""
}

func (s *Set) NeedsHeader() bool { return s != nil && s.needsHeader }

// CookieLifetimes reports whether a rule that matches on a cookie sets a
// lifetime, so that the lifetime of one request's answer may differ from
// another's for the same key.
func (s *Set) CookieLifetimes() bool { return s != nil && s.cookieLifetimes }

// Retire marks s as the rules of a site a reload removed: what counts
// per rule stops counting under it (a request still in flight under it
// would bring back the series its removal deleted).
func (s *Set) Retire() {
	if s != nil {
		s.retired.Store(true)
	}
}

// Retired reports whether Retire was called.
func (s *Set) Retired() bool { return s != nil && s.retired.Load() }

// BrowserTTLs reports whether some rule sets browser_ttl.
func (s *Set) BrowserTTLs() bool { return s != nil && s.browserTTL }

// BrowserTTLMayApply reports whether a browser_ttl may rewrite the answer
// of status to a request of method and path, whatever its cookies: for a
// reader of the request that does not look at them (the hit path), which
// then leaves the answer to the one that does.
func (s *Set) BrowserTTLMayApply(method, path string, status int) bool {
	if !s.BrowserTTLs() {
		return false
	}
	if s.browserTTLCookie {
		return true
	}
	_, set := s.ForResponse(method, path, nil, status).BrowserTTLFor(status)
	return set
}

// BrowserTTLFor is how long r says clients may keep an answer of status
// (its BrowserTTL, for the statuses its lifetimes apply to), and whether
// it says anything.
func (r *Rule) BrowserTTLFor(status int) (time.Duration, bool) {
	if r == nil || !r.BrowserTTLSet || !r.Lifetime.AppliesTo(status) {
		return 0, false
	}
	return r.BrowserTTL, true
}

// ForResponse returns the first rule matching method, path, the
// request's fields and the response's status, or nil. Case is not looked
// at (the request's rule and key rule decided whether the request
// passed); an ambiguously spelled path gets the bypass.
func (s *Set) ForResponse(method, path string, h http.Header, status int) *Rule {
	if s == nil || len(s.Rules) == 0 {
		return nil
	}
	return s.pick(path, func(r *Rule) bool {
		return r.matchMethod(method) && r.matchCookie(h) &&
			(len(r.statuses) == 0 || slices.Contains(r.statuses, status))
	}, nil)
}

// SpelledAmbiguously reports whether an escaped path has dot or empty
// segments, a backslash or a ';' once decoded (AmbiguousPath).
func SpelledAmbiguously(path string) bool { return AmbiguousPath(decodedPath(path)) }

// KeyQuery returns the query as the cache key has it under r (r may be
// nil: the query as sent).
func (r *Rule) KeyQuery(raw string) string {
	if r == nil || r.Query.Empty() || raw == "" {
		return raw
	}
	// The key drops a parameter only when every way origins read its
	// name drops it too. Some origins (Rack 2, Python before 3.9.2) also
	// split parameters at ';' ("utm_source=x;id=2" hides id inside a
	// dropped parameter), PHP reads '.', ' ' and '[' in a name as '_' and
	// skips leading spaces (per.page is per_page), ASP.NET Core reads
	// names in any case (Per_Page): a query in which one reading would
	// keep what the key drops drops nothing from its key (it is still
	// sorted if the rule sorts: a reordering drops nothing). Reviews'
	// poisonings, each with its test.
	params := strings.Split(raw, "&")
	keepAll := strings.IndexByte(raw, ';') >= 0
	names := make([]string, len(params))
	for i, p := range params {
		name, _, _ := strings.Cut(p, "=")
		if n, err := url.QueryUnescape(name); err == nil {
			name = n
		}
		names[i] = name
		if !keepAll && p != "" && r.dropsParam(name) != r.dropsParam(foldParamName(name)) {
			keepAll = true
		}
	}
	kept := params[:0]
	for i, p := range params {
		if p == "" || (!keepAll && r.dropsParam(names[i])) {
			continue
		}
		kept = append(kept, p)
	}
	if r.Query.Sort {
		slices.Sort(kept)
	}
	return strings.Join(kept, "&")
}

// dropsParam reports whether the key leaves out a parameter of name.
func (r *Rule) dropsParam(name string) bool {
	return (len(r.Query.Allow) > 0 && !anyName(r.Query.Allow, name)) || anyName(r.Query.Ignore, name)
}

// foldParamName is a parameter's name as the most forgiving origins read
// it: cut at a NUL (PHP), an array's base name (per_page for per_page[]
// and per_page[0]: PHP, Rack, ASP.NET model binding), lower case
// (ASP.NET Core), leading spaces skipped and '.', ' ' and an unclosed '['
// read as '_' (PHP).
func foldParamName(name string) string {
	if i := strings.IndexByte(name, 0); i >= 0 {
		name = name[:i]
	}
	if i := strings.IndexByte(name, '['); i > 0 && strings.IndexByte(name[i:], ']') > 0 {
		name = name[:i]
	}
	name = strings.TrimLeft(name, " ")
	return strings.Map(func(c rune) rune {
		if c < utf8.RuneSelf {
			return rune(foldNameByte(byte(c)))
		}
		return c
	}, name)
}

// KeyExtra returns what of h the rule adds to the cache key ("" when
// nothing): the values are hashed, since a header or cookie may hold a
// credential and the key is written to disk with the entry.
func (r *Rule) KeyExtra(h http.Header) string {
	if r == nil || !r.KeyedOnRequest() {
		return ""
	}
	sum := sha256.New()
	for _, name := range r.KeyHeaders {
		sum.Write([]byte(name))
		for _, v := range h[name] {
			sum.Write([]byte{0})
			sum.Write([]byte(v))
		}
		sum.Write([]byte{1})
	}
	for _, name := range r.KeyCookies {
		sum.Write([]byte(name))
		sum.Write([]byte{0})
		// Every cookie of the name, in order: origins differ on which of
		// two they read (the first, or the last), so a request with two
		// must not share the entry of a request with one.
		// Each value after a NUL, which no cookie holds: with '=' as the
		// separator "a=1; b=2" and "a=1=b=2" hashed alike (a review's
		// poisoning).
		for _, v := range cookieValues(h, name) {
			sum.Write([]byte{0})
			sum.Write([]byte(v))
		}
		sum.Write([]byte{1})
	}
	if r.KeyDevice {
		sum.Write([]byte(DeviceClass(h.Get("User-Agent"))))
	}
	var d [sha256.Size]byte
	return " rule=" + r.Name + ":" + hex.EncodeToString(sum.Sum(d[:0])[:12])
}

// cookieValues returns the values of every cookie whose name matches
// pattern, in order. For a pattern (a trailing *: a prefix, * alone:
// every cookie) each value comes with its cookie's name ("name=value"):
// SSESS1=a and SSESS2=a are two sessions. For a plain name, the value
// alone (the bytes keys had before patterns were keyed, so stored
// entries keep their keys).
func cookieValues(h http.Header, pattern string) []string {
	var out []string
	prefix, isPattern := strings.CutSuffix(pattern, "*")
	for _, line := range h["Cookie"] {
		for part := range strings.SplitSeq(line, ";") {
			// Names trimmed as servers read them ("sid =x" is sid to Go,
			// Node, Python and Tomcat: a review's poisoning).
			n, v, _ := strings.Cut(strings.TrimSpace(part), "=")
			n = strings.TrimSpace(n)
			switch {
			case !isPattern && n == pattern:
				out = append(out, v)
			case isPattern && strings.HasPrefix(n, prefix):
				out = append(out, n+"="+v)
			case cookieNameMatch(pattern, n):
				// Spelled otherwise but read as the name by some
				// origins (cookieNameMatch): keyed with its spelling
				// after a \x01, which no field value holds, apart from
				// the name's own value: "LANG=de" bare was the key of
				// lang=LANG=de too (a review's
				// TestS25FoldedCookieKeyCollidesWithAnExactValue).
				out = append(out, "\x01"+n+"="+v)
			}
		}
	}
	return out
}

// DeviceClass is mobile, tablet or desktop, from a User-Agent, by the
// tokens browsers put there (a crude class, as CDNs' device keys are).
func DeviceClass(ua string) string {
	switch {
	case strings.Contains(ua, "iPad") || strings.Contains(ua, "Tablet") ||
		(strings.Contains(ua, "Android") && !strings.Contains(ua, "Mobile")):
		return "tablet"
	case strings.Contains(ua, "Mobi") || strings.Contains(ua, "iPhone"):
		return "mobile"
	}
	return "desktop"
}

// nameMatch matches a parameter or cookie name against a pattern: exact,
// or a prefix when the pattern ends in *.
func nameMatch(pattern, name string) bool {
	if p, ok := strings.CutSuffix(pattern, "*"); ok {
		return strings.HasPrefix(name, p)
	}
	return pattern == name
}

func anyName(patterns []string, name string) bool {
	for _, p := range patterns {
		if nameMatch(p, name) {
			return true
		}
	}
	return false
}

// globMatch matches path against a glob in which * matches any run of
// bytes (slashes included: "*.css" is every stylesheet) and ? one byte.
// Iterative with one backtrack point, so it is linear in practice and
// never exponential.
func globMatch(glob, path string) bool {
	g, p := 0, 0
	star, mark := -1, 0
	for p < len(path) {
		switch {
		case g < len(glob) && glob[g] == '*':
			// Before the literal case: a '*' in the path is matched by
			// the pattern's star like any byte, never taken as a literal.
			star, mark = g, p
			g++
		case g < len(glob) && (glob[g] == '?' || glob[g] == path[p]):
			g++
			p++
		case star >= 0:
			g = star + 1
			mark++
			p = mark
		default:
			return false
		}
	}
	for g < len(glob) && glob[g] == '*' {
		g++
	}
	return g == len(glob)
}

// Explain describes what r does, one line per field it sets, for `edge
// config explain`.
func (r *Rule) Explain() []string {
	if r == nil {
		return []string{"no rule matches: the origin's headers and the site's defaults decide"}
	}
	var out []string
	add := func(format string, a ...any) { out = append(out, fmt.Sprintf(format, a...)) }
	if r.Bypass {
		add("bypass: the request is forwarded, never answered from or stored in the cache")
	}
	l := r.Lifetime
	for _, f := range []struct {
		name string
		d    time.Duration
		what string
	}{{"default_ttl", l.Default, "lifetime when the origin gives none"}, {"ttl", l.TTL, "lifetime, whatever the origin says"},
		{"min_ttl", l.Min, "shortest lifetime"}, {"max_ttl", l.Max, "longest lifetime"},
		{"stale_while_revalidate", l.SWR, "served stale while revalidated in the background"},
		{"stale_if_error", l.SIE, "served stale when the origin fails"}} {
		if f.d != Unset {
			add("%s %v: %s", f.name, f.d, f.what)
		}
	}
	if l.Sets() {
		add("lifetimes apply to status %v", l.statusesOr())
	}
	if len(r.Query.Ignore) > 0 {
		add("key ignores query parameters %v (they still reach the origin)", r.Query.Ignore)
	}
	if len(r.Query.Allow) > 0 {
		add("key keeps only query parameters %v", r.Query.Allow)
	}
	if r.Query.Sort {
		add("key sorts query parameters")
	}
	if len(r.KeyHeaders) > 0 {
		add("key adds header values %v", r.KeyHeaders)
	}
	if len(r.KeyCookies) > 0 {
		add("key adds cookie values %v", r.KeyCookies)
	}
	if r.KeyDevice {
		add("key adds the device class (mobile, tablet, desktop)")
	}
	if r.StripCookies {
		add("strip_cookies: Cookie removed from the request, Set-Cookie from the response (so it may be stored)")
	}
	for _, e := range []struct {
		name string
		edit HeaderEdit
	}{{"request", r.Request}, {"response", r.Response}} {
		for _, kv := range e.edit.Set {
			if e.name == "request" {
				// A value set on the way to the origin is often its
				// shared secret (an origin-verify field, docs/rules.md),
				// and this description reaches the status page, which
				// needs no token (a review's
				// TestS29AdminRuleHeaderSecretsAreNotPublished).
				add("request field %s set (value not shown)", kv[0])
				continue
			}
			add("%s field %s set to %q", e.name, kv[0], kv[1])
		}
		for _, n := range e.edit.Remove {
			add("%s field %s removed", e.name, n)
		}
	}
	if r.BrowserTTLSet {
		add("browser_ttl %v: clients are sent max-age for %v from when they receive the answer (status %v; not for private, no-store, no-cache or Set-Cookie answers)",
			r.BrowserTTL, r.BrowserTTL, r.Lifetime.statusesOr())
	}
	if r.ClientNoCacheSet {
		s := "client no-cache / max-age=0: " + r.ClientNoCache.String()
		if r.RevalidateInterval > 0 {
			s += fmt.Sprintf(" (one revalidation per %v)", r.RevalidateInterval)
		}
		add("%s", s)
	}
	if len(out) == 0 {
		add("matches, and sets nothing")
	}
	return out
}
