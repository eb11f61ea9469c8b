package proxy

import (
	"net/http"
	"strings"
	"time"

	"github.com/edgecache/edge/rules"
)

// Policy holds the operator's caching choices that RFC 9111 leaves open.
type Policy struct {
	// HeuristicFraction of (Date − Last-Modified) used as heuristic lifetime.
	HeuristicFraction float64
	// HeuristicMax caps the heuristic lifetime.
	HeuristicMax time.Duration
	// StaleIfErrorDefault is how long past expiry a response without its own
	// stale-if-error may be served when the origin fails.
	StaleIfErrorDefault time.Duration
	// StaleCeiling caps every stale-while-revalidate and stale-if-error window.
	StaleCeiling time.Duration
	// StoreSetCookie stores responses carrying Set-Cookie, with the
	// Set-Cookie field removed from the stored copy.
	StoreSetCookie bool
	// TargetedFields are the targeted cache-control fields (RFC 9213) this
	// cache obeys, most specific first. Surrogate-Control (W3C Edge
	// Architecture) may be listed; its directives may carry a ";device"
	// target, and only those without one or aimed at SurrogateDevice count.
	TargetedFields []string
	// ClientNoCache is how a client's no-cache, max-age or min-fresh is
	// treated where no rule says (Honour: as RFC 9111 writes it);
	// RevalidateInterval is Coalesce's interval.
	ClientNoCache      rules.ClientNoCache
	RevalidateInterval time.Duration
	// SurrogateDevice is this cache's device token in Surrogate-Capability
	// and Surrogate-Control targeting. All nodes of a cluster share it.
	SurrogateDevice string
}

// heuristicStatus are the status codes RFC 9110 §15.1 defines as
// heuristically cacheable.
func heuristicStatus(code int) bool {
	switch code {
	case 200, 203, 204, 206, 300, 301, 308, 404, 405, 410, 414, 501:
		return true
	}
	return false
}

// knownStatus are the status codes whose caching semantics this cache
// implements in full, for must-understand.
func knownStatus(code int) bool {
	switch code {
	case 200, 203, 204, 300, 301, 302, 303, 307, 308, 404, 405, 410, 414, 501:
		return true
	}
	return false
}

// understoodStatus says whether we know enough about a status to store it.
// 206 is never stored as a full object and 304 only updates, never replaces.
func understoodStatus(code int) bool {
	switch {
	case code < 200, code == 206, code == 304:
		return false
	case code <= 599:
		return true
	}
	return false
}

// aboutTheRequestMessage says whether a status answers the request
// message that drew it, not the resource: 400, 411, 413, 414, 417, 421 and
// 431 (RFC 9110 §15.5), and 428, 429 and 511, which RFC 6585 says a cache
// MUST NOT store. Stored, with whatever freshness the origin gives every
// answer (nginx's `add_header Cache-Control … always`), one client's
// malformed or oversized request became the page for everyone: the
// cache-poisoned denial of service of "Your Cache Has Fallen" (CPDoS), by
// a header the origin takes smaller than the edge, a meta character, an
// Expect, a long parameter the key leaves out (414), a rate limit one
// client drew (429). Varnish does not store these either.
func aboutTheRequestMessage(code int) bool {
	switch code {
	case 400, 411, 413, 414, 417, 421:
		return true
	}
	return forbiddenToStore(code)
}

// forbiddenToStore says whether RFC 6585 forbids storing a status (428,
// 429, 431, 511): not even a cache rule naming it stores it.
func forbiddenToStore(code int) bool {
	switch code {
	case 428, 429, 431, 511:
		return true
	}
	return false
}

// ruleStores reports whether a cache rule's lifetime stands in for what a
// response of status lacks to be stored (freshness, or a status about the
// request that the rule names): never for one RFC 6585 forbids storing.
func ruleStores(life *rules.Lifetime, status int) bool {
	return life != nil && life.Gives(status) && !forbiddenToStore(status)
}

