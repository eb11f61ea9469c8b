package proxy

import (
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"unsafe"

	"github.com/edgecache/edge/rules"
	"golang.org/x/net/http/httpguts"
)

// CacheKeyVersion names how this release maps requests to cache keys
// (CacheKey, the handler's site prefix and key rules, VaryKey). The disk
// tier stores it with every record and removes, at start, the records of
// any other version: an entry stored under an older mapping may sit under
// a key the new one gives to requests it was never meant for (the Vary
// list reading of 2026-12-06 keyed "Origin: https://a.example," with
// "https://a.example", so a poisoned variant stored before the fix would
// have been served after it). TestCacheKeyVersionPinsTheKeys fails when
// the mapping changes and the version does not; "" was every release
// before versions. "3" (2026-12-06, evening): cookie names keyed as
// origins fold them (LANG=de had keyed as no cookie, so a default page a
// LANG=de visitor filled would have been kept) and request field values
// trimmed before the keyed fields are hashed. "4" (2026-12-06, night):
// the values of the fields a Vary names that are no list (Cookie,
// Authorization, Origin, an origin's own) are keyed by their digest
// (linesDigest), and stored copies no longer hold fields a
// qualified no-cache or private names; records "3" stored such a copy
// with the first user's fields, safe only while every use was
// revalidated (a review's
// TestS29NamedDiskRecordOfAnEarlierVersionIsServedFreshWithItsField).
const CacheKeyVersion = "4"

// DiskKeyScheme names the keys a disk tier holds under this release and
// the key settings that change only with a restart, which keeps the
// disk: cache.key_scheme (with it off http and https share a key, and an
// http answer stored apart while it was on, an origin's 301 to https,
// was served from disk to https users after the change: a redirect to
// the page itself; and the https keys no request could reach any more
// escaped the URL purges made meanwhile, to come back when it was turned
// on again: a review's proxy/review_s55_keyscheme_test.go) and
// cache.sort_query (the same for sorted and unsorted queries). The tier
// removes at start the records of any other scheme, as of another
// version. The defaults keep CacheKeyVersion alone, so a disk written
// before the settings counted is kept.
func DiskKeyScheme(keyScheme, sortQuery bool) string {
	s := CacheKeyVersion
	if keyScheme {
		s += "+scheme"
	}
	if sortQuery {
		s += "+sorted"
	}
	return s
}

// CacheKey builds the URL part of a cache key: scheme, the canonical host
// (CanonicalHost: lower case, no port, no trailing dot), path and the query exactly as it will be forwarded
// (the origin may answer ?id=a&id=b and ?id=b&id=a differently, so they
// must not share an entry; sorting is the per-deployment opt-in
// cache.sort_query, which rewrites the forwarded query too). The port a
// node listens on does not split the cache: every node of a cluster must
// compute the same key. GET and HEAD share keys. It allocates only the
// returned string.
func CacheKey(scheme, host, path, rawQuery string) string {
	return keyString(appendCacheKey(make([]byte, 0, keyCap("", host, path, rawQuery)), scheme, host, path, rawQuery))
}

