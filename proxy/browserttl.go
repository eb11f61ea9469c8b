package proxy

import (
	"net/http"
	"strconv"
	"strings"
	"time"
)

// This file is the rules' browser_ttl: how long a client (a browser, or
// any cache after the edge) may keep an answer, set by the operator
// apart from the edge's own lifetime, as a CDN's "browser cache TTL" is.
// Only the Cache-Control a client is sent changes; the stored entry, the
// edge's freshness and what peers are sent stay the origin's.

// browserTTLHook rewrites the Cache-Control of a client's answer as the
// site's rules say (browser_ttl), as its header is written (a
// headerHook): one place that every answer ServeHTTP writes passes, from
// the store, the origin or a peer, whole, ranged or a 304. The hit path
// leaves such answers to ServeHTTP (AppendHit). personal: the request
// carried a cookie or credentials, so its answer may be its own.
func (h *Handler) browserTTLHook(g *ruling, personal bool) func(http.Header, int) {
	return func(hdr http.Header, code int) {
		status := code
		if code == http.StatusNotModified || code == http.StatusPartialContent {
			// A 304 carries the Cache-Control its 200 would (RFC 9110
			// §15.4.5), and a 206 is a part of that 200.
			status = http.StatusOK
		}
		ttl, ok := g.browserTTL(status)
		if !ok {
			return
		}
		outcome := browserTTLKept
		if (!personal || h.sharedFresh(hdr, status)) && browserCacheControl(hdr, ttl) {
			outcome = browserTTLRewritten
		}
		h.metrics.browserTTL[outcome].Inc()
	}
}

// Outcomes of edge_browser_ttl_answers_total.
const (
	browserTTLRewritten = "rewritten"
	browserTTLKept      = "kept"
)

// browserTTL is the browser_ttl of the rule for an answer of status, and
// whether one is set.
func (g *ruling) browserTTL(status int) (time.Duration, bool) {
	return g.response(status).BrowserTTLFor(status)
}

// browserCacheControl gives hdr, a client's answer, a Cache-Control whose
// max-age lets the client keep it ttl from when it arrives: ttl plus the
// answer's Age, which a client subtracts (RFC 9111 §4.2.3; without it an
// answer the edge had held for an hour would reach a browser already
// stale under a browser_ttl of ten minutes). Expires goes (max-age
// overrides it, and a stale date beside it only misleads an HTTP/1.0
// cache). The other directives stay, s-maxage included (it is for shared
// caches after the edge, which the operator did not ask about).
//
// An answer that is not for sharing or keeping is left as the origin made
// it: private, no-store or no-cache, and one that sets a cookie (and the
// answer to a request with a cookie or credentials, unless sharedFresh).
// A rule lengthens how long a browser keeps a page, never makes a
// personal answer cacheable. A malformed field is left alone too.
func browserCacheControl(hdr http.Header, ttl time.Duration) bool {
	if len(hdr["Set-Cookie"]) > 0 {
		return false
	}
	var kept []string
	for _, line := range hdr["Cache-Control"] {
		for rest := line; strings.TrimLeft(rest, " \t,") != ""; {
			var name, value string
			var hasValue bool
			name, value, hasValue, rest = nextDirective(rest)
			switch strings.ToLower(name) {
			case "private", "no-store", "no-cache":
				return false
			case "max-age":
				continue
			case "":
				return false // "=x", a value without a name
			}
			if !hasValue {
				kept = append(kept, name)
				continue
			}
			if value == "\x00" {
				return false // an unterminated or trailing-junk quoted value
			}
			if strings.HasPrefix(value, `"`) {
				value = quoteDirective(value[1 : len(value)-1])
			}
			kept = append(kept, name+"="+value)
		}
	}
	age := int64(0)
	if v := hdr["Age"]; len(v) > 0 {
		if n, err := strconv.ParseInt(v[0], 10, 64); err == nil && n > 0 {
			age = min(n, maxDelta)
		}
	}
	// RFC 9111 §1.2.2: a delta past 2^31 is sent as 2^31 (an Age from
	// upstream near the int64 limit wrapped the sum negative: a review's
	// TestS56BrowserTTLMaxAgeDoesNotOverflowOnAHugeAge).
	kept = append(kept, "max-age="+strconv.FormatInt(min(int64(ttl/time.Second)+age, maxDelta), 10))
	hdr["Cache-Control"] = []string{strings.Join(kept, ", ")}
	delete(hdr, "Expires")
	return true
}

// maxDelta is the largest delta-seconds a cache sends (RFC 9111 §1.2.2).
const maxDelta = 1 << 31

// sharedFresh reports whether the answer of status to a request with a
// cookie or credentials may be given a browser_ttl: this cache shared it
// (served it from its store, or stored it: sharedHere; it shares such an
// answer only when the origin said it may, never on heuristic
// freshness), and the origin's Cache-Control or Expires, read as this
// cache reads them for itself (Policy.freshness), gives it a lifetime
// above zero. An explicit max-age on a personal answer the edge sent on
// unshared told the caches after it that it was everyone's, and
// "max-age=0, must-revalidate" to credentials, which the edge answers only
// after the origin's check with each requester's own, became ten minutes
// of reuse without one, however the zero was spelt (reviews'
// proxy/review_s56_personal_test.go, review_s58_personal_test.go).
//
// A fresh hit is the shared copy whatever gave it its lifetime (a rule's
// default_ttl for an origin that says nothing: the copy everyone is
// served, a review's TestS60BrowserTTLSkipsACookieHoldersHitOfADefaultTTLPage).
func (h *Handler) sharedFresh(hdr http.Header, status int) bool {
	hit, stored := sharedHere(hdr)
	if hit {
		return true
	}
	if !stored {
		return false
	}
	date, ok := parseHTTPDate(hdr.Get("Date"))
	if !ok {
		date = h.now()
	}
	life, heuristic := h.policy().freshness(status, hdr, ParseCacheControl(hdr, "Cache-Control"), false, date)
	return !heuristic && life > 0
}

// sharedHere reports what this cache's own Cache-Status member says of
// the answer: it came from the store (hit), or was stored: one it shares.
func sharedHere(hdr http.Header) (hit, stored bool) {
	params, ok := lastMemberParams(hdr)
	if !ok {
		return false, false
	}
	for i, p := range strings.Split(params, ";") {
		switch p = strings.TrimSpace(p); {
		case i == 0 && p == "hit":
			hit = true
		case p == "stored":
			stored = true
		}
	}
	return hit, stored
}

// quoteDirective makes a quoted-string of s (nextDirective gives the
// value unescaped).
func quoteDirective(s string) string {
	if strings.ContainsAny(s, `"\`) {
		s = strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(s)
	}
	return `"` + s + `"`
}
