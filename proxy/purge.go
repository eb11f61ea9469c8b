package proxy

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
)

// PurgeRequest names what to purge. Exactly one of URL, Prefix and Tag is set.
type PurgeRequest struct {
	URL    string // an absolute URL, e.g. http://example.com/a?b=1
	Prefix string // a URL prefix (http://host/dir/) or a path prefix (/dir/) matching every host
	Tag    string // a surrogate key from Surrogate-Key or Cache-Tag
	Soft   bool   // mark stale (revalidate on next use, still usable on origin errors) instead of removing
}

// ParsePurgeQuery reads a purge from url=…|prefix=…|tag=…[&soft=1|true],
// the one query syntax of the admin and peer purge endpoints.
func ParsePurgeQuery(q url.Values) PurgeRequest {
	// CheckPurgeQuery refuses a spelling this reads as a hard purge.
	return PurgeRequest{URL: q.Get("url"), Prefix: escapeTarget(q.Get("prefix")), Tag: q.Get("tag"), Soft: yes(q.Get("soft"))}
}

// escapeTarget percent-encodes the bytes a request target cannot hold
// (space, controls, non-ASCII), as keys hold them: a prefix is compared
// with keys as a string, and the admin query decodes %20 to a space, so
// prefix=/docs/a%20b/ matched no page under /docs/a%20b/ (a review's
// TestS30AdminPurgeOfAnEncodedSpaceIsTaken). A '%' is left alone, so a
// prefix already escaped (a peer's purge) is unchanged.
func escapeTarget(s string) string {
	if !strings.ContainsFunc(s, func(r rune) bool { return r <= ' ' || r >= 0x7f }) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if c := s[i]; c <= ' ' || c >= 0x7f {
			fmt.Fprintf(&b, "%%%02X", c)
		} else {
			b.WriteByte(c)
		}
	}
	return b.String()
}

// CheckPurgeQuery refuses an admin purge query (raw, as sent) that
// ParsePurgeQuery (and the admin endpoint's local=) would misread: a
// parameter it does not know or given twice, which it would drop
// (url=/a&url=/b purged /a alone; url=http://shop.test/search?q=x&page=2
// written unencoded purged /search?q=x and dropped page=2), a yes/no it
// does not read as such (soft=yes was a hard purge; local=true went round
// the cluster), a url or prefix with a control byte, or with a '+' as
// sent, which the query decodes to a space where the page has a '+' (a
// %20 is a space meant, and is taken: a review's
// TestS30AdminPurgeOfAnEncodedSpaceIsTaken). Each answered 200 having
// purged something other than what was asked.
func CheckPurgeQuery(raw string) (url.Values, error) {
	q, err := url.ParseQuery(raw)
	if err != nil {
		return nil, fmt.Errorf("purge: the query does not parse: %w", err)
	}
	for name, vs := range q {
		switch name {
		case "url", "prefix", "tag", "soft", "local":
		default:
			return nil, fmt.Errorf("purge: unknown parameter %q (a url with a query must be percent-encoded: url=%s)", name, url.QueryEscape("http://host/path?a=1&b=2"))
		}
		if len(vs) > 1 {
			return nil, fmt.Errorf("purge: %s given %d times: one purge names one url, prefix or tag", name, len(vs))
		}
	}
	for _, name := range [...]string{"soft", "local"} {
		switch v := strings.ToLower(q.Get(name)); v {
		case "", "0", "1", "true", "false":
		default:
			return nil, fmt.Errorf("purge: %s=%q: give 1 or true for yes, 0 or false (or nothing) for no", name, q.Get(name))
		}
	}
	for part := range strings.SplitSeq(raw, "&") {
		name, value, _ := strings.Cut(part, "=")
		if (name == "url" || name == "prefix") && strings.Contains(value, "+") {
			return nil, fmt.Errorf("purge: %s has a '+', which the query reads as a space: percent-encode the value (%%2B for a '+', %%20 for a space)", name)
		}
	}
	for _, name := range [...]string{"url", "prefix"} {
		if v := q.Get(name); strings.ContainsFunc(v, func(r rune) bool { return r < ' ' || r == 0x7f }) {
			return nil, fmt.Errorf("purge: %s=%q has a control character, which no request names", name, v)
		}
	}
	return q, nil
}

// PurgeLocal reports whether an admin purge asks for this node alone
// (local=1 or true).
func PurgeLocal(q url.Values) bool { return yes(q.Get("local")) }

// yes reads a yes/no parameter CheckPurgeQuery allowed.
func yes(v string) bool { return v == "1" || strings.EqualFold(v, "true") }

// Query encodes p in the syntax ParsePurgeQuery reads.
func (p PurgeRequest) Query() string {
	q := url.Values{}
	for k, v := range map[string]string{"url": p.URL, "prefix": p.Prefix, "tag": p.Tag} {
		if v != "" {
			q.Set(k, v)
		}
	}
	if p.Soft {
		q.Set("soft", "1")
	}
	return q.Encode()
}