// appendCacheKey appends CacheKey's bytes to dst.
func appendCacheKey(dst []byte, scheme, host, path, rawQuery string) []byte {
	if c, _, ok := canonicalHost(host); ok {
		host = c // lower-cased below, as it is copied
	} else {
		// Not a host: the front refused it (400) and purge refuses it, so
		// only a direct caller gets here; keep its bytes apart.
		host = stripPort(host)
	}
	if path == "" {
		path = "/"
	}
	dst = append(dst, scheme...)
	dst = append(dst, "://"...)
	for i := 0; i < len(host); i++ {
		c := host[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		dst = append(dst, c)
	}
	dst = append(dst, path...)
	if rawQuery != "" {
		dst = append(dst, '?')
		dst = append(dst, rawQuery...)
	}
	return dst
}

// stripPort removes a :port suffix from host (IPv6 literals keep their brackets).
func stripPort(host string) string {
	i := strings.LastIndexByte(host, ':')
	if i < 0 || strings.IndexByte(host[i:], ']') >= 0 {
		return host
	}
	for j := i + 1; j < len(host); j++ {
		if host[j] < '0' || host[j] > '9' {
			return host
		}
	}
	return host[:i]
}

// writeSortedQuery writes the &-separated parameters of a raw query in
// sorted order, keeping each parameter's bytes as sent (no decoding, so
// distinct encodings stay distinct).
func writeSortedQuery(b *strings.Builder, q string) {
	var stack [32]string
	parts := stack[:0]
	sorted := true
	for len(q) > 0 {
		var p string
		if i := strings.IndexByte(q, '&'); i >= 0 {
			p, q = q[:i], q[i+1:]
			if q == "" {
				parts = append(parts, p)
				p = ""
			}
		} else {
			p, q = q, ""
		}
		if len(parts) > 0 && p < parts[len(parts)-1] {
			sorted = false
		}
		parts = append(parts, p)
	}
	if !sorted {
		slices.Sort(parts)
	}
	for i, p := range parts {
		if i > 0 {
			b.WriteByte('&')
		}
		b.WriteString(p)
	}
}

// KeyScheme is the scheme part of a cache key for a request made over
// scheme. By default (keep false) http and https share entries, as CDNs do:
// the same URL over either is the same page, and an origin that answers
// them differently can say so with Vary: X-Forwarded-Proto (the edge sets
// that field, so such a Vary is keyed on the scheme the client used).
// cache.key_scheme keeps the client's scheme in the key.
func KeyScheme(scheme string, keep bool) string {
	if keep && strings.EqualFold(scheme, "https") {
		return "https"
	}
	return "http"
}

// requestKey builds the cache key of r. Requests reach us in origin form, so
// the scheme comes from whether the connection was TLS.
func (h *Handler) requestKey(r *http.Request) string {
	if g := rulingOf(r); g != nil {
		// The key rule rulingOf found for this path and query: a second
		// look-up would read the path in every case again.
		return h.keyUnder(inboundOf(r).Site, g.key, h.scheme(r), r.Host, r.URL.EscapedPath(), r.URL.RawQuery)
	}
	return h.requestKeyFor(r, r.URL.EscapedPath(), r.URL.RawQuery)
}

// requestKeyFor is the key of another path and query on r's host and
// site (invalidation of Location URIs).
func (h *Handler) requestKeyFor(r *http.Request, escapedPath, rawQuery string) string {
	return h.keyOn(inboundOf(r).Site, h.scheme(r), r.Host, escapedPath, rawQuery)
}

// keyOn is key for a request whose site the front resolved (site nil: none
// was, look the host up).
func (h *Handler) keyOn(site *Site, scheme, host, path, rawQuery string) string {
	if site == nil {
		return h.key(scheme, host, path, rawQuery)
	}
	// Resolved once at the front: no second look-up of the Host.
	var rule *rules.Rule
	if site.Rules != nil {
		rule = site.Rules.ForKey(path, rawQuery)
	}
	return h.keyUnder(site, rule, scheme, host, path, rawQuery)
}

// keyUnder is keyOn with the site's key rule already found (nil: none).
func (h *Handler) keyUnder(site *Site, rule *rules.Rule, scheme, host, path, rawQuery string) string {
	return keyString(h.appendKeyUnder(make([]byte, 0, keyCap(site.KeyPrefix, host, path, rawQuery)), site, rule, scheme, host, path, rawQuery))
}

// keyCap is a key's likely length, so that building it allocates once.
func keyCap(prefix, host, path, rawQuery string) int {
	return len(prefix) + len("https://") + len(host) + len(path) + 1 + len(rawQuery)
}

// keyString is b as a string without a copy: b must never be written again.
func keyString(b []byte) string { return unsafe.String(unsafe.SliceData(b), len(b)) }

// appendKeyUnder appends keyUnder's bytes to dst (the hit path builds its
// look-up key in a buffer it reuses).
func (h *Handler) appendKeyUnder(dst []byte, site *Site, rule *rules.Rule, scheme, host, path, rawQuery string) []byte {
	dst = append(dst, site.KeyPrefix...)
	return appendCacheKey(dst, KeyScheme(scheme, h.cfg.KeyScheme), host, path, rule.KeyQuery(rawQuery))
}

// scheme is the scheme the client used: what the request's rule sets
// X-Forwarded-Proto to (the operator's word: behind a TLS terminator that
// adds no fields, such a rule is how a force-https origin learns it), or
// what a trusted party (an authenticated peer relaying an ingress's
// request, a proxy in forwarding.trusted_proxies) says in it; when that
// is http or https. Otherwise https on a TLS connection, http on a plain
// one. Either word comes before the connection's TLS: a balancer relays
// plain-http visitors over TLS too, and the origin is told that word
// (forwardHeader), so keyed by the connection a force-https origin's
// redirect for such a visitor was judged an https answer and stored for
// every https visitor of the page: a redirect to itself (a review's
// TestS62TrustedProxyOverTLSForwardsOneSchemeAndKeysAnother).
func (h *Handler) scheme(r *http.Request) string {
	proto, ok := ruleProto(inboundOf(r).ruling.requestRule())
	if v := r.Header["X-Forwarded-Proto"]; !ok && len(v) > 0 && h.trusted(r) {
		proto = v[0]
	}
	return schemeOf(clientTLS(r), proto)
}

// ruleProto is the X-Forwarded-Proto a request rule sets, if it sets one.
func ruleProto(rule *rules.Rule) (string, bool) {
	if rule == nil {
		return "", false
	}
	return rule.Request.Value("X-Forwarded-Proto")
}

// schemeOf is the rule scheme and the hit path (AppendHit) share: the
// word of a rule or a trusted party when it is http or https, else the
// connection's.
func schemeOf(tls bool, word string) string {
	switch p := strings.TrimSpace(word); {
	case strings.EqualFold(p, "https"):
		return "https"
	case strings.EqualFold(p, "http"):
		return "http"
	case tls:
		return "https"
	}
	return "http"
}

// redirectsToOtherScheme reports whether e, fetched for r, is a redirect
// to r's host on the other scheme (an origin forcing https answers plain
// requests so, by X-Forwarded-Proto: Rails' force_ssl, Django's
// SECURE_SSL_REDIRECT, WordPress) while the key leaves the scheme out
// (cache.key_scheme false) and the response does not vary on it. Stored,
// it would answer the https users of the page with a redirect to the page
// itself: a redirect loop for everyone, from one plain-http visitor.
func (h *Handler) redirectsToOtherScheme(e *Entry, r *http.Request) bool {
	if h.cfg.KeyScheme || e.Status < 300 || e.Status > 399 {
		return false
	}
	loc, err := url.Parse(e.Header.Get("Location"))
	if err != nil || loc.Scheme == "" || strings.EqualFold(loc.Scheme, h.scheme(r)) {
		return false
	}
	for _, name := range e.VaryNames {
		if strings.EqualFold(name, "X-Forwarded-Proto") || strings.EqualFold(name, "Forwarded") {
			return false // the variant is keyed on the scheme
		}
	}
	to, ok := CanonicalHost(loc.Host)
	from, _ := CanonicalHost(r.Host)
	return ok && to == from
}

// key is CacheKey with the operator's scheme rule and, for a named site,
// the site's name in front ("shop http://shop.test/a"): entries of
// different sites never mix, even when a reload moves a host from one
// site (and origin pool) to another.
func (h *Handler) key(scheme, host, path, rawQuery string) string {
	return keyString(h.appendKey(make([]byte, 0, keyCap("site ", host, path, rawQuery)), scheme, host, path, rawQuery))
}

// appendKey appends key's bytes to dst.
func (h *Handler) appendKey(dst []byte, scheme, host, path, rawQuery string) []byte {
	return appendCacheKey(h.appendSitePrefix(dst, host), KeyScheme(scheme, h.cfg.KeyScheme), host, path, rawQuery)
}

// appendSitePrefix appends "name " for a host of a named site, else nothing.
func (h *Handler) appendSitePrefix(dst []byte, host string) []byte {
	if h.cfg.SiteOf != nil {
		if name := h.cfg.SiteOf(host); name != "" {
			dst = append(append(dst, name...), ' ')
		}
	}
	return dst
}

// sitePrefix is appendSitePrefix as a string.
func (h *Handler) sitePrefix(host string) string { return string(h.appendSitePrefix(nil, host)) }

// URLKey is the cache key of an absolute URL (purge, the route explorer):
// the key a request for it gets. So the host in its canonical spelling
// (the front rewrites a request's Host to it), the query sorted where
// forwarding sorts it, and the site's key rule applied (ignored or allowed
// parameters, sorted ones): before, a purge of the URL a visitor saw, with
// its utm_ parameters, keyed them in and removed nothing.
func (h *Handler) URLKey(u *url.URL) string {
	host := u.Host
	if c, ok := CanonicalHost(host); ok {
		host = c
	}
	query := h.keyQuery(u.RawQuery)
	path := u.EscapedPath()
	if path == "" {
		path = "/" // a request's target always has one; the rules match it (a review: "http://shop.test?id=7" missed the root page's rule)
	}
	if h.cfg.SiteFor != nil {
		if site := h.cfg.SiteFor(host); site != nil {
			return h.keyOn(site, u.Scheme, host, path, query)
		}
	}
	return h.key(u.Scheme, host, path, query)
}

// VaryNames returns the lower-case, sorted, de-duplicated field names listed
// by the Vary fields of h. star reports Vary: *, or an element that is no
// field name ("Accept-Encoding Cookie", `"Cookie"`, "Cookie;q=1"): such
// a name selects by nothing a request can carry, so kept, every user got
// one variant of a page the origin varied (a review's
// TestS61MalformedVaryDoesNotMergeUsers); read as *, it is never stored,
// as Varnish passes an illegal Vary.
func VaryNames(h http.Header) (names []string, star bool) {
	for _, v := range h.Values("Vary") {
		for name := range strings.SplitSeq(v, ",") {
			name = strings.ToLower(strings.TrimSpace(name))
			if name == "" {
				continue
			}
			if name == "*" || !httpguts.ValidHeaderFieldName(name) {
				star = true
				continue
			}
			names = append(names, name)
		}
	}
	slices.Sort(names)
	return slices.Compact(names), star
}

// VaryKey normalises the request header values selected by names into one
// string. An absent field differs from an empty one. Only the fields whose
// grammar is a list (listFields) are read as lists: their field lines are
// joined with commas, empty elements dropped and whitespace around commas
// removed, so "gzip, br", "gzip,br" and two lines "gzip" and "br" select
// the same variant. Any other field is compared line by line as sent,
// trimmed only at its ends: RFC 9111 §4.1 allows only the normalisation
// the field's own grammar allows, and a field that is no list (Origin,
// Cookie, User-Agent, an origin's own) may mean something else with a
// trailing comma. Read as a list, "Origin: https://a.example," selected
// the variant of "https://a.example": an answer the origin gave the one
// was stored and collapsed for the other (a review's poisoning).
func VaryKey(names []string, h http.Header) string {
	if len(names) == 0 {
		return ""
	}
	var b strings.Builder
	for i, name := range names {
		if i > 0 {
			b.WriteByte(0)
		}
		b.WriteString(name)
		vs := h.Values(name)
		if len(vs) == 0 {
			b.WriteString("\x01")
			continue
		}
		b.WriteByte('=')
		if !listFields[name] {
			b.WriteString(linesDigest(vs))
			continue
		}
		first := true
		for _, v := range vs {
			for part := range listElements(v) {
				if !first {
					// Not a comma: a quoted element may hold one, and
					// `a;x="1,2"` must not read as the two lines `a;x="1`
					// and `2"` (a review).
					b.WriteByte('\n')
				}
				first = false
				b.WriteString(part)
			}
		}
	}
	return b.String()
}

// linesDigest stands for the lines of a field that is no list in a
// variant key: a SHA-256 of them as sent, trimmed only at their ends, in
// order, so equal lines select the same variant and nothing else does.
// A variant key is written into the disk tier's records and snapshot,
// and the values themselves lay there in clear: a session cookie, a
// bearer token, an API key in a field of the origin's own (a review's
// TestS29DiskVaryCredentialsReachTheDiskInClear and
// TestS30AdminVaryOnAnAPIKeyFieldStaysOffDisk). The list fields
// (Accept*) hold preferences, not secrets, and stay readable.
func linesDigest(vs []string) string {
	sum := sha256.New()
	for _, v := range vs {
		sum.Write([]byte(strings.Trim(v, " \t")))
		sum.Write([]byte{'\n'}) // never inside a field value
	}
	return "#" + hex.EncodeToString(sum.Sum(nil)[:16])
}

// listFields are the request fields Vary names whose grammar is a
// comma-separated list (RFC 9110 §12.5), in the lower case Vary's names
// are kept in.
var listFields = map[string]bool{
	"accept":          true,
	"accept-charset":  true,
	"accept-encoding": true,
	"accept-language": true,
}

// listElements yields v's list elements, trimmed, skipping empty ones;
// a comma inside a quoted string (a parameter's value) splits nothing.
func listElements(v string) func(yield func(string) bool) {
	return func(yield func(string) bool) {
		start, quoted := 0, false
		for i := 0; i <= len(v); i++ {
			if i < len(v) {
				switch c := v[i]; {
				case c == '\\' && quoted:
					if i+1 < len(v) {
						i++ // a quoted pair: the next byte is literal
					}
					continue
				case c == '"':
					quoted = !quoted
					continue
				case c != ',' || quoted:
					continue
				}
			}
			if part := strings.Trim(v[start:min(i, len(v))], " \t"); part != "" {
				if !yield(part) {
					return
				}
			}
			start = i + 1
		}
	}
}