// effectiveCC returns the directives this cache obeys: the first valid
// targeted field if one is present (RFC 9213 §2.1: then Cache-Control is
// ignored), else Cache-Control. targeted reports which was used.
func (p *Policy) effectiveCC(h http.Header) (cc CacheControl, targeted bool) {
	// A targeted field read as invalid does not govern, but the words
	// no-store, private and no-cache in it still count: "max-age=60;
	// private" in Edge-Cache-Control beside a browser's Cache-Control:
	// max-age=60 was one user's page stored for everyone (a review's
	// TestS64JunkPrivateInATargetedFieldIsNotIgnored).
	var refused CacheControl
	defer func() {
		cc.NoStore = cc.NoStore || refused.NoStore
		cc.Private = cc.Private || refused.Private
		cc.NoCache = cc.NoCache || refused.NoCache
	}()
	for _, name := range p.TargetedFields {
		if len(h.Values(name)) == 0 {
			continue
		}
		var tc CacheControl
		switch name {
		case "Surrogate-Control":
			tc = parseSurrogateControl(h, p.SurrogateDevice)
		case "Edge-Cache-Control":
			// Akamai's field predates RFC 9213 and uses Cache-Control's syntax.
			tc = ParseCacheControl(h, name)
		default:
			var ok bool
			if tc, ok = parseTargeted(h, name); !ok {
				continue
			}
		}
		if tc.Present && !tc.Invalid {
			return tc, true
		}
		refused.NoStore = refused.NoStore || tc.NoStore
		refused.Private = refused.Private || tc.Private
		refused.NoCache = refused.NoCache || tc.NoCache
	}
	return ParseCacheControl(h, "Cache-Control"), false
}

// storable decides whether a response may be stored (RFC 9111 §3) and says
// why not. reqHasAuth is whether the request carried Authorization.
func (p *Policy) storable(method string, reqCC CacheControl, reqHasAuth bool, status int, h http.Header, cc CacheControl, targeted bool) (bool, reason) {
	if method != http.MethodGet {
		return false, whyMethod
	}
	if !understoodStatus(status) {
		return false, whyStatus
	}
	if reqCC.NoStore {
		return false, whyRequestNoStore
	}
	if cc.MustUnderstand {
		// RFC 9111 §5.2.2.3: store only what we understand; then no-store
		// may be ignored, since it is there for caches that do not.
		if !knownStatus(status) {
			return false, whyMustUnderstand
		}
	} else if cc.NoStore {
		return false, whyNoStore
	}
	if cc.Private {
		return false, whyPrivate
	}
	// no-cache="X-Account" and private="X-Account" make the named fields
	// one user's: they are kept out of the stored copy (namedFields), and
	// the rest is stored; unless the lists cannot be honoured that way.
	named, namesRead := namedFields(h, p.TargetedFields)
	if !namesRead {
		return false, whyNoCacheFields
	}
	if reqHasAuth && !cc.Public && cc.SMaxAge == unset && !cc.MustReval {
		return false, whyAuthorization
	}
	if !p.StoreSetCookie && len(h.Values("Set-Cookie")) > 0 && !isNamed(named, "Set-Cookie") {
		// A Set-Cookie the origin names in no-cache="Set-Cookie" (as
		// ASP.NET's public pages that set a cookie do) is the origin
		// saying the rest is anyone's: stored without it.
		return false, whySetCookie
	}
	if _, star := VaryNames(h); star {
		return false, whyVaryStar
	}
	// Last of the reasons, so that a cache rule naming such a status
	// (storableUnder) stands in for this one alone, never for private,
	// no-store or credentials (a review: a rule naming 400 stored one
	// user's private answer for everyone).
	if aboutTheRequestMessage(status) {
		return false, whyRequestError
	}
	// Explicit freshness, public, no-cache (stored but always revalidated),
	// or a heuristically cacheable status.
	if cc.MaxAge != unset || cc.SMaxAge != unset || cc.Public || cc.NoCache || cc.Invalid {
		return true, ""
	}
	if !targeted && len(h.Values("Expires")) > 0 {
		return true, ""
	}
	if heuristicStatus(status) {
		return true, ""
	}
	return false, whyNoFreshness
}