// Validate checks that exactly one selector is set.
func (p PurgeRequest) Validate() error {
	n := 0
	for _, s := range []string{p.URL, p.Prefix, p.Tag} {
		if s != "" {
			n++
		}
	}
	if n != 1 {
		return fmt.Errorf("purge: give exactly one of url, prefix and tag")
	}
	if p.URL != "" {
		u, err := url.Parse(p.URL)
		if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
			return fmt.Errorf("purge: url %q is not an absolute http(s) URL", p.URL)
		}
		if _, ok := CanonicalHost(u.Host); !ok {
			return fmt.Errorf("purge: url %q: %q is not a host", p.URL, u.Host)
		}
	}
	if p.Prefix != "" && !strings.HasPrefix(p.Prefix, "/") && !strings.Contains(p.Prefix, "://") {
		// Neither a path nor a URL: it names no key, and "purged 0" read
		// as "nothing cached" (an operator's walk-through typed img/).
		return fmt.Errorf("purge: prefix %q is neither a path (/img/) nor an absolute URL prefix (https://host/img/)", p.Prefix)
	}
	if _, rest, ok := strings.Cut(p.Prefix, "://"); ok {
		host, _, _ := strings.Cut(rest, "/")
		if _, ok := CanonicalHost(host); !ok && strings.Contains(rest, "/") {
			return fmt.Errorf("purge: prefix %q: %q is not a host", p.Prefix, host)
		}
	}
	return nil
}

// Purge removes or soft-purges what p names and returns how many stored
// responses it touched.
func (h *Handler) Purge(p PurgeRequest) (int, error) {
	if err := p.Validate(); err != nil {
		return 0, err
	}
	// Fills under way will not store (nor be joined with) what they
	// fetched before the purge, if it names their page.
	var n uint64
	if p.Tag != "" {
		n = h.purges.begin(nil, p.Tag)
	} else {
		n = h.purges.begin(h.PurgeScope(p), "")
	}
	failedBefore := h.store.diskRemoveFailures()
	var keys []string
	switch {
	case p.URL != "":
		u, _ := url.Parse(p.URL)
		keys = []string{h.URLKey(u)}
	case p.Prefix != "":
		if strings.HasPrefix(p.Prefix, "/") {
			keys = h.store.Keys(func(k string) bool { return strings.HasPrefix(pathOfKey(k), p.Prefix) })
		} else {
			keys = h.store.KeysWithPrefix(h.prefixKey(p.Prefix))
		}
	default:
		keys = h.store.KeysWithTag(p.Tag)
		h.purges.found(n, keys)
	}
	count := 0
	kind := "hard"
	if p.Soft {
		kind = "soft"
	}
	for _, k := range keys {
		if p.Soft {
			count += h.markStale(k)
		} else {
			count += h.removeKey(k)
		}
	}
	h.metrics.Purged.WithLabelValues(kind).Add(float64(count))
	if failed := h.store.diskRemoveFailures() - failedBefore; failed > 0 {
		return count, fmt.Errorf("%w: the disk tier could not remove or mark %d file(s) (%s); nothing purged is served now, but a file left may come back at the next start: purge again once the disk is writable",
			ErrPurgeIncomplete, failed, h.store.Disk().Stats().LastError)
	}
	return count, nil
}

// ErrPurgeIncomplete is a purge that took effect in this process but left
// files on a failing disk (see Handler.Purge): the caller reports it, and
// still asks the peers.
var ErrPurgeIncomplete = errors.New("proxy: purge incomplete")

// PurgeKey is the key a URL purge names (with its slices' keys, which
// extend it after a NUL); "" for any other purge or an invalid one.
func (h *Handler) PurgeKey(p PurgeRequest) string {
	if p.URL == "" || p.Validate() != nil {
		return ""
	}
	u, _ := url.Parse(p.URL)
	return h.URLKey(u)
}

// PurgeScope returns a test of whether p names the page under a cache
// key whose answer has header hdr: a URL its key and its slices' keys,
// a prefix the keys under it, a tag the answers that carry it in
// Surrogate-Key or Cache-Tag (as the stored entries Purge looks at); nil
// when p is not valid. The cluster holds back peers' copies of what it
// names while the purge goes round (cluster/purgehold.go).
func (h *Handler) PurgeScope(p PurgeRequest) func(key string, hdr http.Header) bool {
	if p.Validate() != nil {
		return nil
	}
	switch {
	case p.URL != "":
		k := h.PurgeKey(p)
		return func(key string, _ http.Header) bool { return key == k || strings.HasPrefix(key, k+"\x00") }
	case strings.HasPrefix(p.Prefix, "/"):
		return func(key string, _ http.Header) bool { return strings.HasPrefix(pathOfKey(key), p.Prefix) }
	case p.Prefix != "":
		pk := h.prefixKey(p.Prefix)
		return func(key string, _ http.Header) bool { return strings.HasPrefix(key, pk) }
	}
	return func(_ string, hdr http.Header) bool { return hasTag(hdr, p.Tag) }
}