// freshness computes the lifetime of a stored response (RFC 9111 §4.2.1)
// and whether it was heuristic.
func (p *Policy) freshness(status int, h http.Header, cc CacheControl, targeted bool, date time.Time) (time.Duration, bool) {
	if cc.Invalid {
		return 0, false
	}
	if cc.SMaxAge != unset {
		return seconds(cc.SMaxAge), false
	}
	if cc.MaxAge != unset {
		return seconds(cc.MaxAge), false
	}
	if !targeted {
		if vs := h.Values("Expires"); len(vs) > 0 {
			exp, ok := parseHTTPDate(vs[0])
			if !ok || len(vs) > 1 {
				return 0, false // invalid Expires means already expired
			}
			if d := exp.Sub(date); d > 0 {
				return d, false
			}
			return 0, false
		}
	}
	if !heuristicStatus(status) && !cc.Public {
		return 0, false
	}
	lm, ok := parseHTTPDate(h.Get("Last-Modified"))
	if !ok || !lm.Before(date) {
		return 0, true
	}
	d := time.Duration(float64(date.Sub(lm)) * p.HeuristicFraction)
	if d > p.HeuristicMax {
		d = p.HeuristicMax
	}
	return d, true
}

// finishEntry derives the cached freshness fields of e from its headers.
func (p *Policy) finishEntry(e *Entry) {
	cc, targeted := p.effectiveCC(e.Header)
	e.cc = cc
	date, ok := parseHTTPDate(e.Header.Get("Date"))
	if !ok {
		date = e.ResponseTime
	}
	e.lifetime, e.heuristic = p.freshness(e.Status, e.Header, cc, targeted, date)
	e.applyLifetime(targeted)
	// RFC 9111 §4.2.3 age calculation.
	apparent := e.ResponseTime.Sub(date)
	if apparent < 0 {
		apparent = 0
	}
	ageValue, _ := ParseAge(e.Header)
	corrected := ageValue + e.ResponseTime.Sub(e.RequestTime)
	if corrected < apparent {
		corrected = apparent
	}
	e.initialAge = corrected
	e.etag = e.Header.Get("Etag")
	e.lastMod, e.hasLastMod = parseHTTPDate(e.Header.Get("Last-Modified"))
	e.surrogates = e.surrogates[:0]
	for _, name := range [...]string{"Surrogate-Key", "Cache-Tag"} {
		for _, v := range e.Header.Values(name) {
			e.surrogates = append(e.surrogates, splitTags(v)...)
		}
	}
	e.sliceTotal, e.sliceBytes = parseSliceTotal(e.Header)
	e.computeSize()
}

// Age returns the current age of e at now (RFC 9111 §4.2.3).
func (e *Entry) Age(now time.Time) time.Duration {
	resident := now.Sub(e.ResponseTime)
	if resident < 0 {
		resident = 0
	}
	return e.initialAge + resident
}

// Lifetime is the freshness lifetime of e.
func (e *Entry) Lifetime() time.Duration { return e.lifetime }

// mustRevalidate is true when e may never be served without a successful
// validation: no-cache, or soft-purged. A qualified no-cache="field" is
// not among them: the named fields are never in the stored copy
// (namedFields), and the rest may be used as any fresh response.
func (e *Entry) mustRevalidate() bool { return e.cc.NoCache || e.stale.Load() }

// staleForbidden is true when e may never be served stale, even when the
// origin is down (must-revalidate, proxy-revalidate, s-maxage for shared caches).
func (e *Entry) staleForbidden() bool {
	return e.cc.MustReval || e.cc.ProxyReval || e.cc.SMaxAge != unset || e.cc.NoCache
}

// staleWindow returns a directive's window, capped by the ceiling.
func (p *Policy) staleWindow(n int, fallback time.Duration) time.Duration {
	d := fallback
	if n != unset {
		d = seconds(n)
	}
	if d > p.StaleCeiling {
		d = p.StaleCeiling
	}
	return d
}

// splitTags splits a space or comma separated tag list.
func splitTags(v string) []string {
	var out []string
	start := -1
	for i := 0; i <= len(v); i++ {
		if i == len(v) || v[i] == ' ' || v[i] == ',' || v[i] == '\t' {
			if start >= 0 {
				out = append(out, v[start:i])
				start = -1
			}
			continue
		}
		if start < 0 {
			start = i
		}
	}
	return out
}

// containsToken reports whether the comma-separated list v contains tok
// (case-insensitive).
func containsToken(v, tok string) bool {
	for part := range strings.SplitSeq(v, ",") {
		if strings.EqualFold(strings.TrimSpace(part), tok) {
			return true
		}
	}
	return false
}