// hasTag reports whether a response's Surrogate-Key or Cache-Tag carries
// tag, as an entry's surrogates are read (finishEntry).
func hasTag(hdr http.Header, tag string) bool {
	for _, name := range [...]string{"Surrogate-Key", "Cache-Tag"} {
		for _, v := range hdr.Values(name) {
			if slices.Contains(splitTags(v), tag) {
				return true
			}
		}
	}
	return false
}

// keyQuery returns a query as the cache key holds it (sorted when the
// operator opted in to cache.sort_query).
// SortedQuery is q with its parameters sorted, as cache.sort_query keys
// it.
func SortedQuery(q string) string {
	var b strings.Builder
	writeSortedQuery(&b, q)
	return b.String()
}

func (h *Handler) keyQuery(q string) string {
	if !h.cfg.SortQuery || q == "" {
		return q
	}
	var b strings.Builder
	writeSortedQuery(&b, q)
	return b.String()
}

// pathOfKey returns the path and query of a URL cache key.
func pathOfKey(k string) string {
	i := strings.Index(k, "://")
	if i < 0 {
		return k
	}
	rest := k[i+3:]
	if j := strings.IndexByte(rest, '/'); j >= 0 {
		return rest[j:]
	}
	return "/"
}

// DropUnreachable removes the stored responses whose key names a site the
// configuration in force no longer gives their host (a reload or a
// restart removed or renamed the site, or moved the host to another). No
// request reaches them, and no purge either: a purge names a URL's key
// under the host's site of today. Kept, a later reload that gives the
// host its old site back served what had been purged in between (a
// review: a purge after a rename, undone by rolling the rename back). It
// returns how many went.
func (h *Handler) DropUnreachable() int {
	if h.cfg.SiteOf == nil {
		return 0
	}
	// The table of this reload, not whichever is in force when a fill
	// asks: after a rollback the live one gives the host its old site
	// again, and a fill begun before the move, answered after the
	// rollback, stored what a purge made in between had named (a
	// review's TestS57PurgeBetweenAMoveAndItsRollbackIsLostByAFillInFlight;
	// and a site removed and re-added on another origin kept its old
	// origin's fill).
	siteOf := h.cfg.SiteOf
	if h.cfg.SiteTable != nil {
		siteOf = h.cfg.SiteTable()
	}
	unreachable := func(k string) bool {
		site, host, ok := siteAndHostOfKey(k)
		return ok && siteOf(host) != site
	}
	// As a purge: a fill under way for such a key (asked under the old
	// table, answered after this) neither stores nor is joined (a
	// review's TestS8DropUnreachableRacesAFillInFlight).
	h.purges.begin(func(k string, _ http.Header) bool { return unreachable(k) }, "")
	keys := h.store.Keys(unreachable)
	n := 0
	for _, k := range keys {
		n += h.removeKey(k)
	}
	h.metrics.Purged.WithLabelValues("unreachable").Add(float64(n))
	return n
}

// KeySite is the name of the site a cache key was made under ("" for the
// one-site shortcut).
func KeySite(key string) string {
	site, _, _ := siteAndHostOfKey(key)
	return site
}

// siteAndHostOfKey splits a cache key into its site's name ("" for none)
// and its host. Site names hold no space, ':' or '/', so a space before
// the scheme's "://" ends the name.
func siteAndHostOfKey(k string) (site, host string, ok bool) {
	i := strings.Index(k, "://")
	if i < 0 {
		return "", "", false
	}
	if sp := strings.IndexByte(k[:i], ' '); sp >= 0 {
		site = k[:sp]
	}
	host = k[i+3:]
	if j := strings.IndexAny(host, "/?\x00"); j >= 0 {
		host = host[:j]
	}
	return site, host, true
}

// prefixKey turns an absolute URL prefix into a key prefix: normalised,
// with its host's site in front.
func (h *Handler) prefixKey(p string) string {
	n := normalizePrefix(p)
	scheme, rest, ok := strings.Cut(n, "://")
	if !ok {
		return n
	}
	// The key's scheme follows cache.key_scheme: by default an https
	// prefix names the shared (http) entries.
	n = KeyScheme(scheme, h.cfg.KeyScheme) + "://" + rest
	if u, err := url.Parse(n); err == nil && u.Host != "" {
		return h.sitePrefix(u.Host) + n
	}
	return n
}

// normalizePrefix lower-cases the scheme and host of an absolute URL prefix,
// as CacheKey does, and leaves the rest as given.
func normalizePrefix(p string) string {
	i := strings.Index(p, "://")
	if i < 0 {
		return p
	}
	end := len(p)
	if j := strings.IndexByte(p[i+3:], '/'); j >= 0 {
		end = i + 3 + j
	}
	host := p[i+3 : end]
	if c, ok := CanonicalHost(host); ok {
		host = c // the spelling keys hold: no port, no trailing dot
	}
	return strings.ToLower(p[:i]) + "://" + strings.ToLower(host) + p[end:]
}
